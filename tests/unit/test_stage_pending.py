"""The stage's held records (streams/stage/pending.py): reads see the writes not yet made, order is kept."""

from __future__ import annotations

from streams.stage.pending import Deferred, Handled


def test_reads_see_held_writes_until_taken_then_the_table() -> None:
    table = {b"a": b"1", b"gone": b"x"}
    d = Deferred()
    d.add(Handled("e1", (), seen=(b"b", b"2"), open=(b"o1", b"state1")))
    d.add(Handled("e2", (), open=(b"gone", None)))
    d.add(Handled("e3", (), open=(b"o1", b"state2")))
    get = d.seen_get(table.get)
    assert get(b"a") == b"1" and get(b"b") == b"2" and get(b"c") is None
    assert d.open_get(b"o1", table.get) == b"state2"  # the latest write of the run
    assert d.open_get(b"gone", table.get) is None      # deleted, though still in the table
    assert d.open_get(b"a", table.get) == b"1"
    assert d.open_writes() == {b"o1": b"state2", b"gone": None}
    held = d.take()
    assert [h.event for h in held] == ["e1", "e2", "e3"] and len(d) == 0
    assert get(b"b") is None and d.open_get(b"gone", table.get) == b"x"  # the caller writes them now


def test_a_run_of_records_keeps_input_order_and_its_deliveries() -> None:
    d = Deferred()
    for i in range(5):
        d.add(Handled(i, (f"f{i}",)))
    assert len(d) == 5
    held = d.take()
    assert [h.event for h in held] == list(range(5)) and [h.deliveries for h in held][2] == ("f2",)
    assert d.take() == []


def test_admission_buckets_are_held_like_the_other_writes() -> None:
    table = {b"0\x00u": b"old"}
    d = Deferred()
    d.add(Handled("e1", (), rate=(b"0\x00u", b"b1")))
    d.add(Handled("e2", (), rate=(b"0\x00u", b"b2")))
    assert d.rate_get(b"0\x00u", table.get) == b"b2" and d.rate_get(b"0\x00v", table.get) is None
    assert [h.rate for h in d.take()] == [(b"0\x00u", b"b1"), (b"0\x00u", b"b2")]
    assert d.rate_get(b"0\x00u", table.get) == b"old"  # the caller writes the last one now
