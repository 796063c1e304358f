"""The worker's transactional producer: bounded calls, retried when retriable, replaced when wedged.

Invariants:

* Every transactional call (init, send offsets, commit, abort) runs on one helper thread and
  is waited for at most ``OP_TIMEOUT_S + wedge_grace_s`` (10 s by default), beating
  ``/healthz`` meanwhile; one still running then is *wedged* (librdkafka's
  ``send_offsets_to_transaction`` after a broker restart, librdkafka#5456) and raises
  :class:`~streams.errors.ProducerWedged`. A call that times out by librdkafka's own
  ``OP_TIMEOUT_S`` is retriable and is retried, so a slow broker costs retries, not a wedge.
* :meth:`submit_transaction` runs a whole transaction (begin, produce, send offsets, commit)
  on that thread and returns at once: the caller keeps working and asks :meth:`check` for
  the outcome; at most one transaction is in flight (the thread is single).
* A wedged producer is left behind with its thread (:attr:`abandoned`) and a new one with the
  same ``transactional.id`` takes over: its ``init_transactions`` fences the old one and
  completes or aborts its open transaction before returning, so the committed offsets read
  next are final.
* :attr:`in_txn` is true exactly while a transaction begun here is neither committed nor
  aborted (what ``close`` and the abort paths look at).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from streams.errors import AbortableError, FatalError, ProducerWedged, RetriableError, StreamError, classify
from streams.kafka.retry import call_with_retry

__all__ = ["OP_TIMEOUT_S", "WEDGE_GRACE_S", "Record", "TransactionalProducer", "transaction_error"]

_log = logging.getLogger("ttsflow.worker")

OP_TIMEOUT_S = 5.0  # librdkafka's own timeout for each transactional call (a timeout is retried)
WEDGE_GRACE_S = 5.0  # a call still running this long past OP_TIMEOUT_S is wedged: given up after 10 s

Record = tuple[str, bytes, bytes, "int | None"]  # topic, key, value, partition (None: the partitioner's)


def transaction_error(e: Exception) -> StreamError:
    """A ``KafkaException`` inside an open transaction, classified: a retriable one becomes
    abortable (the open transaction cannot be resumed: abort and redo)."""
    exc = classify(e, during="transaction")
    if type(exc) is RetriableError:
        exc = AbortableError(str(exc))
    return exc


class TransactionalProducer:
    """One ``transactional.id``'s producer, replaced under the same id when a call wedges.
    Used from the loop's thread only."""

    def __init__(self, new_producer: Callable[[], Any], *, producer: Any = None, wedge_grace_s: float,
                 heartbeat: Callable[[], None], on_replaced: Callable[[], None],
                 stopping: Callable[[], bool]) -> None:
        self._new = new_producer
        self._p = producer or new_producer()
        self.wedge_grace_s = wedge_grace_s
        self._heartbeat = heartbeat
        self._on_replaced = on_replaced
        self._stopping = stopping
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="txn")
        self.abandoned: list[Any] = []  # producers replaced while a call of theirs was wedged
        self.in_txn = False
        self._call_since: float | None = None  # when the txn thread's current librdkafka call began

    # -- bounded calls ----------------------------------------------------------------
    def _bounded(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the txn thread and wait for it, beating /healthz, at most
        ``OP_TIMEOUT_S + wedge_grace_s``; longer raises :class:`ProducerWedged`."""
        fut = self._pool.submit(fn)
        deadline = time.monotonic() + OP_TIMEOUT_S + self.wedge_grace_s
        while True:
            try:
                return fut.result(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                self._heartbeat()
                if time.monotonic() >= deadline:
                    raise ProducerWedged(f"{what} still running {self.wedge_grace_s:.0f} s past its "
                                         f"{OP_TIMEOUT_S:.0f} s timeout") from None

    def _call(self, what: str, fn: Callable[[], Any], *, in_txn: bool = False) -> Any:
        """:meth:`_bounded` under :func:`call_with_retry` (retriable errors backed off)."""
        return call_with_retry(what, lambda: self._bounded(what, fn), stopping=self._stopping, in_txn=in_txn)

    # -- the transaction ----------------------------------------------------------------
    def init_transactions(self) -> None:
        """init_transactions on the current producer (fences older instances of this transactional.id
        and aborts their open transaction); a wedged one is replaced by a fresh producer."""
        while True:
            try:
                self._call("init_transactions", lambda: self._p.init_transactions(OP_TIMEOUT_S))
                return
            except ProducerWedged as e:
                if self._stopping():
                    raise FatalError(f"stopping with a wedged producer: {e}") from e
                _log.error("event=producer_wedged op=init_transactions error=%s", e)
                self._abandon()

    def submit_transaction(self, records: list[Record], offsets_topic: str, offsets: dict[int, int],
                           group_metadata: Any) -> Future[float]:
        """Run one transaction on the txn thread: begin, produce ``records`` in order, send ``offsets``
        (with the consumer's group metadata: a zombie is fenced), commit. Returns at once; the future
        gives the transaction's seconds, or raises its classified error (a retriable one as
        abortable: the open transaction cannot be resumed). :meth:`check` says when it is wedged."""
        from confluent_kafka import KafkaException, TopicPartition

        tps = [TopicPartition(offsets_topic, p, o) for p, o in sorted(offsets.items())]
        producer = self._p  # this transaction's, even if a wedge replaces it meanwhile
        self.in_txn = True  # until the future says committed

        def timed(what: str, fn: Callable[[], Any]) -> Any:
            def call() -> Any:
                self._call_since = time.monotonic()
                try:
                    return fn()
                finally:
                    self._call_since = None
            return call_with_retry(what, call, stopping=self._stopping, in_txn=True)

        def run() -> float:
            t0 = time.perf_counter()
            try:
                producer.begin_transaction()
                for topic, key, value, partition in records:
                    _produce(producer, topic, key, value, partition)
                if tps:
                    timed("send_offsets_to_transaction",
                          lambda: producer.send_offsets_to_transaction(tps, group_metadata, OP_TIMEOUT_S))
                timed("commit_transaction", lambda: producer.commit_transaction(OP_TIMEOUT_S))
            except KafkaException as e:
                raise transaction_error(e) from e
            except RetriableError as e:  # still retrying while stopping: the transaction is given up
                raise AbortableError(str(e)) from e
            return time.perf_counter() - t0

        return self._pool.submit(run)

    def check(self, fut: Future[float]) -> float | None:
        """The outcome of a :meth:`submit_transaction`: its seconds once committed (``in_txn`` is then
        false), None while it runs; raises its error, or :class:`ProducerWedged` when its current call
        has run ``OP_TIMEOUT_S + wedge_grace_s``."""
        if fut.done():
            took = fut.result()  # raises the transaction's error: in_txn stays true, the caller aborts
            self.in_txn = False
            return took
        since = self._call_since
        if since is not None and time.monotonic() - since >= OP_TIMEOUT_S + self.wedge_grace_s:
            raise ProducerWedged(f"a transactional call still running {self.wedge_grace_s:.0f} s past its "
                                 f"{OP_TIMEOUT_S:.0f} s timeout")
        return None

    def begin(self) -> None:
        self._p.begin_transaction()
        self.in_txn = True

    def produce(self, topic: str, key: bytes, value: bytes, partition: int | None = None) -> None:
        _produce(self._p, topic, key, value, partition)

    def send_offsets(self, topic: str, offsets: dict[int, int], group_metadata: Any) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
        self._call("send_offsets_to_transaction",
                   lambda: self._p.send_offsets_to_transaction(tps, group_metadata, OP_TIMEOUT_S), in_txn=True)

    def commit(self) -> None:
        self._call("commit_transaction", lambda: self._p.commit_transaction(OP_TIMEOUT_S), in_txn=True)
        self.in_txn = False

    def abort(self) -> None:
        """Abort the open transaction (retried; :class:`ProducerWedged` when it hangs)."""
        self._call("abort_transaction", lambda: self._p.abort_transaction(OP_TIMEOUT_S), in_txn=True)
        self.in_txn = False

    def abort_quietly(self) -> None:
        """One bounded abort whose failure is logged, not raised (fenced: fatal, raised)."""
        from confluent_kafka import KafkaException

        try:
            self._bounded("abort_transaction", lambda: self._p.abort_transaction(OP_TIMEOUT_S))
        except KafkaException as e:
            exc = classify(e, during="abort")
            if isinstance(exc, FatalError):
                raise exc from e
            _log.warning("event=abort_failed error=%s", e)
        except ProducerWedged as e:
            _log.warning("event=abort_failed error=%s", e)
        self.in_txn = False

    # -- wedged -------------------------------------------------------------------------
    def _abandon(self) -> None:
        """Leave the current producer (and the thread stuck in it) behind; start a new one."""
        self.abandoned.append(self._p)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="txn")
        self._p = self._new()
        self._call_since = None
        self._on_replaced()

    def replace(self) -> None:
        """A call is wedged: a new producer with the same transactional.id takes over (its
        init_transactions fences the old one and ends the open transaction)."""
        self._abandon()
        self.in_txn = False
        self.init_transactions()

    def close(self) -> None:
        self._p.flush(10)
        self._pool.shutdown(wait=False, cancel_futures=True)  # a call wedged at close is left behind


def _produce(producer: Any, topic: str, key: bytes, value: bytes, partition: int | None) -> None:
    kwargs: dict[str, Any] = {"key": key, "value": value}
    if partition is not None:
        kwargs["partition"] = partition
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.1)
