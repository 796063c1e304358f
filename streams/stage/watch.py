"""The stage's input watchdog: when must the stage restart itself to get an input partition moving?

Pure (no faust, no clock of its own); :func:`streams.stage.app.build_app` calls it every
two seconds per assigned partition and re-executes the process on a reason.
"""

from __future__ import annotations

__all__ = ["InputWatch", "input_hole"]

_STALL_S = 30.0
_FRESH_STALL_S = 8.0


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
    a partition. The caller does not check while tables recover. One record past what is
    done is not counted as waiting: a transactional producer's commit marker ends a
    partition with an offset no consumer is ever handed.
    """

    def __init__(self, stall_s: float = _STALL_S, fresh_stall_s: float = _FRESH_STALL_S) -> None:
        self.stall_s = stall_s
        self.fresh_stall_s = fresh_stall_s
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
        offset the agent processed; ``end``: the partition's end offset (None: unknown);
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
        if end is None or end - done <= 1:
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
    before. One offset missing is not a hole: a transactional producer's commit marker takes an
    offset no consumer is handed. Seen: a stage restarted after a SIGKILL was handed the last
    piece of a stream and none of the 25 before it (faust drops records it fetched around a
    rebalance); the pieces after the hole were held for the missing one until the stream timed
    out, before the commit-stall watchdog's 30 s were up."""
    if last is not None and last[0] == generation:
        expected: int | None = last[1] + 1
    else:
        expected = committed
    if expected is None or offset - expected <= 1:
        return None
    return expected, offset
