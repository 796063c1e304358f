"""The worker's reactions that redo work from what is committed: after an abort, a wedged producer, S3 down.

Invariant: after each reaction nothing uncommitted survives in memory (batches, calls and
joins in flight, unanswered requests, answers not yet produced) and every assigned
partition is sought back to its committed offset, or stays pending until it can be
(:class:`~streams.kafka.consumer.PartitionedConsumer`). So a failure anywhere repeats only
invisible work: uploads are content-addressed, completions are produced only in a
committed transaction, and the done set (durable) is kept. The transaction itself is the
checkpoint's: recovery only asks it to settle what is in flight before dropping work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from storage.errors import S3Unavailable
from storage.s3 import AudioStore
from streams.kafka import retry as kafka_retry
from streams.kafka.consumer import PartitionedConsumer
from streams.worker.checkpoint import Checkpoint
from streams.worker.joiner import Joiner
from streams.worker.ledger import Ledger
from streams.worker.parts import PartMaker

__all__ = ["Recovery"]

_log = logging.getLogger("ttsflow.worker")


class Recovery:
    """Drop what is in memory, rewind to the committed offsets; per failure, what comes first."""

    def __init__(self, *, ledger: Ledger, parts: PartMaker, joiner: Joiner, consumer: PartitionedConsumer,
                 checkpoint: Checkpoint, store: AudioStore, metrics: Any, clock: Callable[[], float],
                 stopping: Callable[[], bool]) -> None:
        self.ledger, self.parts, self.joiner, self.consumer = ledger, parts, joiner, consumer
        self.checkpoint = checkpoint
        self.store, self.metrics, self.clock, self.stopping = store, metrics, clock, stopping

    def drop_all(self) -> None:
        """Forget all in-memory work (nothing of it was committed); the done set is kept. A transaction
        in flight is over first (applied if it committed), so what it carried is either durable or redone."""
        self.checkpoint.settle()
        self.parts.drop()
        self.joiner.drop()
        self.ledger.drop_all(self.consumer.assigned)

    def redo_from_committed(self, partitions: set[int] | None = None) -> None:
        self.drop_all()
        self.consumer.rewind(self.consumer.assigned if partitions is None else partitions)

    def s3_outage(self, err: BaseException) -> None:
        """S3 is down: commit nothing, forget in-memory work, keep polling (paused) until it answers."""
        self.metrics.s3_error()
        _log.error("event=s3_unavailable error=%s", err)
        attempt = 0
        while not self.stopping():
            self.drop_all()
            self.consumer.set_paused(set(self.consumer.assigned))
            until = self.clock() + kafka_retry.backoff(attempt)
            while self.clock() < until and not self.stopping():
                self.metrics.heartbeat()
                self.consumer.consume(100, 0.1)  # paused: keeps the membership alive; records of a
                self.consumer.set_paused(set(self.consumer.assigned))  # partition assigned meanwhile: rewound below
            try:
                self.store.ping()
                break
            except S3Unavailable as e:
                self.metrics.s3_error()
                attempt += 1
                _log.warning("event=s3_still_unavailable attempt=%d error=%s", attempt, e)
        self.redo_from_committed()
        self.consumer.set_paused(set())
        _log.info("event=s3_recovered")
