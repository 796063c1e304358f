"""Running ttsflow commands as a user would, for the end-to-end tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_json(args: list[str], *, timeout: float, log: Path) -> tuple[int, dict[str, Any]]:
    """Run ``python -m streams.cli ARGS``; its exit status and the JSON object of its last line.

    stderr goes to ``log`` (quoted in the failure message if no JSON came back).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as err:
        res = subprocess.run([sys.executable, "-m", "streams.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=err, timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    out = res.stdout.decode(errors="replace").strip().splitlines()
    try:
        return res.returncode, json.loads(out[-1])
    except (IndexError, ValueError):
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        pytest.fail(f"`ttsflow {' '.join(args)}` exited {res.returncode} without a JSON line.\n"
                    f"stdout:\n{chr(10).join(out[-10:])}\nstderr ({log}):\n{tail}")
