"""The sweep's pure parts: the design, the Pareto front, the recommendation, the settings it prints."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from streams.bench.sweep import design, front, recommend, settings_for
from streams.bench.sweep_corpus import EN, ZH

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_grid_is_run_whole() -> None:
    kind, points = design({"precision": ["int8", "fp32", "fp16"], "batch": [1, 4, 8], "threads": [1, 2]}, 18)
    assert kind == "full" and len(points) == 18
    assert len({tuple(p.values()) for p in points}) == 18


def test_a_large_grid_becomes_a_balanced_latin_square() -> None:
    factors = {"precision": ["int8", "fp32", "fp16"], "batch": [1, 4, 8], "threads": [1, 2, 4]}
    kind, points = design(factors, 18)
    assert kind == "latin-square" and len(points) == 9  # 27 -> 9
    # every pair of levels of every two factors appears exactly once: an orthogonal array
    for a, b in itertools.combinations(factors, 2):
        pairs = Counter((p[a], p[b]) for p in points)
        assert set(pairs) == set(itertools.product(factors[a], factors[b])) and set(pairs.values()) == {1}


def test_unequal_levels_still_cover_every_level_of_every_factor() -> None:
    factors = {"precision": ["int8", "fp32", "fp16"], "batch": [1, 2, 4, 8], "threads": [1, 2]}
    kind, points = design(factors, 10)
    assert kind == "latin-square" and len(points) < 24
    for name, levels in factors.items():
        assert {p[name] for p in points} == set(levels)


def test_the_front_keeps_only_points_nobody_beats_on_both_axes() -> None:
    rows = [{"audio_s_per_s": 10, "error": 0.05},   # 0: front (most accurate)
            {"audio_s_per_s": 20, "error": 0.08},   # 1: front
            {"audio_s_per_s": 15, "error": 0.09},   # 2: beaten by 1
            {"audio_s_per_s": 40, "error": 0.30},   # 3: front (fastest)
            {"audio_s_per_s": 20, "error": 0.08},   # 4: a tie with 1 is not beaten
            {"audio_s_per_s": 50, "error": None}]   # 5: no score, no part
    assert front(rows) == [0, 1, 3, 4]


@pytest.mark.parametrize(("floor", "want"), [(0.10, 1), (0.06, 0), (0.5, 2), (0.01, None)])
def test_the_recommendation_is_the_fastest_point_at_or_under_the_floor(floor: float, want: int | None) -> None:
    rows = [{"audio_s_per_s": 10, "error": 0.05}, {"audio_s_per_s": 20, "error": 0.10},
            {"audio_s_per_s": 40, "error": 0.30}, {"audio_s_per_s": 99, "error": None}]
    assert recommend(rows, floor) == want


def test_a_point_is_printed_as_the_settings_a_worker_runs_it_with() -> None:
    row = {"backend": "piper", "precision": "fp16", "batch": 8, "threads": 2, "providers": "torch-cuda"}
    assert settings_for(row) == {"TTS_BACKEND": "piper", "TTS_PRECISION": "fp16", "TTS_MAX_BATCH": "8",
                                 "TTS_THREADS": "2", "TTS_MODEL_LANES": "1", "TTS_PROVIDERS": "torch-cuda"}


def test_the_corpora_are_fifty_distinct_sentences_each() -> None:
    assert len(EN) == len(set(EN)) == 50 and len(ZH) == len(set(ZH)) == 50
    assert all(s.strip() == s and len(s) >= 10 for s in (*EN, *ZH))


@pytest.mark.slow
def test_the_quick_sweep_measures_scores_and_recommends_with_the_real_voice(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    plot = tmp_path / "front.png"
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "bench", "sweep", "--quick", "--json",
                           "--model-dir", str(tmp_path / "models"), "--plot", str(plot)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1  # --json: only the object on stdout; progress went to stderr
    assert "# sweep 3/3" in proc.stderr
    result = json.loads(lines[0])
    rows = result["results"]
    assert result["design"]["hibari"]["kind"] == "full" and [r["batch"] for r in rows] == [1, 4]
    for r in rows:
        assert "failed" not in r, r
        assert r["audio_s_per_s"] > 1 and 0.3 < r["rtf"] * r["audio_s_per_s"] < 3.0  # hibari is far faster than real time
        assert 0 < r["first_audio_ms"] <= r["batch_p99_ms"] * 1.5 and r["peak_rss_mib"] > 50
        assert r["metric"] == "wer" and 0 <= r["error"] <= 0.35  # four sentences the recognizer hears
    assert rows[1]["batch_p50_ms"] > rows[0]["batch_p50_ms"]   # four sentences take longer than one
    rec = result["recommendations"]["en"]
    assert rec["settings"]["TTS_BACKEND"] == "hibari" and rec["row"] in result["fronts"]["en"]
    assert rec["rerun_audio_s_per_s"] > 0
    assert result["plot"] == str(plot) and plot.stat().st_size > 10_000
