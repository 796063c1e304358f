"""deploy/gpu/device_bench.sh --device cpu --quick: the lent-GPU command's code paths, tiny, on a CPU.

So the one prepared device command cannot rot between lent machines: the shell wrapper (its
wheel install is skipped when ``deploy/gpu/wheels`` is absent), every part in its own
process, the JSON's keys, the torch-vs-onnxruntime check and the WAV samples.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.e2e, pytest.mark.slow,
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("torch", "onnx2torch", "ChatTTS", "piper")),
                       reason="needs the torch, chattts and piper extras (CI installs them)"),
]


def test_device_bench_quick_on_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "TTSFLOW_GPU_WHEELS": str(tmp_path / "no-wheels")}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", "deploy/gpu/device_bench.sh", "--device", "cpu", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads((tmp_path / "result.json").read_text()) == result
    assert {"bench", "device", "quick", "torch", "parts", "wall_s", "wavs"} <= set(result)
    assert result["device"] == "cpu" and result["quick"] is True
    assert set(result["parts"]) == {"piper", "hibari", "chattts"}
    for voice in ("piper", "hibari"):
        part = result["parts"][voice]
        assert "error" not in part, part
        assert [(r["precision"], r["batch"]) for r in part["rows"]] == [("fp32", 1), ("fp32", 8)]
        for r in part["rows"]:
            assert r["audio_s_per_s"] > 0 and r["rtf"] > 0 and r["batch_p99_ms"] >= r["batch_p50_ms"] > 0
        assert part["skipped"][0]["precision"] == "fp16"  # CUDA only
        check = part["torch_fp32_vs_onnxruntime_fp32"]
        assert check["length_ratio_min"] == check["length_ratio_max"] == 1.0
        assert check["envelope_corr_min"] >= 0.99
        for name in (f"{voice}-fp32.wav", f"{voice}-onnxruntime-fp32.wav"):
            with wave.open(str(tmp_path / name)) as w:
                assert w.getnframes() > 0
    chat = result["parts"]["chattts"]
    assert "error" not in chat, chat
    assert [r["batch"] for r in chat["results"]] == [1, 2]
    assert all(r["generate_calls_per_batch"] == 1.0 for r in chat["results"])
    print(f"device_bench --device cpu --quick: {result['wall_s']} s")
