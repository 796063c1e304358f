"""``ttsflow run`` as a user runs it: everything comes up with one status line per process,
the gateway speaks, Ctrl-C (SIGINT) stops every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from engine.voices import backend_installed
from streams.bench.harness import isolated
from streams.devstack.procs import free_port, settings_env
from streams.devstack.stack import ensure_topics
from tests.integration.conftest import TEST_PARTITIONS, _cleanup
from tests.support.gateway import decode_av, http
from tests.support.stack import require_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_ttsflow_run_serves_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    unique = f"run-{uuid.uuid4().hex[:8]}"
    port = free_port()
    base = require_stack()
    # logs under a home of its own (the shared stack's home is another user's); models from the shared store
    s = isolated(base, unique).replace(partitions=TEST_PARTITIONS, gateway_port=port, home=str(tmp_path / "home"),
                                       model_dir=str(base.effective_model_dir))
    ensure_topics(s, partitions=TEST_PARTITIONS)
    env = {**os.environ, **settings_env(s)}
    env.pop("TTS_BACKENDS")  # as a user runs it: the default backend, plus kokoro where its extra is installed
    kokoro = backend_installed("kokoro")
    lines: list[str] = []
    p = subprocess.Popen([sys.executable, "-m", "streams.cli", "run", "--workers", "2", "--no-stack"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert p.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not any("all ready" in line for line in lines):
            assert p.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.3)
        for name in ("stage", "worker-0", "worker-1", "gateway"):
            assert any(line.startswith(name) and " ready " in line for line in lines), (name, "".join(lines))
        status, _, audio = http("POST", f"http://127.0.0.1:{port}/v1/audio/speech",
                                {"model": "tts-1", "input": "One command runs it all.", "voice": "alloy"})
        assert status == 200
        x, rate = decode_av(audio)
        assert len(x) / rate > 1.0
        assert any(f"serving {'hibari,kokoro' if kokoro else 'hibari'} " in line for line in lines), "".join(lines)
        if kokoro:  # Mandarin out of the box, as `make demo` speaks it
            status, _, audio = http("POST", f"http://127.0.0.1:{port}/v1/audio/speech",
                                    {"model": "tts-1", "input": "你好。欢迎使用。", "voice": "zf_xiaobei",
                                     "response_format": "wav"})
            assert status == 200, audio[:300]
            x, rate = decode_av(audio)
            assert len(x) / rate > 0.8
        pids = [int(line.split("pid=")[1].split()[0]) for line in lines if " ready " in line]
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 0, "".join(lines)
        reader.join(10)
        assert any("SIGINT: stopping everything" in line for line in lines)
        assert sum(" stopped " in line for line in lines) == 4, "".join(lines)
        assert (tmp_path / "home" / "logs" / "run" / "gateway.log").is_file()
        for pid in pids:  # none of its children outlives it
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
        if p.stdout:
            p.stdout.close()
        _cleanup(s, unique)
