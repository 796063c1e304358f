"""The tail breakdown and the repeat summary of the latency benchmarks (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import Completion, Timings
from streams.bench.tail import breakdown, summarize_repeats, ttsflow_path


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
