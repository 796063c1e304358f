"""MicroBatcher with a fake clock: no Kafka, no sleeping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.worker.batcher import MicroBatcher


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make(max_batch: int = 4, max_wait_s: float = 0.05, buckets: tuple[int, ...] = (32, 64, 128)):
    clock = FakeClock()
    return MicroBatcher(max_batch, max_wait_s, buckets, clock), clock


def test_fills_to_max_batch_and_is_ready_at_once():
    b, clock = make(max_batch=3)
    b.add("a", 10)
    b.add("b", 12)
    assert not b.ready(clock.t)
    assert b.take(clock.t) == []
    b.add("c", 20)
    assert b.ready(clock.t)
    assert b.next_deadline() is not None and b.next_deadline() <= clock.t
    assert b.take(clock.t) == ["a", "b", "c"]
    assert len(b) == 0 and b.next_deadline() is None


def test_batch_never_exceeds_max_batch():
    b, clock = make(max_batch=2)
    for i in range(5):
        b.add(i, 5)
    assert b.take(clock.t) == [0, 1]
    assert b.take(clock.t) == [2, 3]
    assert b.take(clock.t) == []  # one left, not expired
    assert len(b) == 1


def test_flushes_on_max_wait():
    b, clock = make(max_batch=8, max_wait_s=0.02)
    b.add("x", 10)
    assert b.next_deadline() == pytest.approx(clock.t + 0.02)
    assert not b.ready(clock.t + 0.019)
    assert b.ready(clock.t + 0.02)
    batch = b.take_with_wait(clock.t + 0.025)
    assert [i for i, _ in batch] == ["x"]
    assert batch[0][1] == pytest.approx(0.025)


def test_eager_starts_a_partial_batch_now_and_only_when_asked():
    """A lane with nothing to run takes what is batched at once; behind busy lanes batches still fill."""
    b, clock = make(max_batch=8, max_wait_s=0.02)
    b.add("x", 10)
    b.add("y", 12)
    assert not b.ready(clock.t)  # lanes busy: wait for the batch to fill
    assert b.next_deadline() == pytest.approx(clock.t + 0.02)
    assert b.ready(clock.t, eager=True)
    assert b.next_deadline(eager=True) <= clock.t
    batch = b.take_with_wait(clock.t + 0.001, eager=True)
    assert [i for i, _ in batch] == ["x", "y"]
    assert batch[0][1] == pytest.approx(0.001)
    assert not b.ready(clock.t, eager=True) and b.next_deadline(eager=True) is None


def test_eager_serves_the_earliest_due_queue_first():
    """Eager changes when a batch starts, never which: the queue with the earliest due work goes first."""
    b, clock = make(max_batch=8, max_wait_s=0.02)
    b.add("late-bucket-first-arrival", 100, flow="r1")
    clock.t += 0.001
    b.add("short", 10, flow="r2")
    assert b.take(clock.t, eager=True) == ["late-bucket-first-arrival"]
    assert b.take(clock.t, eager=True) == ["short"]


def test_zero_wait_flushes_immediately():
    b, clock = make(max_batch=8, max_wait_s=0.0)
    b.add("x", 10)
    assert b.take(clock.t) == ["x"]


def test_never_mixes_buckets():
    b, clock = make(max_batch=2, buckets=(32, 64))
    b.add("short1", 10)
    b.add("long1", 50)
    b.add("short2", 31)
    b.add("long2", 64)
    b.add("huge", 500)  # overflow bucket
    first = b.take(clock.t)
    second = b.take(clock.t)
    assert {tuple(first), tuple(second)} == {("short1", "short2"), ("long1", "long2")}
    assert b.take(clock.t) == []
    clock.t += 1
    assert b.take(clock.t) == ["huge"]


def test_never_mixes_groups():
    b, clock = make(max_batch=2)
    b.add("v1-a", 10, group=("heart", 1.0))
    b.add("v1-fast", 10, group=("heart", 1.5))
    b.add("v1-b", 10, group=("heart", 1.0))
    assert b.take(clock.t) == ["v1-a", "v1-b"]
    assert b.take(clock.t) == []
    assert b.take(clock.t, force=True) == ["v1-fast"]


def test_fifo_within_a_bucket():
    b, clock = make(max_batch=3)
    for i in range(7):
        clock.t += 0.001
        b.add(i, 10)
    clock.t += 1
    out = []
    while len(b):
        out += b.take(clock.t)
    assert out == list(range(7))


def test_oldest_queue_first_when_several_are_ready():
    b, clock = make(max_batch=2, max_wait_s=0.05, buckets=(32, 64))
    b.add("old-long", 50)             # t=100
    clock.t += 0.01
    b.add("new-short-1", 10)          # t=100.01
    b.add("new-short-2", 10)          # full queue, but newer
    clock.t += 0.1                    # old-long expired too
    assert b.take(clock.t) == ["old-long"]
    assert b.take(clock.t) == ["new-short-1", "new-short-2"]


def test_busy_bucket_does_not_starve_a_quiet_one():
    b, clock = make(max_batch=2, max_wait_s=0.05, buckets=(32, 64))
    b.add("quiet", 50)
    served_quiet_at = None
    for step in range(20):
        clock.t += 0.01
        b.add(f"busy{step}a", 10)
        b.add(f"busy{step}b", 10)
        batch = b.take(clock.t)
        if "quiet" in batch:
            served_quiet_at = step
            break
    assert served_quiet_at is not None and served_quiet_at <= 6


def test_remove_if_drops_only_matching_items():
    b, _ = make(max_batch=4)
    for i in range(6):
        b.add(i, 10 if i % 2 else 40)
    removed = b.remove_if(lambda x: x % 3 == 0)
    assert sorted(removed) == [0, 3]
    assert len(b) == 4
    assert sorted(b.items()) == [1, 2, 4, 5]


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        MicroBatcher(0, 0.1, (32,), lambda: 0.0)
    with pytest.raises(ValueError):
        MicroBatcher(2, 0.1, (64, 32), lambda: 0.0)


@given(st.lists(st.tuples(st.integers(1, 300), st.sampled_from(["a", "b"]), st.floats(0, 0.03)), max_size=60),
       st.integers(1, 8))
def test_property_every_item_once_batches_homogeneous_and_fifo(adds, max_batch):
    clock = FakeClock()
    b: MicroBatcher[tuple[int, int, str]] = MicroBatcher(max_batch, 0.02, (32, 64, 128), clock)
    out: list[list[tuple[int, int, str]]] = []
    for i, (length, group, dt) in enumerate(adds):
        clock.t += dt
        b.add((i, length, group), length, group=group)
        while b.ready(clock.t):
            out.append(b.take(clock.t))
    clock.t += 1
    while len(b):
        out.append(b.take(clock.t))
    flat = [x for batch in out for x in batch]
    assert sorted(x[0] for x in flat) == list(range(len(adds)))
    for batch in out:
        assert 1 <= len(batch) <= max_batch
        assert len({(b.bucket_of(x[1]), x[2]) for x in batch}) == 1
    # FIFO per (bucket, group)
    seen: dict[tuple[int, str], int] = {}
    for x in flat:
        key = (b.bucket_of(x[1]), x[2])
        assert x[0] > seen.get(key, -1)
        seen[key] = x[0]


# -- fair order: earliest due first, requests paced fair_slot_s apart, bulk delayed ---------------

def fair(max_batch: int = 4, max_wait_s: float = 0.02, fair_slot_s: float = 0.5, bulk_delay_s: float = 5.0,
         buckets: tuple[int, ...] = (32, 64, 128)):
    clock = FakeClock()
    return MicroBatcher(max_batch, max_wait_s, buckets, clock, fair_slot_s=fair_slot_s,
                        bulk_delay_s=bulk_delay_s), clock


def drain(b: MicroBatcher, clock: FakeClock, step_s: float = 0.1) -> list[list]:
    out = []
    while len(b):
        clock.t += step_s
        batch = b.take(clock.t)
        if batch:
            out.append(batch)
    return out


def test_a_short_request_behind_a_long_one_goes_in_the_next_batch():
    b, clock = fair(max_batch=4)
    for seq in range(30):
        b.add(("long", seq), 40, flow="long")
    clock.t += 0.001
    b.add(("short", 0), 40, flow="short")
    batches = drain(b, clock)
    first = next(x for x, batch in enumerate(batches) if ("short", 0) in batch)
    assert first == 0  # due at its arrival: ahead of the long request's second segment
    assert batches[0] == [("long", 0), ("short", 0), ("long", 1), ("long", 2)]
    # the long request still leaves in its own order
    assert [x for batch in batches for x in batch if x[0] == "long"] == [("long", i) for i in range(30)]


def test_a_slow_voice_is_paced_by_its_cost_not_the_slot():
    """Kokoro makes a segment in ~1 s against a 0.5 s slot: paced by the slot, a long request's
    dues fell behind real time and a short request arriving 3 s in waited for ~3 s of them.
    Paced by each segment's cost, it waits for about one."""
    def wait_of_short(cost_s: float) -> int:
        b, clock = fair(max_batch=1, max_wait_s=0.0, fair_slot_s=0.5)
        for seq in range(20):
            b.add(("long", seq), 40, flow="long", cost_s=cost_s)
        served = 0
        for _ in range(3):  # the worker makes one segment per second for 3 s
            clock.t += 1.0
            assert b.take(clock.t)[0][0] == "long"
            served += 1
        b.add(("short", 0), 40, flow="short", cost_s=cost_s)
        before = 0
        while b.take(clock.t)[0] != ("short", 0):
            before += 1
        return before

    assert wait_of_short(0.0) == 4   # slot-paced: dues 1.5, 2.0, 2.5 and 3.0 are ahead of it (due 3.0)
    assert wait_of_short(1.0) == 1   # cost-paced: only the long segment due at 3.0, added first
    b, clock = fair(max_batch=1, fair_slot_s=0.0)  # a zero slot is arrival order, whatever the cost
    for seq in range(3):
        b.add(("a", seq), 40, flow="a", cost_s=5.0)
    b.add(("b", 0), 40, flow="b", cost_s=5.0)
    assert [x[0] for batch in drain(b, clock) for x in batch] == ["a", "a", "a", "b"]


def test_two_long_requests_interleave():
    b, clock = fair(max_batch=2)
    for seq in range(6):
        b.add(("a", seq), 40, flow="a")
    clock.t += 0.01
    for seq in range(6):
        b.add(("b", seq), 40, flow="b")
    flat = [x for batch in drain(b, clock) for x in batch]
    assert [x[0] for x in flat] == ["a", "b"] * 6


def test_arrival_order_without_flows_or_with_zero_slot():
    b, clock = fair(max_batch=3, fair_slot_s=0.0)
    for seq in range(5):
        b.add(("long", seq), 40, flow="long")
    clock.t += 0.001
    b.add(("short", 0), 40, flow="short")
    flat = [x for batch in drain(b, clock) for x in batch]
    assert flat[-1] == ("short", 0)


def test_bulk_yields_to_interactive_arriving_within_its_delay():
    b, clock = fair(max_batch=1, bulk_delay_s=5.0)
    b.add("bulk", 40, flow="book", priority="bulk")
    clock.t += 1.0
    b.add("chat", 40, flow="chat")
    assert b.take(clock.t) == ["chat"]
    assert b.take(clock.t) == ["bulk"]


def overload(b: MicroBatcher, clock: FakeClock, watched: int, per_tick: int) -> list[tuple]:
    """Serve one batch per 0.1 s while ``per_tick`` new one-segment requests arrive per tick (more
    than are served): the service order as (item, arrival), until every watched item is served."""
    order: list[tuple] = []
    arrival: dict = {}
    n = 0
    while sum(1 for x, _ in order if x[0] != "chat") < watched:
        assert clock.t < 1000, "a watched item starved"
        clock.t += 0.1
        for _ in range(per_tick):
            b.add(("chat", n), 40, flow=("chat", n))
            arrival[("chat", n)] = clock.t
            n += 1
        order += [(x, arrival.get(x, 100.0)) for x in b.take(clock.t)]
    assert len(b) > 20  # the overload is real: interactive work piles up
    return order


def test_bulk_is_not_starved_by_continuous_interactive_load():
    b, clock = fair(max_batch=2, max_wait_s=0.0, fair_slot_s=0.5, bulk_delay_s=5.0)
    for seq in range(3):
        b.add(("book", seq), 40, flow="book", priority="bulk")  # due 105, 105.5, 106
    order = overload(b, clock, watched=3, per_tick=3)
    for k in range(3):
        pos = order.index((("book", k), 100.0))
        due = 100.0 + 5.0 + 0.5 * k
        # served before anything that arrived after its due, and before that it yielded to interactive work
        assert all(t <= due + 1e-9 for _, t in order[:pos])
        assert any(t > 100.5 for _, t in order[:pos])


def test_long_request_advances_one_segment_per_slot_under_overload():
    b, clock = fair(max_batch=1, max_wait_s=0.0, fair_slot_s=0.5)
    for seq in range(10):
        b.add(("long", seq), 40, flow="long")  # due 100 + 0.5 k
    order = overload(b, clock, watched=10, per_tick=2)
    longs = [x for x, _ in order if x[0] == "long"]
    assert longs == [("long", k) for k in range(10)]
    for k in range(10):
        pos = order.index((("long", k), 100.0))
        assert all(t <= 100.0 + 0.5 * k + 1e-9 for _, t in order[:pos])


def test_ready_queue_with_earliest_due_is_served_first():
    b, clock = fair(max_batch=2, max_wait_s=0.0, buckets=(32, 64))
    for seq in range(6):
        b.add(("long", seq), 50, flow="long")        # bucket 1, dues 100, 100.5, ...
    b.take(clock.t)                                  # long 0, 1 served
    clock.t += 0.1
    b.add(("short", 0), 10, flow="short")            # bucket 0, due 100.1 < 101.0
    assert b.take(clock.t) == [("short", 0)]


def test_flows_are_forgotten_once_their_pacing_is_past():
    b, clock = fair(max_batch=1, max_wait_s=0.0, fair_slot_s=0.5)
    for i in range(200):
        b.add(i, 10, flow=i)
        b.take(clock.t)
        clock.t += 1.0
    assert len(b._flows) <= 65


def test_removed_flow_starts_afresh():
    b, clock = fair(max_batch=8)
    for seq in range(10):
        b.add(("a", seq), 10, flow="a")
    assert len(b.remove_if(lambda x: x[0] == "a")) == 10
    clock.t += 0.01
    b.add(("a", 0), 10, flow="a")
    b.add(("b", 0), 10, flow="b")
    clock.t += 1
    assert b.take(clock.t) == [("a", 0), ("b", 0)]


def test_rejects_an_unknown_priority():
    b, _ = fair()
    with pytest.raises(ValueError):
        b.add("x", 10, flow="r", priority="urgent")


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 12), st.integers(1, 200), st.booleans(),
                          st.floats(0, 0.2)), max_size=25),
       st.integers(1, 6), st.sampled_from([0.0, 0.05, 0.5]))
def test_property_fair_every_item_once_in_request_order_and_bounded(reqs, max_batch, slot):
    """Requests (flow, n segments, length, bulk?, gap before it) in any mix: every segment leaves
    once, batches stay homogeneous, each request's segments of one queue leave in order, and no
    segment is served later than the work due before it allows (starvation bound)."""
    clock = FakeClock()
    b: MicroBatcher[tuple[int, int, int]] = MicroBatcher(max_batch, 0.02, (32, 64, 128), clock,
                                                         fair_slot_s=slot, bulk_delay_s=1.0)
    out: list[list[tuple[int, int, int]]] = []
    added = 0
    for r, (_, n, length, bulk, gap) in enumerate(reqs):
        clock.t += gap
        for seq in range(n):
            b.add((r, seq, length), length, flow=r, priority="bulk" if bulk else "interactive")
            added += 1
        while b.ready(clock.t):
            out.append(b.take(clock.t))
        deadline = b.next_deadline()  # the loop polls until then: it must be when a batch becomes ready
        assert (deadline is not None and deadline <= clock.t) == b.ready(clock.t)
    while len(b):
        clock.t += 0.01
        while b.ready(clock.t):
            out.append(b.take(clock.t))
        deadline = b.next_deadline()
        assert deadline is None or deadline > clock.t
    flat = [x for batch in out for x in batch]
    assert len(flat) == added and len(set(flat)) == added
    for batch in out:
        assert 1 <= len(batch) <= max_batch
        assert len({b.bucket_of(x[2]) for x in batch}) == 1
    last_seq: dict[int, int] = {}
    for r, seq, _ in flat:  # one request's length is one bucket here: its whole order is kept
        assert seq > last_seq.get(r, -1)
        last_seq[r] = seq


def test_a_full_batch_of_later_work_waits_for_earlier_work_filling_its_batch():
    b, clock = fair(max_batch=2, max_wait_s=0.02, buckets=(32, 64))
    for seq in range(4):
        b.add(("long", seq), 50, flow="long")        # dues 100, 100.5, 101, 101.5
    assert b.take(clock.t) == [("long", 0), ("long", 1)]
    clock.t += 0.1
    b.add(("short", 0), 10, flow="short")            # due 100.1, not ready for 20 ms
    assert not b.ready(clock.t)                      # the full long queue (due 101) does not jump it
    assert b.next_deadline() == pytest.approx(clock.t + 0.02)
    clock.t += 0.02
    assert b.take(clock.t) == [("short", 0)]
    assert b.take(clock.t) == [("long", 2), ("long", 3)]


# -- fair burst: a short request is served whole, in arrival order ----------------------------

def test_requests_of_a_few_segments_are_served_whole_in_arrival_order():
    """Paced 0.5 s apart, the third segment of a three-segment request was due a second after its
    arrival: every request arriving within that second went first, and its answer waited for
    them (the p99 of bench latency, issue 32). Within ``fair_burst_s`` of cost a request is not
    paced: requests leave whole, first come first served, as a task queue serves them."""
    clock = FakeClock()
    b = MicroBatcher(1, 0.0, (32, 64, 128), clock, fair_slot_s=0.5, fair_burst_s=0.5)
    for r in range(4):
        for seq in range(3):
            b.add((f"r{r}", seq), 40, flow=f"r{r}", cost_s=0.1)
        clock.t += 0.05
    order = [b.take(clock.t)[0] for _ in range(12)]
    assert order == [(f"r{r}", seq) for r in range(4) for seq in range(3)]


def test_a_long_request_is_paced_after_its_burst():
    """Past ``fair_burst_s`` of cost the rest of a long request is paced again: a short request
    arriving after it waits for the burst only, not for the whole request."""
    clock = FakeClock()
    b = MicroBatcher(1, 0.0, (32, 64, 128), clock, fair_slot_s=0.5, fair_burst_s=0.3)
    for seq in range(20):
        b.add(("long", seq), 40, flow="long", cost_s=0.1)
    clock.t += 0.01
    b.add(("short", 0), 40, flow="short", cost_s=0.1)
    order = [b.take(clock.t)[0] for _ in range(21)]
    assert order.index(("short", 0)) == 3  # after the long request's first 0.3 s of work (3 segments) only
    assert [x for x in order if x[0] == "long"] == [("long", i) for i in range(20)]


def test_an_unknown_cost_counts_one_slot_against_the_burst():
    clock = FakeClock()
    b = MicroBatcher(1, 0.0, (32, 64, 128), clock, fair_slot_s=0.5, fair_burst_s=1.0)
    for seq in range(4):
        b.add(("a", seq), 40, flow="a")  # cost unknown: 0.5 s each, so two fit in the burst
    clock.t += 0.01
    b.add(("b", 0), 40, flow="b")
    order = [b.take(clock.t)[0] for _ in range(5)]
    assert order.index(("b", 0)) == 2


# -- short requests first (short_first) ----------------------------------------------------------

def test_short_first_serves_a_smaller_request_waiting_with_a_larger_one_first():
    """Both wait behind busy lanes: the one-segment request that came second goes first, the
    three-segment one still leaves whole and in order; with short_first 0, arrival order."""
    for short_first, want in ((2.0, ["s", "l", "l", "l"]), (0.0, ["l", "l", "l", "s"])):
        clock = FakeClock()
        b = MicroBatcher(1, 0.0, (32, 64, 128), clock, fair_slot_s=0.5, fair_burst_s=0.5, short_first=short_first)
        for seq in range(3):
            b.add(("l", seq), 40, flow="l", cost_s=0.07, size_s=0.21)
        clock.t += 0.01
        b.add(("s", 0), 40, flow="s", cost_s=0.07, size_s=0.07)
        order = [b.take(clock.t)[0] for _ in range(4)]
        assert [r for r, _ in order] == want
        assert [x for x in order if x[0] == "l"] == [("l", i) for i in range(3)]


def test_short_first_passes_a_larger_request_over_for_a_bounded_time():
    """The larger request's due moves by at most fair_burst_s: a small request arriving later
    than that goes after it, however small."""
    clock = FakeClock()
    b = MicroBatcher(1, 0.0, (32, 64, 128), clock, fair_slot_s=0.5, fair_burst_s=0.3, short_first=2.0)
    b.add(("big", 0), 40, flow="big", cost_s=0.1, size_s=10.0)  # 2 x 10 s, capped at 0.3 s
    clock.t += 0.25
    b.add(("early", 0), 40, flow="early", cost_s=0.01, size_s=0.01)  # due 0.25 + 2 x 0.01 < 0.3
    clock.t += 0.1
    b.add(("late", 0), 40, flow="late", cost_s=0.0, size_s=0.0)  # due 0.35 > 0.3
    assert [b.take(clock.t)[0][0] for _ in range(3)] == ["early", "big", "late"]


def test_short_first_must_not_be_negative():
    with pytest.raises(ValueError):
        MicroBatcher(1, 0.0, (32,), FakeClock(), short_first=-1.0)


def test_a_backlog_is_served_in_the_order_it_was_written_not_read():
    """A restart's backlog is read partition by partition: the item that waited longest for the
    worker (owed_s) goes first, then the rest by how long they waited; without owed_s, read order."""
    clock = FakeClock()
    b = MicroBatcher(1, 0.0, (32, 64, 128), clock, fair_slot_s=0.5, fair_burst_s=0.5)
    for name, owed in (("p0-new", 0.2), ("p0-newer", 0.1), ("p1-oldest", 1.9), ("p1-old", 1.0)):
        b.add(name, 10, flow=name, owed_s=owed)
    clock.t += 0.01
    b.add("fresh", 10, flow="fresh")
    assert [b.take(clock.t)[0] for _ in range(5)] == ["p1-oldest", "p1-old", "p0-new", "p0-newer", "fresh"]
    for name in ("p0-new", "p1-oldest"):
        b.add(name, 10, flow=name + "-2")
    assert [b.take(clock.t)[0] for _ in range(2)] == ["p0-new", "p1-oldest"]


def test_what_is_owed_keeps_a_requests_segments_in_order_and_readiness_on_arrival():
    """A request's later segments still follow its first (paced from its earlier due), and an
    owed item is not counted as having waited for its batch to fill (max_wait from its arrival)."""
    clock = FakeClock()
    b = MicroBatcher(3, 0.05, (32, 64, 128), clock, fair_slot_s=0.5, fair_burst_s=0.0)
    b.add(("r", 0), 10, flow="r", owed_s=1.5)
    b.add(("r", 1), 10, flow="r", owed_s=1.5)
    assert not b.ready(clock.t)  # one queue, one item short of a batch, waited 0 s here
    clock.t += 0.05
    assert b.take(clock.t) == [("r", 0), ("r", 1)]
