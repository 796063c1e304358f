"""Which consumed offset may be committed: offsets follow durability.

Per partition the tracker keeps the offsets consumed, in order, each with a done flag.
The committable offset of a partition is the first offset not yet done (Kafka's
"next offset to read"), or one past the last consumed offset when all are done. It
never moves over an offset that is not done, whatever order work finishes in (batches
of different length buckets finish out of order), so a crash at any point repeats only
work that was not yet durable.

Pure bookkeeping: no Kafka import; partitions are any hashable key.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

__all__ = ["OffsetTracker"]


class _Partition:
    __slots__ = ("committed", "done", "offsets")

    def __init__(self) -> None:
        self.offsets: deque[int] = deque()  # consumed, ascending
        self.done: dict[int, bool] = {}
        self.committed: int | None = None  # last offset handed to a committed transaction


class OffsetTracker:
    """Consumed offsets per partition with done flags; see the module docstring."""

    def __init__(self) -> None:
        self._parts: dict[Hashable, _Partition] = {}

    def add(self, partition: Hashable, offset: int) -> None:
        """Record a consumed offset (not done yet). Offsets of a partition must ascend."""
        p = self._parts.setdefault(partition, _Partition())
        if p.offsets and offset <= p.offsets[-1]:
            raise ValueError(f"offset {offset} of {partition!r} is not after {p.offsets[-1]}")
        p.offsets.append(offset)
        p.done[offset] = False

    def mark_done(self, partition: Hashable, offset: int) -> None:
        """The work of this offset is durable. Unknown offsets (a dropped partition) are ignored."""
        p = self._parts.get(partition)
        if p is not None and offset in p.done:
            p.done[offset] = True

    def is_done(self, partition: Hashable, offset: int) -> bool:
        p = self._parts.get(partition)
        return bool(p is not None and p.done.get(offset, False))

    def committable(self, partition: Hashable) -> int | None:
        """The offset to commit for a partition, or None if nothing was consumed since the last commit."""
        p = self._parts.get(partition)
        if p is None:
            return None
        for off in p.offsets:
            if not p.done[off]:
                return off
        return p.offsets[-1] + 1 if p.offsets else p.committed

    def to_commit(self) -> dict[Hashable, int]:
        """Committable offset of every tracked partition (unchanged ones included, see ``advanced``)."""
        out: dict[Hashable, int] = {}
        for key in self._parts:
            off = self.committable(key)
            if off is not None:
                out[key] = off
        return out

    def advanced(self) -> bool:
        """Whether any partition's committable offset moved past its last committed one."""
        for key, p in self._parts.items():
            off = self.committable(key)
            # never committed here: the first offset consumed is where the group stood, so only
            # progress past it is worth a transaction
            base = p.committed if p.committed is not None else (p.offsets[0] if p.offsets else None)
            if off is not None and (base is None or off > base):
                return True
        return False

    def committed(self, offsets: Mapping[Any, int]) -> None:
        """These offsets are now committed: forget the done offsets below them."""
        for key, off in offsets.items():
            p = self._parts.get(key)
            if p is None:
                continue
            while p.offsets and p.offsets[0] < off:
                if not p.done[p.offsets[0]]:
                    raise ValueError(f"offset {p.offsets[0]} of {key!r} was committed but is not done")
                p.done.pop(p.offsets.popleft())
            p.committed = off

    def pending(self, partition: Hashable | None = None) -> int:
        """Offsets consumed and not yet done (in one partition, or in all)."""
        parts = [self._parts[partition]] if partition is not None and partition in self._parts else (
            [] if partition is not None else list(self._parts.values()))
        return sum(1 for p in parts for d in p.done.values() if not d)

    def drop(self, partitions: Iterable[Hashable]) -> None:
        """Forget partitions (revoked, or rewound to their committed offset)."""
        for key in partitions:
            self._parts.pop(key, None)

    def partitions(self) -> list[Hashable]:
        return list(self._parts)
