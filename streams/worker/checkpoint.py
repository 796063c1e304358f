"""The worker's transaction step, pipelined: what commits together, and at most one transaction in flight.

Invariants:

* **One transaction, all or nothing**: a step's chunks (``tts.chunks``, those whose segment
  the step's offsets pass, in ``seq`` order), its completions (``tts.completed``), a done
  record per completion (``tts.worker.done``) and the consumer offsets (sent with the
  group metadata, so a zombie is fenced) commit together or not at all.
* **Offsets follow durability**: the offsets are the ledger's committed-offset rule at the
  moment the transaction starts (:meth:`~streams.worker.ledger.Ledger.to_commit`); what is
  done later waits for the next one. The ledger learns that they are durable
  (:meth:`~streams.worker.ledger.Ledger.committed`) only once the commit returned.
* **Pipelined**: the transaction runs on the producer's thread while the loop polls and
  synthesizes the next work; at most one is in flight (:meth:`start` does nothing while one
  runs). A transaction starts as soon as none is in flight and answers or chunks are due,
  or when offsets moved and ``interval_s`` passed since the last one: nothing waits for a
  batch that is not done.
* **Failures**: :meth:`poll` raises the in-flight transaction's error (the loop aborts and
  redoes from the committed offsets, so only invisible work repeats) or
  :class:`~streams.errors.ProducerWedged` when a call of it hangs. Every path that drops
  in-memory work or gives partitions away first :meth:`settle`\\ s the in-flight one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from schemas import Chunk, encode
from streams.errors import FatalError, ProducerWedged, StreamError
from streams.kafka.consumer import PartitionedConsumer
from streams.kafka.producer import Record, TransactionalProducer
from streams.settings import KafkaSettings
from streams.worker.done_log import DoneLog
from streams.worker.ledger import Answer, ChunkDue, Ledger

__all__ = ["Checkpoint"]

_log = logging.getLogger("ttsflow.worker")


@dataclass(slots=True)
class _InFlight:
    fut: Future[float]
    offsets: dict[int, int]
    answers: list[Answer]


class Checkpoint:
    """Builds each transaction from the ledger, runs it on the producer's thread, applies its outcome."""

    def __init__(self, *, kafka: KafkaSettings, ledger: Ledger, consumer: PartitionedConsumer,
                 producer: TransactionalProducer, done_log: DoneLog, metrics: Any,
                 chunk: Callable[[ChunkDue], Chunk], clock: Callable[[], float], interval_s: float) -> None:
        self.kafka, self.ledger, self.consumer, self.producer = kafka, ledger, consumer, producer
        self.done_log, self.metrics, self.chunk, self.clock = done_log, metrics, chunk, clock
        self.interval_s = interval_s
        self._inflight: _InFlight | None = None
        self._last = clock()

    @property
    def in_flight(self) -> bool:
        return self._inflight is not None

    def futures(self) -> list[Future[Any]]:
        return [self._inflight.fut] if self._inflight is not None else []

    def due(self, *, force: bool = False) -> bool:
        """Answers or chunks to produce, or offsets that moved (rate-limited to ``interval_s`` unless forced)."""
        if self.ledger.answers:
            return True
        if not self.ledger.tracker.advanced():
            return False
        return force or bool(self.ledger.chunks) or self.clock() - self._last >= self.interval_s

    # -- the transaction -----------------------------------------------------------------
    def start(self, *, force: bool = False) -> bool:
        """Begin the next transaction if none is in flight and one is due; True if one began."""
        if self._inflight is not None or not self.due(force=force):
            return False
        # 1) what commits: the answers (from here every segment of theirs counts as done), the
        #    offsets the committed-offset rule allows now, the chunks those offsets pass and those of
        #    the answered requests
        answers = self.ledger.take_answers()
        offsets = self.ledger.to_commit(self.consumer.assigned)
        chunks = self.ledger.take_chunks(offsets, answers)
        # 2) the records, in order: chunks before their request's completion, done record with it
        records: list[Record] = [(self.kafka.topic_chunks, c.user_id.encode(), encode(self.chunk(c)), None)
                                 for c in chunks]
        for a in answers:
            records.append((self.kafka.topic_completed, a.user_id.encode(), encode(a.completion), None))
            records.append(self.done_log.record(a))
        # 3) begin, produce, send offsets with the group metadata, commit: on the producer's thread
        fut = self.producer.submit_transaction(records, self.kafka.topic_segments, offsets,
                                               self.consumer.group_metadata())
        self._inflight = _InFlight(fut, offsets, answers)
        self._last = self.clock()
        return True

    def poll(self) -> None:
        """Apply the in-flight transaction if it committed; raise its error, or ``ProducerWedged``."""
        inflight = self._inflight
        if inflight is None:
            return
        try:
            took = self.producer.check(inflight.fut)
        except BaseException:
            self._inflight = None
            raise
        if took is None:
            return
        self._inflight = None
        # 4) committed: the offsets and answers are durable now
        self.ledger.committed(inflight.offsets, inflight.answers)
        self.metrics.transaction(True, took)
        for a in inflight.answers:
            self.metrics.completion(a.completion.status, a.e2e_s)

    def wait(self) -> None:
        """Block until the in-flight transaction is over (applied, or its error raised)."""
        while self._inflight is not None:
            self.metrics.heartbeat()
            self.poll()
            if self._inflight is not None:
                time.sleep(0.002)

    def commit(self, *, force: bool = False) -> None:
        """A synchronous step (before a revoke, on a graceful stop): the in-flight one, then what is due."""
        self.wait()
        if self.start(force=force):
            self.wait()

    # -- before dropping work ------------------------------------------------------------
    def settle(self) -> None:
        """Before in-memory work is dropped or partitions move: the in-flight transaction is over.
        A committed one is applied; a failed one is aborted here (the caller redoes from the
        committed offsets anyway); a wedged one is left to a fresh producer (its init fences it).
        Raises only :class:`~streams.errors.FatalError` (fenced)."""
        try:
            self.wait()
        except ProducerWedged as e:
            _log.error("event=producer_wedged error=%s; replacing the producer", e)
            self.metrics.transaction(False)
            self.producer.replace()
        except FatalError:
            raise
        except StreamError as e:
            _log.warning("event=transaction_failed error=%s", e)
            self.metrics.transaction(False)
            if self.producer.in_txn:
                self.producer.abort_quietly()

    def forget(self) -> None:
        """The in-flight transaction's producer is being replaced: its outcome no longer matters
        (the new producer's init_transactions completes or aborts it; work redone from committed)."""
        self._inflight = None
