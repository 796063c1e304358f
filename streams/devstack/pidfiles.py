"""The stack's servers as detached processes, owned through PID files.

Guarantees: ``spawn`` starts a server in its own session, nobody's child here (no zombie,
no Ctrl-C reaching it), and records its PID with the process's start time; ``owned_pid``
answers a PID only while that same process runs, so a recycled PID is never signalled;
``wait_gone`` KILLs what a TERM did not stop by the deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from streams.devstack.errors import StackError
from streams.devstack.paths import StackPaths

__all__ = ["owned_pid", "port_open", "proc_state", "reap", "rss_mb", "spawn", "wait_gone"]


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks) of a process, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], fields[19]


def proc_state(pid: int) -> str | None:
    st = _proc_stat(pid)
    return None if st is None else st[0]


def owned_pid(p: StackPaths, service: str) -> int | None:
    """The PID of the service ``up`` started from this home, if it is still running.

    The PID file records the process's start time: a recycled PID belongs to someone else
    and is never signalled.
    """
    try:
        info = json.loads(p.pid_file(service).read_text())
        pid, started = int(info["pid"]), str(info["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    st = _proc_stat(pid)
    if st is None or st[0] in "ZX":
        reap(pid)
        return None
    return pid if st[1] == started else None


def reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def spawn(p: StackPaths, service: str, argv: list[str], log_file: Path) -> int:
    """Start a detached server (own session, stdin /dev/null, output to its log); record its PID.

    A short-lived ``sh`` starts it in the background and exits, so the server is nobody's
    child here: no zombie, no Popen left to warn, and a Ctrl-C on ``stack up`` (another
    session) does not reach it.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    p.run.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["/bin/sh", "-c", '"$@" </dev/null >>"$0" 2>&1 & echo $!', str(log_file), *argv],
                         capture_output=True, text=True, start_new_session=True, check=False)
    if res.returncode != 0 or not res.stdout.strip().isdigit():
        raise StackError(f"could not start {service}: {(res.stderr or res.stdout).strip()[:300]}")
    pid = int(res.stdout.strip())
    st = _proc_stat(pid)
    start = st[1] if st else "?"
    p.pid_file(service).write_text(json.dumps({"pid": pid, "start": start, "argv": argv}) + "\n")
    return pid


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB (Linux), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def wait_gone(pid: int, deadline: float) -> bool:
    """Wait until a TERMed process is gone; KILL it at the deadline. True if it stopped before KILL."""
    while time.monotonic() < deadline:
        reap(pid)
        state = proc_state(pid)
        if state is None or state in "ZX":
            reap(pid)
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        reap(pid)
        if proc_state(pid) in (None, "Z", "X"):
            break
        time.sleep(0.1)
    return False
