"""The tail breakdown and the repeat summary of the latency benchmarks (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import Completion, Timings
from streams.bench.tail import breakdown, run_repeats, summarize_repeats, ttsflow_path


def test_the_slowest_requests_are_set_against_the_median_ones() -> None:
    rows = [{"queue": 0.01, "synth": 0.1, "total": 0.11} for _ in range(99)]
    rows.append({"queue": 2.0, "synth": 0.1, "total": 2.1})
    b = breakdown(rows)
    assert b["n"] == 100 and b["slowest_requests"] == 1
    assert b["median_ms"] == {"queue": 10.0, "synth": 100.0, "total": 110.0}
    assert b["excess_ms"]["queue"] == 1990.0 and b["excess_ms"]["synth"] == 0.0
    assert breakdown([]) == {"n": 0}


def test_a_ttsflow_path_adds_up_to_the_latency_the_client_saw() -> None:
    done = datetime(2026, 1, 1, tzinfo=UTC)
    c = Completion(request_id="r", user_id="u", status="ok", completed_at=done,
                   timings=Timings(e2e_ms=900, synth_ms=300, stage_ms=100, read_ms=50, wait_ms=200, model_ms=300,
                                   upload_ms=40, collect_ms=10, join_ms=200, commit_wait_ms=30))
    sent = done.timestamp() - 0.9
    p = ttsflow_path(c, sent, done.timestamp() + 0.03 + 0.07)
    assert p is not None
    assert p["txn_read"] == 0.07 or abs(p["txn_read"] - 0.07) < 1e-6
    assert abs(sum(v for k, v in p.items() if k != "total") - p["total"]) < 1e-6
    assert ttsflow_path(Completion(request_id="r", user_id="u", status="ok"), sent, sent + 1) is None


def test_repeats_give_the_median_and_spread_of_each_figure() -> None:
    runs = [{"r": 1.0}, {"r": 3.0}, {"r": 2.0}, {"x": 1}]
    s = summarize_repeats(runs, {"r": lambda r: r["r"], "missing": lambda r: r["nope"]})
    assert s["r"] == {"n": 3, "median": 2.0, "min": 1.0, "max": 3.0, "values": [1.0, 3.0, 2.0]}
    assert s["missing"] == {"n": 0, "median": None}


def test_run_repeats_prints_one_json_with_the_median_and_keeps_what_ran_when_a_repeat_fails(
        capsys: pytest.CaptureFixture[str]) -> None:
    def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
        return summarize_repeats(runs, {"x": lambda r: r["x"]})

    assert run_repeats("t", 1, lambda k: {"x": 5}, summary, str, as_json=True) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"x": 5}  # one run: the run itself

    assert run_repeats("t", 3, lambda k: {"x": [1, 9, 4][k]}, summary, str, as_json=True) == 0
    r = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert r["repeat"] == 3 and len(r["runs"]) == 3 and r["repeats"]["x"]["median"] == 4

    def flaky(k: int) -> dict[str, Any]:
        if k == 2:
            raise RuntimeError("broker gone")
        return {"x": k}

    assert run_repeats("t", 3, flaky, summary, str, as_json=False) == 1
    out, err = capsys.readouterr()
    assert "broker gone" in err and json.loads(out.splitlines()[-1])["repeat"] == 2
    assert "figure" in out  # the repeats' table was printed before the JSON
    assert run_repeats("t", 0, flaky, summary, str, as_json=True) == 2
