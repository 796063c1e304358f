"""OffsetTracker: the committed offset only moves over done offsets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.worker.offsets import OffsetTracker

P0, P1 = ("seg", 0), ("seg", 1)


def test_nothing_consumed_nothing_to_commit():
    t = OffsetTracker()
    assert t.committable(P0) is None
    assert t.to_commit() == {}
    assert not t.advanced()


def test_commits_first_offset_not_done():
    t = OffsetTracker()
    for off in (10, 11, 12, 13):
        t.add(P0, off)
    assert t.committable(P0) == 10
    t.mark_done(P0, 11)
    t.mark_done(P0, 13)  # out of order: a later bucket finished first
    assert t.committable(P0) == 10
    t.mark_done(P0, 10)
    assert t.committable(P0) == 12
    t.mark_done(P0, 12)
    assert t.committable(P0) == 14


def test_gaps_in_offsets_are_fine():
    # transaction markers occupy offsets: consumed offsets skip them
    t = OffsetTracker()
    t.add(P0, 5)
    t.add(P0, 7)
    t.mark_done(P0, 5)
    assert t.committable(P0) == 7
    t.mark_done(P0, 7)
    assert t.committable(P0) == 8


def test_partitions_are_independent():
    t = OffsetTracker()
    t.add(P0, 0)
    t.add(P1, 100)
    t.mark_done(P1, 100)
    assert t.to_commit() == {P0: 0, P1: 101}


def test_committed_forgets_done_prefix_and_advanced_tracks_changes():
    t = OffsetTracker()
    for off in range(5):
        t.add(P0, off)
    t.mark_done(P0, 0)
    t.mark_done(P0, 1)
    assert t.advanced()
    t.committed({P0: 2})
    assert not t.advanced()
    assert t.committable(P0) == 2
    assert t.pending(P0) == 3
    t.mark_done(P0, 2)
    assert t.advanced()


def test_fully_done_partition_keeps_its_committed_offset():
    t = OffsetTracker()
    t.add(P0, 3)
    t.mark_done(P0, 3)
    t.committed({P0: 4})
    assert t.committable(P0) == 4
    assert t.to_commit() == {P0: 4}
    assert not t.advanced()


def test_committing_past_a_not_done_offset_is_a_bug():
    t = OffsetTracker()
    t.add(P0, 0)
    t.add(P0, 1)
    t.mark_done(P0, 1)
    with pytest.raises(ValueError):
        t.committed({P0: 2})


def test_offsets_must_ascend():
    t = OffsetTracker()
    t.add(P0, 4)
    with pytest.raises(ValueError):
        t.add(P0, 4)


def test_drop_forgets_partition_and_ignores_late_done():
    t = OffsetTracker()
    t.add(P0, 0)
    t.drop([P0])
    t.mark_done(P0, 0)  # a late upload of a revoked partition
    assert t.committable(P0) is None
    assert t.partitions() == []


@given(st.integers(1, 40), st.data())
def test_property_committable_is_first_not_done(n, data):
    offsets = sorted(data.draw(st.sets(st.integers(0, 200), min_size=n, max_size=n)))
    t = OffsetTracker()
    for off in offsets:
        t.add(P0, off)
    order = data.draw(st.permutations(offsets))
    done: set[int] = set()
    for off in order[: data.draw(st.integers(0, len(order)))]:
        t.mark_done(P0, off)
        done.add(off)
        c = t.committable(P0)
        not_done = [o for o in offsets if o not in done]
        assert c == (not_done[0] if not_done else offsets[-1] + 1)
        # everything below c is done
        assert all(o in done for o in offsets if o < c)
