"""Micro-batching with an injected clock: length buckets, groups, max size, max wait.

Guarantees:

* A batch holds items of one length bucket and one group only (a group is whatever must
  be shared by a model call: voice, speed). Buckets are the ascending edges given; an
  item longer than the last edge goes to an overflow bucket of its own.
* Within a (bucket, group) queue items leave in the order they were added (FIFO).
* A queue is ready when it holds ``max_batch`` items or its oldest item has waited
  ``max_wait_s``; of the ready queues ``take`` serves the one whose oldest item is
  oldest, so no queue starves behind a busy one.

A plain class: no threads, no sleeping, no Kafka. Time comes from ``clock`` (at ``add``)
and from the ``now`` the caller passes, so tests drive it with a fake clock.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from streams.settings import BatchingSettings

__all__ = ["MicroBatcher"]

T = TypeVar("T")


class MicroBatcher(Generic[T]):
    def __init__(self, max_batch: int, max_wait_s: float, buckets: tuple[int, ...],
                 clock: Callable[[], float]) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_wait_s < 0:
            raise ValueError("max_wait_s must be >= 0")
        if list(buckets) != sorted(set(buckets)):
            raise ValueError(f"buckets must ascend without repeats, got {buckets}")
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.buckets = tuple(buckets)
        self._clock = clock
        self._queues: dict[tuple[int, Hashable], deque[tuple[float, T]]] = {}
        self._n = 0

    @classmethod
    def from_section(cls, batching: BatchingSettings, clock: Callable[[], float]) -> MicroBatcher[T]:
        """The batcher the batching section describes (``max_batch``, ``max_wait_ms``, ``length_buckets``)."""
        return cls(batching.max_batch, batching.max_wait_ms / 1000, batching.buckets, clock)

    def bucket_of(self, length: int) -> int:
        """Index of the bucket for an item of this length (len(buckets) = overflow)."""
        return bisect.bisect_left(self.buckets, length)

    def add(self, item: T, length: int, group: Hashable = None) -> None:
        key = (self.bucket_of(length), group)
        self._queues.setdefault(key, deque()).append((self._clock(), item))
        self._n += 1

    def __len__(self) -> int:
        return self._n

    def _ready_key(self, now: float) -> tuple[int, Hashable] | None:
        best: tuple[int, Hashable] | None = None
        best_t = 0.0
        for key, q in self._queues.items():
            head_t = q[0][0]
            if len(q) >= self.max_batch or now >= head_t + self.max_wait_s:
                if best is None or head_t < best_t:
                    best, best_t = key, head_t
        return best

    def ready(self, now: float) -> bool:
        """Whether ``take(now)`` would return a batch."""
        return self._ready_key(now) is not None

    def take_with_wait(self, now: float, *, force: bool = False) -> list[tuple[T, float]]:
        """One batch with each item's wait in seconds; empty if none is ready.

        ``force`` takes the oldest queue even if it is neither full nor expired (draining).
        """
        key = self._ready_key(now)
        if key is None and force and self._queues:
            key = min(self._queues, key=lambda k: self._queues[k][0][0])
        if key is None:
            return []
        q = self._queues[key]
        out = [q.popleft() for _ in range(min(self.max_batch, len(q)))]
        if not q:
            del self._queues[key]
        self._n -= len(out)
        return [(item, now - t) for t, item in out]

    def take(self, now: float, *, force: bool = False) -> list[T]:
        """One batch from a single (bucket, group) queue; empty if none is ready."""
        return [item for item, _ in self.take_with_wait(now, force=force)]

    def next_deadline(self) -> float | None:
        """When the next queue becomes ready (already past for a full one); None when empty."""
        best: float | None = None
        for q in self._queues.values():
            t = q[0][0] if len(q) >= self.max_batch else q[0][0] + self.max_wait_s
            best = t if best is None else min(best, t)
        return best

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        """Remove and return every queued item for which ``pred`` is true (revoked partitions)."""
        removed: list[T] = []
        for key in list(self._queues):
            q = self._queues[key]
            keep: deque[tuple[float, T]] = deque()
            for t, item in q:
                (removed.append(item) if pred(item) else keep.append((t, item)))
            if keep:
                self._queues[key] = keep
            else:
                del self._queues[key]
        self._n -= len(removed)
        return removed

    def items(self) -> list[Any]:
        return [item for q in self._queues.values() for _, item in q]
