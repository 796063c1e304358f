"""``ttsflow bench latency --quick --json`` against the real stack: both systems, every load, a plot.

A real run (a ttsflow stage + worker and a Celery node on the shared stack): the test checks
that the report is complete and consistent and that the plot is a PNG next to the JSON, not
how fast either system is (the machine is shared).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from streams.bench.tail import TTSFLOW_PARTS
from streams.settings import Settings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("celery") is None,
                       reason="celery is not installed (the `bench` extra: pip install -e '.[bench]')"),
]


@pytest.mark.timeout(400)
def test_quick_latency_bench_reports_both_systems_and_plots(stack_settings: Settings, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "bench", "latency", "--quick", "--json",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=380)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["quick"] is True and r["fractions"] == [0.5, 0.9]
    assert r["model"]["ttsflow"] == r["model"]["baseline"] != "?"
    for name in ("ttsflow", "baseline"):
        x = r["systems"][name]
        assert x["capacity_rps"] > 0
        assert [p["fraction"] for p in x["rates"]] == r["fractions"]
        for p in x["rates"]:
            assert p["failed"] == 0 and p["answered"] + p["lost"] == p["requests"]
            c = p["completion"]
            assert c["n"] == p["answered"] and 0 < c["p50_ms"] <= c["p90_ms"] <= c["p99_ms"]
            assert p["offered_rps"] == pytest.approx(p["fraction"] * x["capacity_rps"], rel=0.01)
    for p in r["systems"]["ttsflow"]["rates"]:
        fc = p["first_chunk"]
        assert fc["streaming_requests"] > 0
        if fc["p50_ms"] is None:  # a worker without chunks says so
            assert "reason" in fc
        else:
            assert 0 < fc["p50_ms"] <= fc["p99_ms"] and fc["chunks_out_of_order"] == 0
            assert fc["chunks_missing"] == 0  # every streaming request: a chunk for each of its segments
    # where the time went, per system: the median requests' parts against the slowest 1%'s
    for name, parts in (("ttsflow", TTSFLOW_PARTS), ("baseline", ("queue", "synth", "upload", "task_rest",
                                                                    "result_read"))):
        for p in r["systems"][name]["rates"]:
            b = p["breakdown"]
            assert 0 < b["n"] <= p["answered"] and b["median_requests"] >= 1 and b["slowest_requests"] >= 1
            for k in (*parts, "total"):
                assert b["median_ms"][k] >= 0 and b["slowest_1pct_ms"][k] >= 0
                assert 0 <= b["per_part"][k]["p50_ms"] <= b["per_part"][k]["p99_ms"]
            assert b["median_ms"]["total"] <= b["slowest_1pct_ms"]["total"]
    assert len(r["table"]) == 2 * len(r["fractions"])
    assert set(r["ratios"]["p50_by_fraction"]) == {"0.5", "0.9"}
    json_path, png = Path(r["json"]), Path(r["plot"])
    assert json_path.parent == png.parent and json_path.parent.parent == tmp_path
    assert json.loads(json_path.read_text())["run_id"] == r["run_id"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
