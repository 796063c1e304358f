"""Pure helpers of the side-by-side benchmarks: paired ratios with their noise, and pinning."""

from __future__ import annotations

import math
import os

import pytest

from streams.bench.harness import paired_ratio, pin_threads
from streams.bench.pipeline import _pin_worker


def test_paired_ratio_of_identical_pairs_is_one_with_no_spread() -> None:
    r = paired_ratio([2.0, 3.0, 5.0], [2.0, 3.0, 5.0])
    assert r == {"pairs": 3, "median": 1.0, "geomean": 1.0, "ci95": [1.0, 1.0]}


def test_paired_ratio_interval_holds_the_geomean_and_widens_with_noise() -> None:
    quiet = paired_ratio([0.98, 0.99, 0.97, 0.98], [1.0, 1.0, 1.0, 1.0])
    noisy = paired_ratio([0.90, 1.06, 0.93, 1.03], [1.0, 1.0, 1.0, 1.0])
    assert quiet is not None and noisy is not None
    for r in (quiet, noisy):
        lo, hi = r["ci95"]
        assert lo < r["geomean"] < hi
    assert quiet["ci95"][1] < 1.0  # a cost the quiet run resolves
    assert noisy["ci95"][0] < 1.0 < noisy["ci95"][1]  # one the noisy run cannot
    # the t interval of four log ratios by hand
    logs = [math.log(x) for x in (0.98, 0.99, 0.97, 0.98)]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    assert quiet["ci95"][1] == pytest.approx(math.exp(mean + 3.182 * sd / 2), abs=1e-4)


def test_paired_ratio_skips_empty_sides_and_needs_two_pairs_for_an_interval() -> None:
    assert paired_ratio([], []) is None
    assert paired_ratio([0.0], [1.0]) is None
    one = paired_ratio([1.1], [1.0])
    assert one is not None and one["ci95"] is None and one["median"] == pytest.approx(1.1)


def test_pin_worker_puts_the_worker_alone_on_the_lowest_cpu() -> None:
    calls: dict[str, set[int]] = {}

    def pin(pid: int | None, cpus: set[int]) -> bool:
        calls[str(pid)] = cpus
        return pid is not None

    got = _pin_worker({"worker": 10, "stage": 11, "s3": None}, {0, 1, 2}, pin)
    assert calls == {"10": {0}, "11": {1, 2}, "None": {1, 2}}
    assert got == {"worker": [0], "others": [1, 2], "pinned": ["stage", "worker"]}
    assert _pin_worker({"worker": 10}, {0}, pin) == {"worker": None, "others": None}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity here")
def test_pin_threads_moves_every_thread_of_a_process_and_back() -> None:
    everywhere = os.sched_getaffinity(0)
    one = {min(everywhere)}
    try:
        assert pin_threads(os.getpid(), one)
        assert os.sched_getaffinity(0) == one
    finally:
        assert pin_threads(os.getpid(), everywhere)
    assert os.sched_getaffinity(0) == everywhere
    assert not pin_threads(None, one)


def test_paired_cpu_counts_a_process_cpu_and_skips_one_that_is_gone() -> None:
    """``bench paired``'s CPU per request: /proc's user + system time of each supervised process."""
    from types import SimpleNamespace

    from streams.bench.paired import _cpu_s

    sup = SimpleNamespace(procs={"me": SimpleNamespace(pid=os.getpid()), "gone": SimpleNamespace(pid=None)})
    got = _cpu_s(sup)
    assert set(got) == {"me"}
    assert got["me"] > 0 and got["me"] == pytest.approx(sum(os.times()[:2]), abs=0.05)


def test_process_cpu_is_this_process_cpu_and_none_for_an_unknown_one() -> None:
    """The one /proc reader of the benchmarks (paired, pipeline, stage)."""
    from streams.bench.harness import process_cpu_s

    got = process_cpu_s(os.getpid())
    assert got is not None and got == pytest.approx(sum(os.times()[:2]), abs=0.05)
    assert process_cpu_s(None) is None
    assert process_cpu_s(2**22 + 12345) is None  # above Linux's pid_max: no such process


def test_paired_arm_settings_are_k_equals_v_and_a_bare_word_is_refused() -> None:
    from streams.bench.paired import _pairs

    assert _pairs(["transaction.partition.verification.enable=false", "TTS_X=a=b", "E="]) == {
        "transaction.partition.verification.enable": "false", "TTS_X": "a=b", "E": ""}
    with pytest.raises(SystemExit, match="not K=V"):
        _pairs(["oops"])
    with pytest.raises(SystemExit, match="not K=V"):
        _pairs(["=v"])
