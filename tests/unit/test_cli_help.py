"""Every ``ttsflow ... --help`` prints its usage and exits 0 (``ttsflow bench --help`` exited 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streams.bench import _KINDS
from streams.cli import _COMMANDS, main


def _commands() -> list[list[str]]:
    out = [[name] for name in _COMMANDS]
    out += [["bench", kind] for kind in _KINDS]
    out += [["scale", "simulate"], ["stack", "up"], ["stack", "status"], ["model", "convert"]]
    return out


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_help_prints_usage_and_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main([*argv, "--help"])
    except SystemExit as e:  # argparse's --help
        code = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr().out
    assert code == 0, f"ttsflow {' '.join(argv)} --help exited {code}"
    assert "usage" in out.lower(), out


def test_top_level_help_and_bare_command() -> None:
    """Through the real entry point: --help exits 0, no command is a usage error (2)."""
    ok = subprocess.run([sys.executable, "-m", "streams.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "commands:" in ok.stdout
    bare = subprocess.run([sys.executable, "-m", "streams.cli"], capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2
    bench = subprocess.run([sys.executable, "-m", "streams.cli", "bench", "--help"], capture_output=True, text=True,
                           timeout=60)
    assert bench.returncode == 0 and "usage: ttsflow bench" in bench.stdout
