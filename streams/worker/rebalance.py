"""What a partition brings when assigned and leaves when revoked or lost.

Invariant: a partition admits records only after its answered requests are loaded from
its partition of the done log (so a new owner never answers twice), and a partition leaves
with nothing of its work left in memory: the new owner redoes what was not committed from
the committed offsets. Committing what is durable before a revoke is the loop's
(:meth:`~streams.worker.loop.Worker.on_revoke` asks the checkpoint); these run inside
``consume()``, between loop steps, on the loop's thread.
"""

from __future__ import annotations

import logging
from typing import Any

from streams.errors import FatalError
from streams.kafka.consumer import PartitionedConsumer
from streams.worker.done_log import DoneLog
from streams.worker.ledger import Ledger
from streams.worker.parts import PartMaker

__all__ = ["Rebalance"]

_log = logging.getLogger("ttsflow.worker")


class Rebalance:
    """Partitions in and out: the done log, the ledger, the consumer's view and the batcher agree."""

    def __init__(self, *, ledger: Ledger, done_log: DoneLog, consumer: PartitionedConsumer, parts: PartMaker,
                 metrics: Any, segments_topic: str) -> None:
        self.ledger, self.done_log, self.consumer, self.parts = ledger, done_log, consumer, parts
        self.metrics, self.segments_topic = metrics, segments_topic

    def assign(self, new: set[int]) -> None:
        too_high = sorted(p for p in new if p >= self.done_log.partitions)
        if too_high:  # a segment of partition p records its request in done partition p
            raise FatalError(f"{self.segments_topic} partitions {too_high} have no partition in "
                             f"{self.done_log.topic} ({self.done_log.partitions} partitions); add partitions to it")
        self.ledger.assigned(new)
        for p, answered in self.done_log.load(new).items():
            self.ledger.load_done(p, answered)
        self.consumer.assign(new)
        self.metrics.assigned(len(self.consumer.assigned))
        _log.info("event=assigned partitions=%s now=%s", sorted(new), sorted(self.consumer.assigned))

    def forget(self, gone: set[int]) -> None:
        self.consumer.revoke(gone)
        self.parts.forget(gone)
        self.ledger.forget(gone)
        self.metrics.assigned(len(self.consumer.assigned))
