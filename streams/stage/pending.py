"""Records the stage handled whose outputs are sent but not yet known delivered, and what each changes after.

The stage records a request id as seen (dedup table) and an open request's text (open table), and
marks its input record processed (committable), only once the outputs of that record are delivered:
a crash repeats a record, never loses one (:mod:`streams.stage.patches`). Awaiting each record's
delivery before the next one is read costs a broker round trip per record: one user's flood of
requests then held every other record of the stage's partitions behind those round trips.

Here the records of a run handled back to back share one wait: each one's outputs are sent at once,
its table writes held here, and :meth:`Deferred.take` hands the whole run back (in input order) to be
awaited, written and marked processed together, when ``stage_batch_records`` are held or a timer
says (every 50 ms). No answer waits for that: each record's outputs went out when it was handled. Reads of the tables in between
go through :meth:`seen_get` and :meth:`open_get`, which see the writes still held, so the next record
of the run is handled exactly as if each earlier one had been written: the outcome of every record is
the same function of the partition's records in order as before. Pure: no faust, no Kafka.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Deferred", "Handled"]


@dataclass(frozen=True, slots=True)
class Handled:
    """One handled input record: its event, its outputs' delivery futures, its table writes."""

    event: Any
    deliveries: Sequence[Awaitable[Any]]
    seen: tuple[bytes, bytes] | None = None          # dedup entry to write
    open: tuple[bytes, bytes | None] | None = None   # open-table key, new state (None: delete)
    rate: tuple[bytes, bytes] | None = None          # admission bucket to write (streams/stage/admission.py)


class Deferred:
    """The handled records not yet written and marked processed, in input order, with the table
    writes they hold visible to reads."""

    def __init__(self) -> None:
        self._held: list[Handled] = []
        self._seen: dict[bytes, bytes] = {}
        self._open: dict[bytes, bytes | None] = {}
        self._rate: dict[bytes, bytes] = {}

    def __len__(self) -> int:
        return len(self._held)

    def add(self, held: Handled) -> None:
        self._held.append(held)
        if held.seen is not None:
            self._seen[held.seen[0]] = held.seen[1]
        if held.open is not None:
            self._open[held.open[0]] = held.open[1]
        if held.rate is not None:
            self._rate[held.rate[0]] = held.rate[1]

    def seen_get(self, get: Callable[[bytes], bytes | None]) -> Callable[[bytes], bytes | None]:
        """The dedup table's ``get`` as it will read once the held writes are made."""
        held = self._seen

        def read(key: bytes) -> bytes | None:
            return held[key] if key in held else get(key)

        return read

    def open_get(self, key: bytes, get: Callable[[bytes], bytes | None]) -> bytes | None:
        """An open-table entry as it will read once the held writes are made (None: absent)."""
        return self._open[key] if key in self._open else get(key)

    def rate_get(self, key: bytes, get: Callable[[bytes], bytes | None]) -> bytes | None:
        """An admission bucket as it will read once the held writes are made (None: absent)."""
        return self._rate[key] if key in self._rate else get(key)

    def open_writes(self) -> dict[bytes, bytes | None]:
        """The open-table writes held (key -> latest state, None: deleted)."""
        return dict(self._open)

    def take(self) -> list[Handled]:
        """Every held record, in input order; the held writes are the caller's to make now."""
        out, self._held = self._held, []
        self._seen.clear()
        self._open.clear()
        self._rate.clear()
        return out
