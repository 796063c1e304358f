"""``ttsflow model list / convert / use`` as a person types them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ttsflow(*args: str, model_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli", "model", "--model-dir", str(model_dir), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_list_installs_the_shipped_models_and_marks_current(tmp_path: Path) -> None:
    proc = _ttsflow("list", "--json", model_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    versions = json.loads(proc.stdout.splitlines()[-1])["versions"]
    hibari = [v for v in versions if v["model"] == "hibari"]
    assert len(hibari) == 1 and hibari[0]["current"] and hibari[0]["precision"] == "int8"


def test_use_of_an_unknown_version_is_one_clear_line(tmp_path: Path) -> None:
    proc = _ttsflow("use", "hibari", "9.9.9", model_dir=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0
    assert "no version hibari/9.9.9" in proc.stderr and "installed:" in proc.stderr


@pytest.mark.slow
def test_convert_then_use_moves_current(tmp_path: Path) -> None:
    proc = _ttsflow("convert", "--model", "hibari", "--precision", "fp16", "--no-wer", "--json", model_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["precision"] == "fp16" and out["version"].endswith("-fp16")
    summary = out["check"]["summary"]
    assert summary["sentences"] >= 3 and summary["envelope_corr_min"] > 0.95
    assert out["check"]["reference"].endswith("-fp32")
    again = _ttsflow("convert", "--model", "hibari", "--precision", "fp16", "--no-check", model_dir=tmp_path)
    assert again.returncode == 1 and "exists already" in again.stderr
    used = _ttsflow("use", "hibari", out["version"], model_dir=tmp_path)
    assert used.returncode == 0, used.stderr
    listed = json.loads(_ttsflow("list", "--json", model_dir=tmp_path).stdout.splitlines()[-1])["versions"]
    current = [v["version"] for v in listed if v["model"] == "hibari" and v["current"]]
    assert current == [out["version"]]
