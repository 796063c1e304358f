"""The supervisor's liveness check tells a process it signalled from one that exited on its own."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from streams.devstack.procs import ProcError, Supervisor
from streams.settings import load_settings


def _stand_in(tmp_path: Path) -> str:
    """An 'interpreter' the supervisor starts as it would python: exits with $RC after $NAP seconds."""
    exe = tmp_path / "stand-in"
    exe.write_text('#!/bin/sh\nsleep "$NAP"\nexit "$RC"\n')
    exe.chmod(0o755)
    return str(exe)


def test_a_process_killed_by_the_supervisor_is_not_reported_as_dead_on_its_own(tmp_path: Path) -> None:
    settings = load_settings()
    with Supervisor(tmp_path / "logs", python=_stand_in(tmp_path)) as sup:
        p = sup.add("w1", "worker", settings, extra_env={"NAP": "30", "RC": "0"})
        assert sup.kill("w1", signal.SIGKILL) == -signal.SIGKILL
        sup.check_alive()  # killed on purpose: polling for what follows a kill goes on
        sup.restart("w1")
        assert p.alive() and not p.signalled
        sup.add("w2", "worker", settings, extra_env={"NAP": "0", "RC": "3"})
        deadline = time.monotonic() + 10
        while sup.procs["w2"].alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ProcError, match="w2 exited with 3"):
            sup.check_alive()
