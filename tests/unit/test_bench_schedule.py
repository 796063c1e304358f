"""Open-loop arrivals of ``bench baseline`` / ``bench latency``: one shared shape, the offered rate achieved."""

from __future__ import annotations

import itertools
import random

import pytest

from streams.bench.baseline import schedule, unit_gaps


def test_the_nth_request_is_sent_at_n_over_rate() -> None:
    unit = unit_gaps(random.Random(7), 200)
    for n, rate in ((200, 10.6), (150, 7.5), (6, 0.4)):
        at = schedule(unit, n, rate)
        assert len(at) == n
        assert at[-1] == pytest.approx(n / rate)
        assert all(b > a for a, b in itertools.pairwise(at))  # increasing


def test_both_systems_get_the_same_shape_at_their_own_rate() -> None:
    unit = unit_gaps(random.Random(3), 100)
    fast, slow = schedule(unit, 100, 10.0), schedule(unit, 100, 5.0)
    assert [2 * t for t in fast] == pytest.approx(slow)  # the same gaps, twice as long at half the rate


def test_the_gaps_stay_random() -> None:
    at = schedule(unit_gaps(random.Random(1), 400), 400, 4.0)
    gaps = [b - a for a, b in itertools.pairwise([0.0, *at])]
    mean = sum(gaps) / len(gaps)
    cv = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean
    assert mean == pytest.approx(0.25)
    assert 0.8 < cv < 1.2  # exponential gaps (cv 1), not a metronome (cv 0)


def test_too_few_gaps_is_an_error() -> None:
    with pytest.raises(ValueError):
        schedule(unit_gaps(random.Random(1), 5), 6, 1.0)


def test_the_capacity_is_the_highest_rate_sustained_on_the_ramp() -> None:
    from streams.bench.latency import ramp_capacity

    steps = [{"sent_rps": 7.0, "sustained": True}, {"sent_rps": 8.5, "sustained": True},
             {"sent_rps": 10.0, "sustained": False}]
    assert ramp_capacity(steps, 10.0) == 8.5
    assert ramp_capacity([{"sent_rps": 7.0, "sustained": False}], 10.0) == 5.0  # none: half the burst's


def test_a_rate_is_sustained_only_when_answers_keep_up_with_arrivals_and_latency_stays_flat() -> None:
    from streams.bench.baseline import sustained

    # 15 s at 10/s: answers trailing the sends by 0.3 s at the end keep up; 1.5 s of backlog does not
    assert sustained(10.0, 150 / 15.3, 0, 0.2, 0.25)
    assert not sustained(10.0, 150 / 16.5, 0, 0.2, 0.25)
    assert not sustained(10.0, 10.0, 1, 0.2, 0.25)  # a request never answered
    assert not sustained(10.0, 10.0, 0, 0.2, 1.2)  # the last third waited 1.2 s, the first 0.2
    assert not sustained(10.0, 10.0, 0, None, 0.2)


def test_one_slow_last_answer_does_not_fail_a_step_a_backlog_does() -> None:
    """Celery's 80% step of latency-20261206-2230 (127 requests sent over 15 s, median wait 158 ms, the
    last third's 186 ms, the last answer ~0.7 s late) read 96.9% of its arrivals answered per second
    over send-to-last-answer and failed; counted to the last third's median wait it keeps up, while a
    run whose last third waits 1.3 s (a backlog) still fails."""
    from streams.bench.baseline import keep_up_rps, sustained

    offered = 127 / 15.0
    assert not sustained(offered, 127 / 15.7, 0, 0.15, 0.186)  # the old span: to the last answer
    assert sustained(offered, keep_up_rps(127, 15.0, 0.186), 0, 0.15, 0.186)
    assert not sustained(offered, keep_up_rps(127, 15.0, 1.3), 0, 0.9, 1.3)
    assert keep_up_rps(0, 15.0, None) == 0.0



def test_a_ramp_step_not_sustained_is_run_again_once_before_the_ramp_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """One stall of the shared machine in a step used to end a system's ramp there (Celery's capacity
    read 5.7 requests/s in a repeat whose neighbour sustained 9.1): a step not sustained is run once
    more at its rate, on fresh texts and arrivals, and the ramp ends only at a rate failed twice."""
    from types import SimpleNamespace

    from streams.bench import baseline

    # each system's verdicts, step by step (the same rate again after a failure)
    verdicts = {"a": [True, False, True, True, False, False], "b": [True, True, False, False]}
    runs: dict[tuple[str, str], list[str]] = {}

    def phase(sysm, label, texts, at, **_kw):  # type: ignore[no-untyped-def]
        runs[sysm.name, label] = list(texts)
        ok = verdicts[sysm.name].pop(0)
        return {"label": label, "sent_rps": len(texts) / at[-1], "sustained": ok, "throughput_rps": 1.0, "p50_ms": 1.0}

    monkeypatch.setattr(baseline, "_phase", phase)
    monkeypatch.setattr(baseline, "_say", lambda msg: None)
    drawn = iter(range(10_000))
    systems = [SimpleNamespace(name="a"), SimpleNamespace(name="b")]
    steps = baseline.ramp(systems, {"a": 10.0, "b": 5.0}, (0.6, 0.7, 0.8, 0.9, 1.0), lambda n: [str(next(drawn))
                          for _ in range(n)], random.Random(1), 10.0, "p", "c")
    assert [x["label"] for x in steps["a"]] == ["c0", "c1", "c1again", "c2", "c3", "c3again"]
    assert [x["label"] for x in steps["b"]] == ["c0", "c1", "c2", "c2again"]
    assert [x.get("retry", False) for x in steps["a"]] == [False, False, True, False, False, True]
    # the retry's texts are its own, and the other system's step keeps the shared ones
    assert len(runs["a", "c1"]) == len(runs["a", "c1again"]) == 70  # 0.7 of 10/s for 10 s
    assert not set(runs["a", "c1"]) & set(runs["a", "c1again"])
    assert runs["b", "c1"] == runs["a", "c1"][:35]  # b's step after a's retry: the step's shared texts
    from streams.bench.latency import ramp_capacity

    assert ramp_capacity(steps["a"], 10.0) == pytest.approx(8.0)  # 0.8 of 10: sustained; 0.9 failed twice
    assert ramp_capacity(steps["b"], 5.0) == pytest.approx(3.5)
