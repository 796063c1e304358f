"""When the stage restarts itself to get a stuck input partition moving (pure decision)."""

from __future__ import annotations

from streams.stage.watch import InputWatch, Refetch, input_hole


def run(w: InputWatch, steps: list[tuple[float, dict]]) -> list[str | None]:  # type: ignore[type-arg]
    base = {"committed": 10, "processed_next": 10, "end": 10, "acked_waiting": False}
    return [w.check(0, **{**base, **kw}, now=t) for t, kw in steps]


def test_a_partition_with_waiting_records_and_no_progress_restarts_after_the_stall_time() -> None:
    w = InputWatch(stall_s=30)
    got = run(w, [(0, {"end": 500}), (20, {"end": 500}), (29, {"end": 520}), (31, {"end": 520})])
    assert got == [None, None, None, "input_stalled"]


def test_progress_resets_the_clock() -> None:
    w = InputWatch(stall_s=30)
    got = run(w, [(0, {"end": 500}), (25, {"end": 500, "processed_next": 40}), (50, {"end": 500, "processed_next": 40}),
                  (56, {"end": 500, "processed_next": 40})])
    assert got == [None, None, None, "input_stalled"]


def test_an_idle_caught_up_partition_never_restarts() -> None:
    w = InputWatch(stall_s=30)
    assert run(w, [(t, {}) for t in range(0, 600, 5)]) == [None] * 120


def test_one_record_waiting_at_the_end_of_a_partition_is_waiting_work() -> None:
    # a single record faust dropped that was its partition's last: once taken for a commit marker and
    # left until the next record came (the caller takes the markers the fetch passed over off ``end``)
    w = InputWatch(stall_s=30)
    got = run(w, [(t, {"end": 11}) for t in range(0, 40, 5)])
    assert got == [None] * 7 + ["input_stalled"]


def test_the_fresh_stall_time_is_never_longer_than_the_stall_time() -> None:
    w = InputWatch(stall_s=3, fresh_stall_s=8)
    fresh = {"end": 5, "committed": None, "processed_next": None, "delivered": False}
    assert run(w, [(0, fresh), (2, fresh), (4, fresh)]) == [None, None, "input_stalled"]


def test_an_unknown_end_offset_never_restarts() -> None:
    w = InputWatch(stall_s=30)
    assert run(w, [(t, {"end": None, "processed_next": None, "committed": None}) for t in range(0, 300, 5)]) == [None] * 60


def test_processed_records_above_a_commit_that_never_moves_restart() -> None:
    # a hole the agent was never handed: records after it keep being processed, the commit stays
    w = InputWatch(stall_s=30)
    steps = [(t, {"committed": 10, "processed_next": 20 + t, "end": 21 + t, "acked_waiting": True}) for t in range(0, 40, 5)]
    got = run(w, steps)
    assert got[:-1] == [None] * (len(steps) - 1) and got[-1] == "commit_stalled"


def test_a_moving_commit_is_not_a_stall() -> None:
    w = InputWatch(stall_s=30)
    steps = [(t, {"committed": 10 + t, "processed_next": 20 + t, "end": 21 + t, "acked_waiting": True}) for t in range(0, 300, 5)]
    assert run(w, steps) == [None] * 60


def test_a_revoked_partition_starts_afresh_when_assigned_again() -> None:
    w = InputWatch(stall_s=30)
    assert run(w, [(0, {"end": 500}), (20, {"end": 500})]) == [None, None]
    w.forget(set())
    assert run(w, [(40, {"end": 500}), (60, {"end": 500}), (71, {"end": 500})]) == [None, None, "input_stalled"]


def test_a_partition_that_never_delivered_since_assignment_restarts_within_seconds() -> None:
    # fresh cluster, first stage: records waiting, nothing handed to the agent since assignment
    w = InputWatch(stall_s=30, fresh_stall_s=8)
    fresh = {"end": 5, "committed": None, "processed_next": None, "delivered": False}
    assert run(w, [(0, fresh), (4, fresh), (7, fresh), (9, fresh)]) == [None, None, None, "input_stalled"]


def test_a_partition_that_delivered_keeps_the_long_stall_time() -> None:
    w = InputWatch(stall_s=30, fresh_stall_s=8)
    moving = {"end": 500, "processed_next": 40, "delivered": True}
    assert run(w, [(0, moving), (9, moving), (20, moving), (31, moving)]) == [None, None, None, "input_stalled"]


def test_a_record_after_offsets_never_handed_over_is_a_hole() -> None:
    # the first record of a generation must be the committed one (a restarted stage handed piece 40
    # of a stream and none of 15-39 held piece 40 until the stream timed out)
    assert input_hole(40, generation=3, last=None, committed=15) == (15, 40)
    assert input_hole(15, generation=3, last=None, committed=15) is None
    assert input_hole(40, generation=3, last=(2, 99), committed=15) == (15, 40)  # the last record was another generation's
    # within a generation: the one after the record before
    assert input_hole(21, generation=3, last=(3, 20), committed=15) is None
    assert input_hole(30, generation=3, last=(3, 20), committed=15) == (21, 30)
    # one offset missing is a hole too (the caller tells a marker's offset from what the fetch passed
    # over): a restarted stage handed offset 7 with 6 committed never answered the request at 6
    assert input_hole(22, generation=3, last=(3, 20), committed=15) == (21, 22)
    assert input_hole(16, generation=3, last=None, committed=15) == (15, 16)
    # nothing known, nothing to say; a record handed again (a refetch) is no hole
    assert input_hole(500, generation=3, last=None, committed=None) is None
    assert input_hole(20, generation=3, last=(3, 20), committed=15) is None


def test_a_hole_fetched_again_skips_what_came_from_before_the_seek_until_the_offset_sought() -> None:
    r = Refetch(wait_s=10, tries=2)
    assert r.start(3, 25, generation=1, now=0.0)  # faust handed 45 after 24: seek back to 25
    assert r.sought(3) == 25
    # 46..60 were queued before the seek landed: skipped; another partition is untouched
    assert [r.skip(3, o, generation=1, now=0.1) for o in range(46, 61)] == [True] * 15
    assert not r.skip(2, 99, generation=1, now=0.1)
    assert not r.skip(3, 25, generation=1, now=0.2)  # the hole's first record: handled, the seek is over
    assert r.sought(3) is None
    assert not r.skip(3, 47, generation=1, now=0.3)  # and nothing is skipped after it


def test_a_commit_marker_at_the_offset_sought_ends_the_seek_with_the_record_after_it() -> None:
    r = Refetch()
    r.start(0, 12, generation=4, now=0.0)
    assert not r.skip(0, 13, generation=4, now=0.1)


def test_a_seek_is_given_up_after_its_wait_or_a_rebalance_and_tried_a_bounded_number_of_times() -> None:
    r = Refetch(wait_s=10, tries=2)
    assert r.start(1, 25, generation=1, now=0.0)
    assert r.skip(1, 45, generation=1, now=9.0)
    assert not r.skip(1, 45, generation=1, now=10.5)  # the record sought never came: handled as before
    assert r.start(1, 25, generation=1, now=11.0)  # the second try
    assert not r.skip(1, 45, generation=2, now=11.1)  # a rebalance seeks to the committed offsets anyway
    assert not r.start(1, 25, generation=2, now=12.0)  # twice for this offset: the caller restarts instead
    assert r.start(1, 80, generation=2, now=13.0)  # another hole later is tried afresh
    r.forget({0})
    assert r.sought(1) is None and r.start(1, 80, generation=2, now=14.0)
