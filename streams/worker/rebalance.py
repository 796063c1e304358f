"""The worker's rebalance callbacks: what a partition brings when assigned and leaves when revoked or lost.

Invariant: a partition admits records only after its answered requests are loaded from
its partition of the done log (so a new owner never answers twice), and a partition
leaves with what is durable committed (revoked) or with nothing of it left in memory
(revoked after a failed commit, lost): the new owner redoes the rest from the committed
offsets. The callbacks run inside ``consume()``, between loop steps, on the loop's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from storage.errors import S3Unavailable
from streams.errors import AbortableError, FatalError
from streams.kafka.consumer import PartitionedConsumer
from streams.kafka.producer import TransactionalProducer
from streams.worker.done_log import DoneLog
from streams.worker.ledger import Ledger
from streams.worker.parts import PartMaker
from streams.worker.recovery import Recovery

__all__ = ["Rebalance"]

_log = logging.getLogger("ttsflow.worker")


class Rebalance:
    """``on_assign`` / ``on_revoke`` / ``on_lost`` for :meth:`PartitionedConsumer.subscribe`."""

    def __init__(self, *, ledger: Ledger, done_log: DoneLog, consumer: PartitionedConsumer, parts: PartMaker,
                 producer: TransactionalProducer, recovery: Recovery, metrics: Any, segments_topic: str,
                 commit_durable: Callable[[], None]) -> None:
        self.ledger, self.done_log, self.consumer, self.parts = ledger, done_log, consumer, parts
        self.producer, self.recovery, self.metrics = producer, recovery, metrics
        self.segments_topic = segments_topic
        self.commit_durable = commit_durable  # finish the work in flight, then commit (forced)
        self.done_partitions = 1 << 30  # known after the worker's start(); tests that skip start() have no limit
        self.closing = False  # set by the worker's close(): a revoke then commits nothing

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        new = {tp.partition for tp in partitions}
        too_high = sorted(p for p in new if p >= self.done_partitions)
        if too_high:  # a segment of partition p records its request in done partition p
            raise FatalError(f"{self.segments_topic} partitions {too_high} have no partition in "
                             f"{self.done_log.topic} ({self.done_partitions} partitions); add partitions to it")
        self.ledger.assigned(new)
        for p, answered in self.done_log.load(new).items():
            self.ledger.load_done(p, answered)
        self.consumer.assign(new)
        self.metrics.assigned(len(self.consumer.assigned))
        _log.info("event=assigned partitions=%s now=%s", sorted(new), sorted(self.consumer.assigned))

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {tp.partition for tp in partitions}
        if not self.closing:
            # commit what is durable before giving the partitions away; the rest is redone by the new owner
            try:
                self.commit_durable()
            except (AbortableError, S3Unavailable) as e:
                _log.warning("event=commit_on_revoke_failed error=%s", e)
                if self.producer.in_txn:
                    self.producer.abort_quietly()
                    self.metrics.transaction(False)
                self.recovery.redo_from_committed(self.consumer.assigned - gone)
        self._forget(gone)
        _log.info("event=revoked partitions=%s now=%s", sorted(gone), sorted(self.consumer.assigned))

    def on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {tp.partition for tp in partitions}
        _log.warning("event=partitions_lost partitions=%s", sorted(gone))
        self._forget(gone)

    def _forget(self, gone: set[int]) -> None:
        self.consumer.revoke(gone)
        self.parts.forget(gone)
        self.ledger.forget(gone)
        self.metrics.assigned(len(self.consumer.assigned))
