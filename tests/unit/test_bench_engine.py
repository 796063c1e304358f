"""``ttsflow bench engine --quick --json`` and the GPU script's Python part (on the CPU).

Benchmarks are not speed tests: these check that a person running them gets one JSON
object as the last line with every promised field, and that the numbers are sane.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FIELDS = ("rtf", "audio_s_per_s", "batch_p50_ms", "batch_p99_ms", "cold_start_s")


def _last_json(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])


@pytest.mark.slow
def test_bench_engine_quick_prints_one_json_line_with_all_fields(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "bench", "engine", "--quick", "--json",
                           "--model-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len([ln for ln in proc.stdout.splitlines() if ln.strip()]) == 1   # --json: only the object on stdout
    result = _last_json(proc.stdout)
    rows = result["results"]
    assert {(r["batch"], r["threads"]) for r in rows} == {(1, 1), (8, 1)}
    for r in rows:
        assert r["backend"] == "hibari" and r["precision"] == "int8" and r["shipped"]
        for f in FIELDS:
            assert isinstance(r[f], float | int) and r[f] > 0, (f, r)
        assert r["runs"] >= 5
        assert r["batch_p99_ms"] >= r["batch_p50_ms"]
        assert r["provider"] == "CPUExecutionProvider"
        # Consistency: median rtf and throughput describe the same runs.
        assert 0.3 < r["rtf"] * r["audio_s_per_s"] < 3.0, r
    b1, b8 = sorted(rows, key=lambda r: r["batch"])
    assert b8["batch_p50_ms"] > b1["batch_p50_ms"]          # eight sentences take longer than one


def test_bench_engine_rejects_bad_arguments() -> None:
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "bench", "engine", "--backend", "vits"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown backend" in proc.stderr


@pytest.mark.slow
def test_gpu_bench_script_runs_on_cpu_quick(tmp_path: Path) -> None:
    """deploy/gpu/bench_gpu.py with --device cpu: same code path a GPU run takes, minus CUDA."""
    proc = subprocess.run([sys.executable, "deploy/gpu/bench_gpu.py", "--device", "cpu", "--quick",
                           "--model-dir", str(tmp_path), "--backend", "hibari"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _last_json(proc.stdout)
    assert result["device"] == "cpu"
    assert result["provider_requested"] == "CPUExecutionProvider"
    precisions = {r["precision"] for r in result["results"]}
    assert precisions == {"fp32", "fp16"}
    for r in result["results"]:
        assert r["provider"] == "CPUExecutionProvider"
        for f in ("rtf", "audio_s_per_s", "batch_p50_ms", "batch_p99_ms", "cold_start_s"):
            assert r[f] > 0, (f, r)
    assert result["gpu_memory"]["method"] == "none (cpu)"
    assert "fp16_vs_fp32" in result


def _chattts_importable() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "ChatTTS"))


@pytest.mark.slow
@pytest.mark.skipif(not _chattts_importable(), reason="the chattts extra (torch, ChatTTS) is not installed")
def test_bench_engine_chattts_quick_on_tiny_assets_prints_one_json_line(tmp_path: Path) -> None:
    """No --assets and no TTS_CHATTTS_ASSET_DIR: tiny random weights, and the rows say so."""
    env = {k: v for k, v in os.environ.items() if k != "TTS_CHATTTS_ASSET_DIR"}
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "bench", "engine", "--backend", "chattts", "--quick",
                           "--json", "--batch", "1,4", "--runs", "3", "--assets", ""],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len([ln for ln in proc.stdout.splitlines() if ln.strip()]) == 1
    result = _last_json(proc.stdout)
    rows = result["results"]
    assert {(r["batch"], r["threads"]) for r in rows} == {(1, 1), (4, 1)}
    for r in rows:
        assert r["backend"] == "chattts" and r["tiny_assets"] is True and r["shipped"] is False, r
        assert r["max_new_token"] == 32 and r["precision"] == "fp32" and r["provider"] == "cpu"
        for f in FIELDS:
            assert isinstance(r[f], float | int) and r[f] > 0, (f, r)
        # each item is capped at 32 tokens (2 x 256 samples each at 24 kHz): at most 0.683 s of audio
        assert r["audio_s"] <= r["runs"] * r["batch"] * 32 * 512 / 24_000 + 1e-6, r
    assert result["skipped"] == [] and result["speedup_vs_shipped"] == {}
    assert "tiny random-weight assets" in proc.stderr
