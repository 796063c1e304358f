"""The stage's input watchdog: when must the stage restart itself to get an input partition moving?

Pure (no faust, no clock of its own); :func:`streams.stage.app.build_app` calls it every
two seconds per assigned partition and re-executes the process on a reason.
"""

from __future__ import annotations

__all__ = ["InputWatch", "Refetch", "input_hole"]

_STALL_S = 30.0
_FRESH_STALL_S = 8.0
_REFETCH_WAIT_S = 10.0
_REFETCH_TRIES = 2


class InputWatch:
    """When must the stage restart itself to get an input partition moving again? Pure: the
    caller passes what the consumer knows and the time, once every few seconds per partition.

    faust sometimes leaves an assigned partition unserved, and nothing in faust notices:

    * **commit stalled** -- the agent was never handed a hole in the partition (records
      fetched and dropped around a rebalance). The records after it are processed, but
      :func:`guard_consumer_acks` never commits past the hole, so the committed offset
      sits still while processed records wait above it.
    * **input stalled** -- after a rebalance's table recovery the partition is never
      fetched again (seen: a stage restarted after SIGKILL, assigned two partitions with
      hundreds of requests waiting, processed none of them in two minutes, while the
      committed offset and the agent's position stood still).

    Either, unchanged for ``stall_s``, returns a reason; the stage then re-executes itself
    and reads again from the committed offset (the worker drops repeated segments). A
    partition that has records waiting and has not handed the agent a single one since it
    was assigned (``delivered`` false) is given only ``fresh_stall_s``: a healthy fetch
    delivers within a second, and the first stage on a fresh cluster once sat 35 s on such
    a partition (never more than ``stall_s``). The caller does not check while tables recover.

    Every offset past what is done counts as waiting, one as much as many: the caller passes
    an ``end`` that leaves out what the fetch passed over as it should (a transaction's commit
    marker at the end of a partition, aborted records: :class:`~streams.stage.patches.PassedOffsets`).
    This used to let one offset through as a marker without looking, so a single record faust
    dropped that was also its partition's last waited for the next record to come, however long.
    """

    def __init__(self, stall_s: float = _STALL_S, fresh_stall_s: float = _FRESH_STALL_S) -> None:
        self.stall_s = stall_s
        self.fresh_stall_s = min(fresh_stall_s, stall_s)
        self._commit: dict[int, tuple[int | None, float]] = {}
        self._input: dict[int, tuple[tuple[int | None, int | None], float]] = {}

    def forget(self, keep: set[int]) -> None:
        """Drop the partitions not in ``keep`` (revoked)."""
        for d in (self._commit, self._input):
            for p in [p for p in d if p not in keep]:
                del d[p]

    def check(self, partition: int, *, committed: int | None, processed_next: int | None, end: int | None,
              acked_waiting: bool, now: float, delivered: bool = True) -> str | None:
        """``committed``: the group's committed offset; ``processed_next``: one past the last
        offset the agent processed; ``end``: the partition's end offset, short of the markers and
        aborted records the fetch passed over at its end (None: unknown);
        ``acked_waiting``: processed records wait to be committed; ``delivered``: the agent
        was handed a record of the partition since its assignment."""
        if acked_waiting:
            prev_c = self._commit.get(partition)
            if prev_c is None or prev_c[0] != committed:
                self._commit[partition] = (committed, now)
            elif now - prev_c[1] > self.stall_s:
                return "commit_stalled"
        else:
            self._commit.pop(partition, None)
        done = max((x for x in (committed, processed_next) if x is not None), default=0)
        if end is None or end <= done:
            self._input.pop(partition, None)
            return None
        key = (committed, processed_next)
        prev_i = self._input.get(partition)
        if prev_i is None or prev_i[0] != key:
            self._input[partition] = (key, now)
        elif now - prev_i[1] > (self.stall_s if delivered else self.fresh_stall_s):
            return "input_stalled"
        return None


def input_hole(offset: int, *, generation: int | None, last: tuple[int | None, int] | None,
               committed: int | None) -> tuple[int, int] | None:
    """The offsets ``[from, to)`` of the input partition the agent was never handed, if ``offset``
    (the record it is handed now) comes after such a hole; None when it follows on.

    ``last``: ``(generation, offset)`` of the partition's record handed before (None: none since
    the process started); ``committed``: the group's committed offset (the next one to read). The
    first record of a generation must be the committed one, later ones the one after the record
    before. Every offset missing counts, one as much as many: a transaction's marker or aborted
    records take offsets no reader is handed, and the caller knows those (what the fetch passed
    over, :class:`~streams.stage.patches.PassedOffsets`); this does not guess. Seen: a stage
    restarted after a SIGKILL was handed the last piece of a stream and none of the 25 before it
    (faust drops records it fetched around a rebalance); the pieces after the hole were held for
    the missing one until the stream timed out, before the commit-stall watchdog's 30 s were up.
    And one record missing: a stage restarted after a SIGKILL was handed offset 7 of a partition
    whose committed offset was 6; a single missing offset was then taken for a marker, counted done,
    and committed, and that request was never answered (CI, `test_chaos`, 2026-12-07)."""
    if last is not None and last[0] == generation:
        expected: int | None = last[1] + 1
    else:
        expected = committed
    if expected is None or offset <= expected:
        return None
    return expected, offset


class Refetch:
    """Fill a hole in place: seek the partition back and skip what was fetched past the hole.

    A hole (:func:`input_hole`) or a stalled partition used to cost a restart of the whole stage
    (re-exec, rejoin, table recovery: ~3 s, every partition), and a restart is itself a rebalance,
    around which faust drops fetched records again: seen on CI, five restarts in 60 s, each leaving
    a new hole or stall on another partition. A seek of the one partition to the first offset
    missing (faust's ``Consumer.seek`` also lowers its read offset, so the records come again; aiokafka
    drops what it had fetched for the partition) fills it where it is. The records of the partition
    already queued in front of the agent, past the hole, are skipped (released unprocessed: never
    committed, read again after the hole) until the one sought comes.

    Bounded: ``tries`` seeks per (partition, offset), and a seek whose record has not come within
    ``wait_s`` (or whose generation ended: a rebalance seeks to the committed offsets anyway) is
    given up; the caller then does what it did before (restart, or handle past the hole). Pure: the
    caller seeks and passes the generation and the time."""

    def __init__(self, wait_s: float = _REFETCH_WAIT_S, tries: int = _REFETCH_TRIES) -> None:
        self.wait_s, self.tries = wait_s, tries
        self._sought: dict[int, tuple[int | None, int, float]] = {}  # partition -> (generation, offset, since)
        self._tried: dict[int, tuple[int, int]] = {}  # partition -> (offset, seeks to it)

    def start(self, partition: int, offset: int, *, generation: int | None, now: float) -> bool:
        """Whether to seek ``partition`` back to ``offset`` now (False: tried ``tries`` times already);
        if so, records past it are skipped from now on until it comes."""
        prev = self._tried.get(partition)
        n = prev[1] if prev is not None and prev[0] == offset else 0
        if n >= self.tries:
            return False
        self._tried[partition] = (offset, n + 1)
        self._sought[partition] = (generation, offset, now)
        return True

    def skip(self, partition: int, offset: int, *, generation: int | None, now: float) -> bool:
        """Whether the record at ``offset`` was fetched before the seek landed (skip it); False ends the
        seek when the record sought (or the one after it: a commit marker takes an offset) comes, or
        when it is given up."""
        sought = self._sought.get(partition)
        if sought is None:
            return False
        gen, want, since = sought
        if gen == generation and now - since <= self.wait_s and offset > want + 1:
            return True
        del self._sought[partition]
        return False

    def sought(self, partition: int) -> int | None:
        """The offset ``partition`` is being fetched again from (None: it is not)."""
        got = self._sought.get(partition)
        return None if got is None else got[1]

    def forget(self, keep: set[int]) -> None:
        """Drop the partitions not in ``keep`` (revoked)."""
        for d in (self._sought, self._tried):
            for p in [p for p in d if p not in keep]:
                del d[p]
