"""engine.solo: a call that starts with nothing else in flight may use every core."""

from __future__ import annotations

import threading

from engine.solo import SoloGate


def test_a_lone_call_is_solo_and_one_beside_it_is_not() -> None:
    g = SoloGate()
    assert g.enter() is True
    assert g.enter() is False  # beside the first
    g.leave()
    assert g.enter() is False  # the first is still in flight
    g.leave()
    g.leave()
    assert g.in_flight == 0
    assert g.enter() is True  # idle again
    g.leave()
    assert (g.solo_calls, g.lane_calls) == (2, 2)


def test_a_disabled_gate_never_says_solo() -> None:
    g = SoloGate(enabled=False)
    assert g.enter() is False
    g.leave()
    assert g.in_flight == 0


def test_counts_hold_under_threads() -> None:
    g = SoloGate()
    solos: list[bool] = []
    lock = threading.Lock()

    def one() -> None:
        s = g.enter()
        with lock:
            solos.append(s)
        g.leave()

    threads = [threading.Thread(target=one) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert g.in_flight == 0 and len(solos) == 200 and g.solo_calls + g.lane_calls == 200


def test_a_thread_that_says_no_keeps_its_lane_even_on_an_idle_backend() -> None:
    from engine.solo import said

    gate = SoloGate()
    with said(False):
        assert gate.enter() is False  # the worker's calls other than the held first segment
    gate.leave()
    with said(True):
        assert gate.enter() is True
    gate.leave()
    assert gate.enter() is True  # a caller that says nothing: solo when idle
    gate.leave()
