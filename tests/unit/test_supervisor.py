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


def test_the_local_service_serves_kokoro_beside_the_default_backend_unless_tts_backends_decides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`make run` answers Mandarin and Japanese out of the box, as `make demo` does, where the kokoro extra
    is installed; TTS_BACKENDS, when set (even empty), decides alone."""
    import engine.voices
    from streams.devstack.run import local_backends

    monkeypatch.setattr(engine.voices, "backend_installed", lambda b: b == "kokoro")
    assert local_backends(load_settings({}), {}).engine.served_backends == ("hibari", "kokoro")
    assert local_backends(load_settings({"TTS_BACKEND": "piper"}), {}).engine.served_backends == ("piper", "kokoro")
    assert local_backends(load_settings({"TTS_BACKEND": "kokoro"}), {}).engine.served_backends == ("kokoro",)
    chosen = load_settings({"TTS_BACKENDS": ""})
    assert local_backends(chosen, {"TTS_BACKENDS": ""}).engine.served_backends == ("hibari",)
    monkeypatch.setattr(engine.voices, "backend_installed", lambda b: False)  # no kokoro extra
    assert local_backends(load_settings({}), {}).engine.served_backends == ("hibari",)
