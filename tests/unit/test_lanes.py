"""The model lanes (streams.worker.lanes): most urgent first, futures as an executor's, a clean stop."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streams.worker.lanes import Lanes


def _blocked(lanes: Lanes, n: int) -> threading.Event:
    """Occupy every one of the ``n`` lanes until the returned event is set."""
    release, started = threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        started.release()
        release.wait(10)

    for _ in range(n):
        lanes.submit((-1,), hold)
    for _ in range(n):
        assert started.acquire(timeout=10)
    return release


def test_waiting_tasks_run_smallest_key_first_and_equal_keys_in_submission_order() -> None:
    lanes = Lanes(1)
    try:
        release = _blocked(lanes, 1)
        ran: list[str] = []
        futs = [lanes.submit(key, ran.append, name)
                for key, name in [((5.0, 1), "post of the first"), ((7.0, 0), "model of the second"),
                                  ((5.0, 0), "model of the first, later segment"), ((5.0, 1), "post, later")]]
        release.set()
        for f in futs:
            f.result(timeout=10)
        assert ran == ["model of the first, later segment", "post of the first", "post, later", "model of the second"]
    finally:
        lanes.shutdown()


def test_a_task_runs_on_each_lane_at_once_and_its_outcome_is_its_future() -> None:
    lanes = Lanes(2, thread_name_prefix="model")
    try:
        both = threading.Barrier(2, timeout=10)
        names = [lanes.submit((0,), lambda: (both.wait(), threading.current_thread().name)[1]) for _ in range(2)]
        assert sorted(f.result(timeout=10) for f in names) == ["model_0", "model_1"]

        def fail() -> None:
            raise ValueError("this item")

        with pytest.raises(ValueError, match="this item"):
            lanes.submit((0,), fail).result(timeout=10)
        assert lanes.submit((0,), lambda: 42).result(timeout=10) == 42  # a failure does not stop a lane
    finally:
        lanes.shutdown()


def test_a_waiting_task_can_be_cancelled_and_shutdown_cancels_or_finishes_the_rest() -> None:
    lanes = Lanes(1)
    release = _blocked(lanes, 1)
    ran: list[int] = []
    cancelled = lanes.submit((1,), ran.append, 1)
    assert cancelled.cancel()
    kept = lanes.submit((2,), ran.append, 2)
    release.set()
    kept.result(timeout=10)
    assert ran == [2] and cancelled.cancelled()

    release = _blocked(lanes, 1)
    dropped = lanes.submit((3,), ran.append, 3)
    threading.Timer(0.05, release.set).start()
    lanes.shutdown(wait=True, cancel_futures=True)
    assert dropped.cancelled() and ran == [2]
    with pytest.raises(RuntimeError):
        lanes.submit((4,), ran.append, 4)

    finishing = Lanes(1)
    release = _blocked(finishing, 1)
    last = finishing.submit((1,), ran.append, 5)
    release.set()
    finishing.shutdown(wait=True)  # without cancel_futures the queue is run to its end first
    assert last.done() and ran == [2, 5]


def _seg(seq: int, due: float, *, stream: bool = False, request: str = "r") -> Any:
    from schemas import Segment
    from streams.worker.ledger import Seg

    seg = Segment(request_id=request, user_id="u", seq=seq, total=3, text="Hello there.", hash="e" * 64,
                  request_hash="0" * 64, voice="heart", stream=stream)
    s = Seg(0, 0, seq, seg, "f" * 64, 0.0)
    s.due = due
    return s


def test_a_request_gets_its_model_calls_before_its_parts_dsp_and_a_stream_its_chunks_in_order() -> None:
    from streams.worker.parts import _urgency

    # three segments of one short request share its due: the third's call ranks before the first's DSP
    first, third = _seg(0, 5.0), _seg(2, 5.0)
    assert _urgency([third], post=False) < _urgency([first], post=True)
    # an earlier request's DSP before a later request's call (first come, first served)
    assert _urgency([first], post=True) < _urgency([_seg(0, 6.0, request="later")], post=False)
    # a stream: part 0's DSP (its first chunk) before segment 1's call, that before part 1's DSP
    s0, s1 = _seg(0, 5.0, stream=True), _seg(1, 5.0, stream=True)
    keys = [_urgency([s0], post=False), _urgency([s0], post=True), _urgency([s1], post=False),
            _urgency([s1], post=True)]
    assert keys == sorted(keys) and len(set(keys)) == 4


def test_the_lone_call_others_are_held_for_goes_before_any_due() -> None:
    from streams.worker.parts import _FIRST, _urgency

    # a backlog segment's due can be earlier than the lone call's; two such calls taken first by both
    # lanes would each wait for the lone call behind them
    assert _FIRST < _urgency([_seg(0, -1e9)], post=False) and _FIRST < _urgency([_seg(0, -1e9)], post=True)
