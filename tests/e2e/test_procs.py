"""The supervisor the demo and chaos run rely on: ready means serving, kill/restart by PID, nothing left behind."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.bench.harness import delete_run_topics, isolated, new_run_id
from streams.devstack import stack
from streams.devstack.procs import ProcError, Supervisor, group_members, metrics_up
from streams.settings import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); /proc says whether it has exited
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.fixture
def run_settings(stack_settings: Settings) -> Iterator[Settings]:
    s = isolated(stack_settings, new_run_id())
    stack.ensure_topics(s)
    yield s
    delete_run_topics(s)


def test_worker_is_ready_killed_restarted_and_stopped_by_pid(run_settings: Settings, tmp_path: Path) -> None:
    with Supervisor(tmp_path) as sup:
        w = sup.worker("w0", run_settings)
        sup.wait_ready(w, timeout=120)
        assert metrics_up(w.metrics_port)
        sup.wait_group(run_settings, run_settings.kafka.worker_group, 1, timeout=60)
        first = w.pid
        assert first is not None and w.settings.kafka.transactional_id
        assert sup.kill("w0", signal.SIGKILL) == -signal.SIGKILL
        assert _gone(first)
        sup.restart("w0")
        assert w.pid != first and w.starts == 2 and w.kills == 1
        sup.wait_ready(w, timeout=120)
        second = w.pid
        codes = sup.stop_all()
        assert codes == {"w0": 0}  # SIGTERM: a clean exit
        assert second is not None and _gone(second)
    assert "==== start 2 of w0" in (tmp_path / "w0.log").read_text()
    assert group_members(run_settings, run_settings.kafka.worker_group) in (0, 1)  # left or leaving


def test_each_worker_gets_its_own_port_and_transactional_id(run_settings: Settings, tmp_path: Path) -> None:
    with Supervisor(tmp_path) as sup:
        a, b = sup.worker("a", run_settings), sup.worker("b", run_settings)
        assert a.metrics_port != b.metrics_port and a.metrics_port and b.metrics_port
        assert a.settings.kafka.transactional_id != b.settings.kafka.transactional_id
        for p in (a, b):
            sup.wait_ready(p, timeout=120)
        pids = [a.pid, b.pid]
    assert all(pid is not None and _gone(pid) for pid in pids)


def test_a_process_that_cannot_start_is_reported_with_its_log(run_settings: Settings, tmp_path: Path) -> None:
    with Supervisor(tmp_path) as sup:
        p = sup.add("bad", "worker", run_settings, extra_env={"TTS_MAX_BATCH": "0"})
        with pytest.raises(ProcError, match="TTS_MAX_BATCH") as e:
            sup.wait_ready(p, timeout=60)
        assert "exited" in str(e.value)
