"""The worker's transaction, owned in one place: it alone begins, commits and aborts.

Everyone else asks: the loop (:meth:`Checkpoint.start`, :meth:`Checkpoint.poll`), a revoke
(:meth:`Checkpoint.commit_durable`), recovery (:meth:`Checkpoint.settle`), any abortable
error (:meth:`Checkpoint.abort`) and shutdown (:meth:`Checkpoint.abort_quietly`). Only this
module calls ``begin_transaction``, ``commit_transaction`` or ``abort_transaction``
(tests/unit/test_layering.py fails otherwise). Invariants:

* **One transaction, all or nothing**: a step's chunks, completions, done records
  (:meth:`~streams.worker.core.WorkerCore.take_commit` says which) and the consumer offsets
  (sent with the group metadata, so a zombie is fenced) commit together or not at all.
* **Offsets follow durability**: the ledger learns that the offsets and answers are durable
  (:meth:`~streams.worker.core.WorkerCore.committed`) only once the commit returned.
* **Pipelined**: the transaction runs on the producer's thread while the loop polls and
  synthesizes; at most one is in flight (:meth:`Checkpoint.start` does nothing while one runs).
* **Each failure has one answer, decided here**: a commit that times out is retried, never
  aborted; an abortable error (the transaction's, or the loop's own) aborts the open
  transaction; a call still running 2 s past its own 3 s timeout (librdkafka#5456, #5511:
  ``send_offsets_to_transaction`` hangs once the group coordinator's broker died and left the
  metadata) is *wedged*: the producer is replaced under the same ``transactional.id`` (its
  ``init_transactions`` fences the old one and ends its open transaction), on a revoke too;
  a fenced producer is fatal. After an abort or a replacement the caller redoes its work from the
  committed offsets (:class:`~streams.worker.recovery.Recovery`), so only invisible work repeats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from streams.errors import AbortableError, FatalError, ProducerBroken, ProducerWedged, RetriableError, StreamError
from streams.kafka.consumer import PartitionedConsumer
from streams.kafka.producer import OP_TIMEOUT_S, TransactionalProducer, produce_record, transaction_error
from streams.worker.core import TxnPlan, WorkerCore

__all__ = ["Checkpoint"]

_log = logging.getLogger("ttsflow.worker")

_BROKEN_LIMIT = 3  # broken producers replaced within the window; one more is fatal (exit, restart)
_BROKEN_WINDOW_S = 300.0


def _broken(e: FatalError) -> ProducerBroken | None:
    """``e`` as :class:`ProducerBroken` when librdkafka broke the producer (not fenced), else None."""
    err = getattr(e, "kafka_error", None)
    if err is None:
        return None
    from confluent_kafka import KafkaException

    exc = transaction_error(KafkaException(err))
    return exc if isinstance(exc, ProducerBroken) else None


@dataclass(slots=True)
class _InFlight:
    fut: Future[float]
    plan: TxnPlan


class Checkpoint:
    """Runs each transaction the core plans on the producer's thread and applies its outcome."""

    def __init__(self, *, core: WorkerCore, producer: TransactionalProducer, consumer: PartitionedConsumer,
                 segments_topic: str, metrics: Any, clock: Callable[[], float], interval_s: float,
                 transactional_id: str) -> None:
        self.core, self.producer, self.consumer = core, producer, consumer
        self.segments_topic, self.metrics, self.clock = segments_topic, metrics, clock
        self.interval_s = interval_s
        self.transactional_id = transactional_id
        self._inflight: _InFlight | None = None
        self._open = False  # a transaction begun here is neither committed nor aborted
        self._last = clock()
        self._broken_at: list[float] = []  # when producers broke lately (ProducerBroken)

    @property
    def in_flight(self) -> bool:
        return self._inflight is not None

    def futures(self) -> list[Future[Any]]:
        return [self._inflight.fut] if self._inflight is not None else []

    def open(self) -> None:
        """``init_transactions``: fences older instances of this transactional.id, ends what they left open."""
        self.producer.init_transactions()

    # -- the transaction -----------------------------------------------------------------
    def start(self, *, force: bool = False) -> bool:
        """Begin the next transaction if none is in flight and one is due; True if one began."""
        if self._inflight is not None or not self.core.commit_due(
                force=force, since_last_s=self.clock() - self._last, interval_s=self.interval_s):
            return False
        plan = self.core.take_commit(self.consumer.assigned)
        fut = self.producer.run(self._transaction(plan, self.consumer.group_metadata()))
        self._inflight, self._open, self._last = _InFlight(fut, plan), True, self.clock()
        return True

    def _transaction(self, plan: TxnPlan, group_metadata: Any) -> Callable[[Any], float]:
        """The producer thread's work: begin, produce in order, send offsets, commit; its seconds,
        or its classified error (a retriable one as abortable: an open transaction cannot resume)."""
        from confluent_kafka import KafkaException, TopicPartition

        tps = [TopicPartition(self.segments_topic, p, o) for p, o in sorted(plan.offsets.items())]

        def work(p: Any) -> float:
            t0 = time.perf_counter()
            try:
                p.begin_transaction()
                for record in plan.records:
                    produce_record(p, record)
                if tps:
                    self.producer.call("send_offsets_to_transaction",
                                       lambda: p.send_offsets_to_transaction(tps, group_metadata, OP_TIMEOUT_S))
                self.producer.call("commit_transaction", lambda: p.commit_transaction(OP_TIMEOUT_S))
            except KafkaException as e:
                raise transaction_error(e) from e
            except RetriableError as e:  # still retrying while stopping: the transaction is given up
                raise AbortableError(str(e)) from e
            except FatalError as e:  # from a retried call: librdkafka broke the producer, or fenced it
                broken = _broken(e)
                if broken is None:
                    raise
                raise broken from e
            return time.perf_counter() - t0

        return work

    def poll(self) -> None:
        """Apply the in-flight transaction if it committed; raise its error, or ``ProducerWedged``."""
        inflight = self._inflight
        if inflight is None:
            return
        try:
            took = self.producer.check(inflight.fut)
        except BaseException:
            self._inflight = None  # still open: the caller's abort ends it
            raise
        if took is None:
            return
        self._inflight, self._open = None, False
        self.core.committed(inflight.plan)
        self.metrics.transaction(True, took)

    def wait(self) -> None:
        """Block until the in-flight transaction is over (applied, or its error raised)."""
        while self._inflight is not None:
            self.metrics.heartbeat()
            self.poll()
            if self._inflight is not None:
                time.sleep(0.002)

    def commit_durable(self) -> None:
        """Synchronously (before a revoke, on a graceful stop): the in-flight one, then what is due."""
        self.wait()
        if self.start(force=True):
            self.wait()

    # -- failures ----------------------------------------------------------------------------
    def settle(self) -> None:
        """Before in-memory work is dropped or partitions move: the in-flight transaction is over.
        A committed one is applied; a failed one is aborted here; a wedged one is left to a fresh
        producer. Raises only :class:`~streams.errors.FatalError` (fenced)."""
        try:
            self.wait()
        except ProducerWedged as e:
            self._replace(e)
        except FatalError:
            raise
        except StreamError as e:
            _log.warning("event=transaction_failed error=%s", e)
            self.metrics.transaction(False)
            self._abort_once()

    def abort(self, reason: BaseException) -> None:
        """An abortable error (the transaction's or the loop's own) or a wedged producer: end the open
        transaction, by aborting it or, when a call wedges, by replacing the producer. The caller then
        redoes from the committed offsets."""
        if isinstance(reason, ProducerWedged):
            self._replace(reason)
            return
        _log.warning("event=transaction_abort error=%s", reason)
        self.metrics.transaction(False)
        self.settle()  # an abortable error of the loop's own: let the one in flight end first
        if not self._open:
            return
        try:
            self.producer.bounded("abort_transaction", lambda p: p.abort_transaction(OP_TIMEOUT_S))
        except ProducerWedged as e:
            self._replace(e)
            return
        except FatalError as e:
            broken = _broken(e)
            if broken is None:
                raise
            self._replace(broken)
            return
        self._open = False

    def abort_quietly(self, reason: BaseException | None = None) -> None:
        """Shutdown, or a revoke whose commit failed: settle, then end what is still open: one bounded
        abort, its failure logged (fenced: raised); or, when the commit wedged (``reason`` is
        :class:`ProducerWedged`), a fresh producer, since the txn thread is still stuck in the wedged
        call and an abort queued behind it would only wedge too (10 s more, seen on a revoke after a
        group coordinator's death). Ending it now matters: until it ends, the partitions' next owner
        cannot read their committed offsets (the coordinator holds the pending transactional ones)."""
        if reason is not None:
            _log.warning("event=commit_failed error=%s", reason)
        self.settle()
        if not self._open:
            return
        if isinstance(reason, ProducerWedged):
            self._replace(reason)
            return
        self.metrics.transaction(False)
        self._abort_once()

    def _abort_once(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self.producer.bounded("abort_transaction", lambda p: p.abort_transaction(OP_TIMEOUT_S), retry=False)
        except KafkaException as e:
            exc = transaction_error(e, during="abort")
            if isinstance(exc, ProducerBroken):
                self._replace(exc)
                return
            if isinstance(exc, FatalError):
                raise exc from e
            _log.warning("event=abort_failed error=%s", e)
        except ProducerWedged as e:
            _log.warning("event=abort_failed error=%s", e)
        self._open = False

    def _replace(self, err: BaseException) -> None:
        """A transactional call is wedged, or librdkafka broke the producer (:class:`ProducerBroken`):
        a new producer with the same transactional.id takes over; the in-flight transaction's outcome
        no longer matters (the new init completes or aborts it). A producer that keeps breaking
        (``_BROKEN_LIMIT`` times in ``_BROKEN_WINDOW_S``) is fatal after all."""
        if isinstance(err, ProducerBroken):
            now = time.monotonic()
            self._broken_at = [t for t in self._broken_at if now - t < _BROKEN_WINDOW_S] + [now]
            if len(self._broken_at) > _BROKEN_LIMIT:
                raise FatalError(f"producer broken {len(self._broken_at)} times in {_BROKEN_WINDOW_S:.0f} s: {err}")
            _log.error("event=producer_broken error=%s; replacing the producer", err)
        else:
            _log.error("event=producer_wedged error=%s; replacing the producer", err)
        self.metrics.transaction(False)
        self._inflight = None
        self.producer.replace()
        self._open = False
        _log.info("event=producer_replaced transactional_id=%s", self.transactional_id)

    def close(self) -> None:
        self.producer.close()
