"""``ttsflow bench baseline --quick --json`` against the real stack: both systems run and are compared.

The benchmark is a real run (a ttsflow stage + worker and a Celery node, real Redis broker
and result backend, S3, SIGKILLs): the test checks that what it reports is complete and
consistent, not how fast either system is (the machine is shared).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streams.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("celery") is None,
                       reason="celery is not installed (the `bench` extra: pip install -e '.[bench]')"),
]


def _check_phase(ph: dict[str, Any]) -> None:
    assert ph["requests"] > 0
    assert ph["answered"] + ph["lost"] == ph["requests"]
    assert ph["failed"] == 0, ph
    assert ph["throughput_rps"] > 0
    assert ph["p50_ms"] is not None and 0 < ph["p50_ms"] <= ph["p99_ms"] <= ph["max_ms"]


@pytest.mark.timeout(900)
def test_quick_bench_reports_both_systems(stack_settings: Settings, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "bench", "baseline", "--quick", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])

    assert r["quick"] is True and r["workers"] == 1
    # same model on both sides (the store's current version)
    assert r["model"]["ttsflow"] == r["model"]["baseline"] != "?"
    cfg = r["baseline_config"]
    assert cfg["acks_late"] and cfg["reject_on_worker_lost"] and cfg["prefetch_multiplier"] == 1

    for name in ("ttsflow", "baseline"):
        x = r["systems"][name]
        _check_phase(x["burst"])
        assert len(x["rates"]) == len(r["fractions"])
        offered = [p["offered_rps"] for p in x["rates"]]
        assert offered == sorted(offered) and offered[0] > 0
        for p in x["rates"]:
            _check_phase(p)
            assert isinstance(p["sustained"], bool)
        ms = x["max_sustained"]
        if ms is not None:  # on a very loaded machine even the lowest rate may not be sustained
            assert ms["requests_per_s"] > 0 and ms["audio_s_per_s"] > 0
        _check_phase(x["at_70"])
        k = x["kill"]
        assert len(k["kills"]) == 2, k
        assert k["answered"] + k["lost"] == k["requests"]
        assert k["duplicated"] >= 0 and k["lost"] >= 0
        assert k["answered_late"] + k["never_answered"] == k["lost"]
        assert x["duplicates_without_kills"] == 0
    # ttsflow's promise, measured: nothing lost for good, nothing answered twice, even with SIGKILLs
    # (on a loaded machine some answers may come after the deadline: late, not lost)
    tf = r["systems"]["ttsflow"]["kill"]
    assert tf["never_answered"] == 0 and tf["duplicated"] == 0, tf
    assert r["systems"]["ttsflow"]["guarantee"] == "exactly_once"
    assert r["systems"]["baseline"]["kill"]["kills"][1]["what"].startswith("SIGKILL whole worker node")

    ratios = r["ratios"]
    for key in ("max_sustained_rps", "max_sustained_audio_s_per_s", "burst_rps", "p50_at_70", "p99_at_70"):
        assert key in ratios
    assert ratios["burst_rps"] is not None and ratios["burst_rps"] > 0
    b_t, b_b = r["systems"]["ttsflow"]["burst"], r["systems"]["baseline"]["burst"]
    assert ratios["burst_rps"] == pytest.approx(b_t["throughput_rps"] / b_b["throughput_rps"], rel=0.01)
