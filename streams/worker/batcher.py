"""Micro-batching with an injected clock: length buckets, groups, max size, max wait, fair order.

Guarantees:

* A batch holds items of one length bucket and one group only (a group is whatever must
  be shared by a model call: voice, speed). Buckets are the ascending edges given; an
  item longer than the last edge goes to an overflow bucket of its own.
* A queue is ready when it holds ``max_batch`` items or its oldest item has waited
  ``max_wait_s`` (readiness is about arrival only, so batching delay is unchanged), or at once
  when the caller says a model lane is idle (``eager``): waiting to fill a batch only pays
  while every lane is busy, so an idle worker starts what it holds now (work-conserving, like
  a dynamic batcher with no queue delay) and batches form from what queues behind busy lanes.
* **Fair order** (earliest due first). Every item gets a *due* time when it is added:
  ``max(arrival + delay, flow's previous due + pace)``, where ``pace`` is
  ``max(fair_slot_s, cost_s)`` of the flow's previous item (``cost_s``: the caller's estimate
  of that item's model time, so a slow voice's segments are spaced as far apart as the worker
  takes to make one; 0 leaves the slot alone). A flow is one request
  (``flow=``); ``delay`` is 0 for ``interactive`` and ``bulk_delay_s`` for ``bulk``.
  **A short request is not paced**: a flow's items are due at its first item's due (no pace
  between them) while their costs add up to at most ``fair_burst_s`` (an item of unknown cost
  counts one ``fair_slot_s``), so requests of a few segments are served whole, in arrival order,
  as a task queue serves them, and only the rest of a longer request is paced.
  A batch takes the items of its queue with the earliest due, and of the ready queues
  ``take`` serves the one whose earliest due is earliest; while a queue holding work due
  earlier still fills its batch (at most ``max_wait_s``), no later-due batch starts ahead of
  it (a model call can take seconds: starting one would delay that work by all of it). So one request's segments are
  paced ``fair_slot_s`` (or their cost) apart against other work: a short request that arrives while a
  long one is queued gets a due near its arrival and is served in the next batches, not
  after the long one; two long requests interleave (round-robin); an idle worker still
  runs a lone long request at full speed (pacing only orders, it never waits).
* **Starvation-free.** Every new item's due is at least its arrival (less its bounded
  ``owed_s``, below), so an item of due
  ``d`` is served before anything that arrives after ``d``: a long request's k-th segment
  waits at most for the work due before ``arrival + k * fair_slot_s`` (k paces, with costs), and a bulk item at
  most for what is due before ``arrival + bulk_delay_s``, however much interactive work keeps
  coming.
* **Per-request order.** A flow's dues never decrease and ties keep insertion order, so
  within a (bucket, group) queue one request's items leave in the order they were added.
  Items without a flow (``flow=None``) are due at arrival (+ delay): plain FIFO per queue.
* **Short requests first** (``short_first`` > 0): a flow's first item is due later by
  ``short_first`` times the expected model time of its whole request (``size_s``, the caller's
  estimate), at most ``fair_burst_s`` (a larger request is paced anyway); its unpaced items share
  that due. Among requests waiting together the smaller ones go first (shortest job first, which
  lowers the median answer under load), and a larger one is passed over by at most
  ``fair_burst_s`` of later arrivals: still starvation-free.
* **A backlog oldest first** (``owed_s``): an item that waited for this worker before it could
  be read (the caller says how long, bounded: a partition's backlog when it was assigned or
  rewound, :meth:`streams.worker.ledger.Ledger.owed`) is due that much earlier, so a restart's
  backlog, read partition by partition, is served in the order it was written, not in the
  order it was read. Every other item is due at its arrival, as above.

A plain class: no threads, no sleeping, no Kafka. Time comes from ``clock`` (at ``add``)
and from the ``now`` the caller passes, so tests drive it with a fake clock.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from streams.settings import BatchingSettings

__all__ = ["MicroBatcher"]

T = TypeVar("T")

PRIORITIES = ("interactive", "bulk")


@dataclass(slots=True, eq=False)
class _Entry(Generic[T]):
    arrival: float
    due: float
    order: int
    flow: Hashable
    item: T
    alive: bool = True


class _Queue(Generic[T]):
    """One (bucket, group): items by due (a heap) and by arrival (for max_wait), removed lazily."""

    __slots__ = ("by_arrival", "by_due", "n")

    def __init__(self) -> None:
        self.by_due: list[tuple[float, int, _Entry[T]]] = []
        self.by_arrival: deque[_Entry[T]] = deque()
        self.n = 0

    def push(self, e: _Entry[T]) -> None:
        heapq.heappush(self.by_due, (e.due, e.order, e))
        self.by_arrival.append(e)
        self.n += 1

    def oldest(self) -> float:
        while not self.by_arrival[0].alive:
            self.by_arrival.popleft()
        return self.by_arrival[0].arrival

    def earliest_due(self) -> tuple[float, int]:
        due, order, _ = self.by_due[0]  # entries leave the heap when taken: its head is alive
        return due, order

    def pop(self, k: int) -> list[_Entry[T]]:
        out = []
        for _ in range(min(k, self.n)):
            e = heapq.heappop(self.by_due)[2]
            e.alive = False
            out.append(e)
        self.n -= len(out)
        return out

    def entries(self) -> list[_Entry[T]]:
        return [e for e in self.by_arrival if e.alive]


class MicroBatcher(Generic[T]):
    def __init__(self, max_batch: int, max_wait_s: float, buckets: tuple[int, ...],
                 clock: Callable[[], float], *, fair_slot_s: float = 0.5, bulk_delay_s: float = 5.0,
                 fair_burst_s: float = 0.0, short_first: float = 0.0) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_wait_s < 0:
            raise ValueError("max_wait_s must be >= 0")
        if fair_slot_s < 0 or bulk_delay_s < 0 or fair_burst_s < 0 or short_first < 0:
            raise ValueError("fair_slot_s, bulk_delay_s, fair_burst_s and short_first must be >= 0")
        if list(buckets) != sorted(set(buckets)):
            raise ValueError(f"buckets must ascend without repeats, got {buckets}")
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.buckets = tuple(buckets)
        self.fair_slot_s = fair_slot_s
        self.fair_burst_s = fair_burst_s
        self.short_first = short_first
        self.delay = {"interactive": 0.0, "bulk": bulk_delay_s}
        self._clock = clock
        self._queues: dict[tuple[int, Hashable], _Queue[T]] = {}
        # flow -> (due of its last item, pace after it, cost of its items so far); pruned once past
        self._flows: dict[Hashable, tuple[float, float, float]] = {}
        self._sweep_at = 64
        self._order = itertools.count()
        self._n = 0

    @classmethod
    def from_section(cls, batching: BatchingSettings, clock: Callable[[], float]) -> MicroBatcher[T]:
        """The batcher the batching section describes (``max_batch``, ``max_wait_ms``, ``length_buckets``,
        ``fair_slot_ms``, ``bulk_delay_ms``)."""
        return cls(batching.max_batch, batching.max_wait_ms / 1000, batching.buckets, clock,
                   fair_slot_s=batching.fair_slot_ms / 1000, bulk_delay_s=batching.bulk_delay_ms / 1000,
                   fair_burst_s=batching.fair_burst_ms / 1000, short_first=batching.short_first)

    def bucket_of(self, length: int) -> int:
        """Index of the bucket for an item of this length (len(buckets) = overflow)."""
        return bisect.bisect_left(self.buckets, length)

    def add(self, item: T, length: int, group: Hashable = None, *, flow: Hashable = None,
            priority: str = "interactive", cost_s: float = 0.0, size_s: float = 0.0, owed_s: float = 0.0) -> None:
        """Queue ``item``; ``flow`` names its request (None: an item on its own), ``priority``
        is ``interactive`` or ``bulk``, ``cost_s`` the model time it is expected to take (it
        spaces the flow's next item at least that far after this one), ``size_s`` that of its
        whole request (short requests first), ``owed_s`` how long it waited before it could be
        read (a backlog: due that much earlier); see the module doc."""
        if priority not in self.delay:
            raise ValueError(f"priority must be one of {PRIORITIES}, got {priority!r}")
        now = self._clock()
        due = now + self.delay[priority] - max(0.0, owed_s)
        if flow is not None:
            first = (due + min(self.fair_burst_s, self.short_first * max(0.0, size_s)), 0.0, 0.0)
            last_due, pace, spent = self._flows.get(flow, first)
            spent += cost_s if cost_s > 0 else self.fair_slot_s
            # within the burst: due with the flow's previous item; past it: paced after it
            due = max(due, last_due if spent <= self.fair_burst_s + 1e-9 else last_due + pace)
            pace = max(self.fair_slot_s, cost_s) if self.fair_slot_s > 0 else 0.0
            self._flows[flow] = (due, pace, spent)
            if len(self._flows) > self._sweep_at:
                self._sweep(now)
        key = (self.bucket_of(length), group)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue()
        q.push(_Entry(now, due, next(self._order), flow, item))
        self._n += 1

    def _sweep(self, now: float) -> None:
        """Forget flows whose next item would be due at its arrival anyway and whose burst is long past
        (bounded memory)."""
        self._flows = {f: d for f, d in self._flows.items() if d[0] + d[1] + self.fair_burst_s > now}
        self._sweep_at = max(64, 2 * len(self._flows))

    def __len__(self) -> int:
        return self._n

    def _ready_key(self, now: float, eager: bool = False) -> tuple[int, Hashable] | None:
        best: tuple[int, Hashable] | None = None
        best_due: tuple[float, int] | None = None
        first_due: tuple[float, int] | None = None
        for key, q in self._queues.items():
            due = q.earliest_due()
            first_due = due if first_due is None else min(first_due, due)
            if eager or q.n >= self.max_batch or now >= q.oldest() + self.max_wait_s:
                if best_due is None or due < best_due:
                    best, best_due = key, due
        if best_due is not None and first_due is not None and first_due < best_due:
            return None  # work due earlier is filling its batch (ready within max_wait_s): serve it first
        return best

    def ready(self, now: float, *, eager: bool = False) -> bool:
        """Whether ``take(now, eager=eager)`` would return a batch."""
        return self._ready_key(now, eager) is not None

    def take_with_wait(self, now: float, *, force: bool = False, eager: bool = False) -> list[tuple[T, float]]:
        """One batch (earliest due first) with each item's wait in seconds; empty if none is ready.

        ``force`` takes the queue with the earliest due even if it is neither full nor expired (draining);
        ``eager`` (a lane is idle) counts every queue as ready, so the earliest due work starts now.
        """
        return [(item, wait) for item, wait, _ in self.take_with_due(now, force=force, eager=eager)]

    def take_with_due(self, now: float, *, force: bool = False,
                      eager: bool = False) -> list[tuple[T, float, float]]:
        """:meth:`take_with_wait`, each item with its due time too (the fair order's key, on ``clock``)."""
        key = self._ready_key(now, eager)
        if key is None and force and self._queues:
            key = min(self._queues, key=lambda k: self._queues[k].earliest_due())
        if key is None:
            return []
        q = self._queues[key]
        out = q.pop(self.max_batch)
        if not q.n:
            del self._queues[key]
        self._n -= len(out)
        return [(e.item, now - e.arrival, e.due) for e in out]

    def take(self, now: float, *, force: bool = False, eager: bool = False) -> list[T]:
        """One batch from a single (bucket, group) queue; empty if none is ready."""
        return [item for item, _ in self.take_with_wait(now, force=force, eager=eager)]

    def next_deadline(self, *, eager: bool = False) -> float | None:
        """When the next batch can be taken (already past if one can be now); None when empty.

        That is when the queue holding the earliest due work is ready: no batch starts before it."""
        if not self._queues:
            return None
        q = min(self._queues.values(), key=lambda q: q.earliest_due())
        return q.oldest() if eager or q.n >= self.max_batch else q.oldest() + self.max_wait_s

    def remove_if(self, pred: Callable[[T], bool]) -> list[T]:
        """Remove and return every queued item for which ``pred`` is true (revoked partitions).
        A flow left without items forgets its pacing: redone after a rewind, it starts afresh."""
        removed: list[T] = []
        flows: set[Hashable] = set()
        for key in list(self._queues):
            old = self._queues[key]
            keep: _Queue[T] = _Queue()
            for e in old.entries():
                if pred(e.item):
                    removed.append(e.item)
                    if e.flow is not None:
                        flows.add(e.flow)
                else:
                    keep.push(e)
            if keep.n:
                self._queues[key] = keep
            else:
                del self._queues[key]
        if flows:
            still = {e.flow for q in self._queues.values() for e in q.entries()}
            for f in flows - still:
                self._flows.pop(f, None)
        self._n -= len(removed)
        return removed

    def items(self) -> list[Any]:
        return [e.item for q in self._queues.values() for e in q.entries()]
