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
