"""A small supervisor for the pipeline's own processes: ``ttsflow stage`` and ``ttsflow worker``.

Used by the demo, the chaos run, the pipeline benchmark and the end-to-end tests to run
the pipeline the way an orchestrator would: as real subprocesses, configured only by
``TTS_*`` variables built from one :class:`~streams.settings.Settings`.

Guarantees:

* It signals only processes it started, by PID, while it still holds their ``Popen``
  (so a PID is never reused under it); nothing is ever looked up or killed by name.
* Every child gets a distinct ``TTS_METRICS_PORT`` (a free port) and every worker a
  distinct, stable ``TTS_TRANSACTIONAL_ID``: a restarted worker reuses its id, so its
  first ``init_transactions`` fences the killed instance and aborts its open transaction.
  ``worker(..., claim_id=True)`` leaves the id unset instead, so the worker claims its
  default ``<prefix>-<host>-<slot>`` as in production (distinct and stable on restart too).
* Children die with the supervisor (``PR_SET_PDEATHSIG``), and :meth:`Supervisor.stop_all`
  (also on ``with`` exit) stops everything still running: SIGTERM, then SIGKILL after a
  deadline.
* Each process writes stdout and stderr to ``<log_dir>/<name>.log`` (appended across
  restarts); errors raised here quote the log's last lines.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

from streams.devstack.errors import ProcError
from streams.settings import Settings, describe

__all__ = ["Proc", "ProcError", "Supervisor", "free_port", "free_ports", "group_members", "health", "metrics_up", "settings_env"]

Kind = Literal["stage", "worker", "gateway"]


def free_port() -> int:
    """A TCP port nobody uses right now, outside the kernel's ephemeral range.

    The kernel's own choice (bind to port 0) comes from the ephemeral range, which is also
    where it takes the source port of every outgoing connection: between the pick and the
    server's bind, any client (a broker talking to its peers, say) can take it and the server
    fails with "Address already in use" (seen on CI: a second broker's controller port).
    A port below that range is never handed out that way."""
    return free_ports(1)[0]


def free_ports(n: int, *, offsets: Sequence[int] = (0,), avoid: Collection[int] = ()) -> list[int]:
    """``n`` ports ``p`` from outside the ephemeral range with ``p + o`` free for every ``o`` in
    ``offsets`` (a block: broker ``i`` of a local cluster listens on ``p + 10 * i`` and
    ``p + 10 * i + 1``); no two blocks overlap, nor any block a port in ``avoid``."""
    import random

    lo, _ = _ephemeral_range()
    top = max(lo, 12000) - max(offsets)  # below the ephemeral range, above the registered crowd
    taken: set[int] = set(avoid)
    out: list[int] = []
    for _ in range(2000):
        base = random.randrange(10000, top)
        block = {base + o for o in offsets}
        if taken.isdisjoint(block) and all(_bindable(q) for q in block):
            out.append(base)
            taken |= block
            if len(out) == n:
                return out
    raise ProcError(f"found no {n} free port(s) between 10000 and {top}")


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``TTS_*`` variables from which ``load_settings`` rebuilds ``settings`` in a child."""
    return {d.env: str(getattr(getattr(settings, d.section), d.name)) for d in describe()}


def serving(settings: Settings, backend: str) -> Settings:
    """``settings`` whose workers (and stage, which accepts their voices) also serve ``backend``;
    the default backend stays first."""
    served = settings.engine.served_backends
    return settings if backend in served else settings.replace(backends=",".join((*served, backend)))


def _command(python: str, kind: str, settings: Settings, extra: Mapping[str, str]) -> list[str]:
    # env(1) puts the settings into the environment the child inherits (PATH, HOME, locale...),
    # and nothing here reads the environment itself; env execs the interpreter (same PID).
    # Every field is assigned, so no TTS_* of this process leaks into the child's settings.
    assigns = {**settings_env(settings), "PYTHONUNBUFFERED": "1", **extra}
    return [shutil.which("env") or "/usr/bin/env", *(f"{k}={v}" for k, v in assigns.items()),
            python, "-m", "streams.cli", kind]


try:  # resolved here, not in the child: between fork and exec only a plain call is safe
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM it when the supervisor's thread dies.

    Children are therefore started from the main thread only.
    """
    if _prctl is not None:
        _prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _http_status(url: str, timeout: float) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return None


def metrics_up(port: int, timeout: float = 0.5) -> bool:
    """True if the process on ``port`` says it is ready.

    ``/readyz`` answering 200 (engine loaded, consumer running); a process without
    ``/readyz`` (404) counts as ready once ``/metrics`` answers 200.
    """
    code = _http_status(f"http://127.0.0.1:{port}/readyz", timeout)
    if code == 404:
        code = _http_status(f"http://127.0.0.1:{port}/metrics", timeout)
    return code == 200


def group_members(settings: Settings, group: str, timeout: float = 5.0) -> int:
    """Members of a consumer group right now (0 if it does not exist or is rebalancing)."""
    from streams.kafka.admin import group_members as members

    return members(settings.kafka, group, timeout)


def health(port: int, timeout: float = 1.0) -> bool | None:
    """The liveness probe: True if ``/healthz`` answers 200, False if it answers otherwise or
    not at all, None if the process has no ``/healthz`` (404) or no port."""
    if not port:
        return None
    code = _http_status(f"http://127.0.0.1:{port}/healthz", timeout)
    return None if code == 404 else code == 200


@dataclass(slots=True)
class Proc:
    """One supervised process (one name; several starts over its life)."""

    name: str
    kind: Kind
    settings: Settings
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    history: list[tuple[float, str]] = field(default_factory=list)
    unhealthy_since: float | None = None
    signalled: bool = False  # this start was sent a signal by the supervisor (its exit is not its own)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    @property
    def metrics_port(self) -> int:
        return self.settings.process.metrics_port

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Supervisor:
    """Starts, kills, restarts and stops ``ttsflow stage`` / ``ttsflow worker`` processes."""

    def __init__(self, log_dir: Path, *, python: str = sys.executable) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.python = python
        self.procs: dict[str, Proc] = {}

    # -- starting --------------------------------------------------------------------
    def add(self, name: str, kind: Kind, settings: Settings, *, extra_env: Mapping[str, str] | None = None,
            claim_id: bool = False) -> Proc:
        """Register and start a process; ``settings.metrics_port`` is replaced by a free port."""
        if name in self.procs:
            raise ValueError(f"a process named {name!r} already exists")
        changes: dict[str, object] = {"metrics_port": free_port()}
        if kind == "gateway":  # serves /readyz and /metrics on its HTTP port: a free one unless claim_id keeps it
            changes = {"metrics_port": settings.gateway.gateway_port} if claim_id else {
                "metrics_port": changes["metrics_port"], "gateway_port": changes["metrics_port"]}
        if kind == "worker" and not claim_id:
            changes["transactional_id"] = settings.kafka.transactional_id or f"ttsflow-worker-{name}-{os.getpid()}"
        s = settings.replace(**changes)
        proc = Proc(name, kind, s, _command(self.python, kind, s, extra_env or {}), self.log_dir / f"{name}.log")
        self.procs[name] = proc
        self._spawn(proc)
        return proc

    def stage(self, name: str, settings: Settings) -> Proc:
        return self.add(name, "stage", settings)

    def worker(self, name: str, settings: Settings, *, claim_id: bool = False) -> Proc:
        return self.add(name, "worker", settings, claim_id=claim_id)

    def gateway(self, name: str, settings: Settings, *, keep_port: bool = False) -> Proc:
        """A ``ttsflow gateway`` on a free port (its ``settings.gateway_port`` with ``keep_port``)."""
        return self.add(name, "gateway", settings, claim_id=keep_port)

    def serving(self, settings: Settings, *, timeout: float) -> Proc:
        """One stage, one worker and a gateway on ``settings``, each waited for until ready (at most
        ``timeout`` each); the gateway's process (``.settings.gateway_port``)."""
        self.stage("stage", settings)
        self.worker("worker", settings)
        gw = self.gateway("gateway", settings)
        for p in self.procs.values():
            self.wait_ready(p, timeout=timeout)
        return gw

    def _spawn(self, proc: Proc) -> None:
        with open(proc.log_path, "ab") as log:
            log.write(f"\n==== start {proc.starts + 1} of {proc.name} at {time.strftime('%H:%M:%S')} ====\n".encode())
            log.flush()
            proc.popen = subprocess.Popen(
                proc.argv, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        proc.starts += 1
        proc.signalled = False
        proc.history.append((time.monotonic(), f"start pid={proc.popen.pid}"))

    # -- readiness -------------------------------------------------------------------
    def wait_ready(self, proc: Proc | str, *, timeout: float = 60.0,
                   extra: Callable[[], bool] | None = None) -> float:
        """Poll until the process's metrics endpoint answers (and ``extra()`` holds); seconds waited.

        Raises :class:`ProcError` with the log's tail if it exits or the deadline passes.
        """
        p = self.procs[proc] if isinstance(proc, str) else proc
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            if not p.alive():
                code = p.popen.returncode if p.popen else None
                raise ProcError(f"{p.name} exited with {code} before it was ready; {p.log_path}:\n{p.log_tail()}")
            if (p.metrics_port == 0 or metrics_up(p.metrics_port)) and (extra is None or extra()):
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                raise ProcError(f"{p.name} not ready after {timeout:.0f}s; {p.log_path}:\n{p.log_tail()}")
            time.sleep(0.2)

    def wait_group(self, settings: Settings, group: str, members: int, *, timeout: float = 60.0) -> float:
        """Poll until ``group`` is stable with at least ``members`` members; seconds waited."""
        t0 = time.monotonic()
        while group_members(settings, group) < members:
            dead = [p for p in self.procs.values() if p.popen is not None and not p.alive()]
            if dead:
                p = dead[0]
                raise ProcError(f"{p.name} exited with {p.popen.returncode if p.popen else None}; "
                                f"{p.log_path}:\n{p.log_tail()}")
            if time.monotonic() - t0 > timeout:
                raise ProcError(f"group {group} has fewer than {members} members after {timeout:.0f}s")
            time.sleep(0.3)
        return time.monotonic() - t0

    def check_alive(self) -> None:
        """Raise :class:`ProcError` if a process this supervisor runs has exited on its own (not one it
        signalled: a test that SIGKILLs a worker then polls for the standby's takeover)."""
        for p in self.procs.values():
            if p.popen is not None and not p.signalled and p.popen.poll() is not None:
                raise ProcError(f"{p.name} exited with {p.popen.returncode}; {p.log_path}:\n{p.log_tail()}")

    def unhealthy(self, *, grace_s: float = 15.0) -> list[Proc]:
        """Running processes whose ``/healthz`` has failed continuously for ``grace_s`` seconds.

        What a liveness probe sees: a process that is alive but stuck. Call it periodically.
        """
        out = []
        now = time.monotonic()
        for p in self.procs.values():
            if not p.alive():
                p.unhealthy_since = None
                continue
            if health(p.metrics_port) is False:
                p.unhealthy_since = p.unhealthy_since or now
                if now - p.unhealthy_since >= grace_s:
                    out.append(p)
            else:
                p.unhealthy_since = None
        return out

    # -- signals ---------------------------------------------------------------------
    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL, *, timeout: float = 30.0) -> int | None:
        """Send ``sig`` to the named process (by its PID) and wait for it to exit; its exit code.

        After SIGTERM it is SIGKILLed if still running at the deadline.
        """
        p = self.procs[name]
        if p.popen is None or p.popen.poll() is not None:
            return p.popen.returncode if p.popen else None
        p.signalled = True
        p.popen.send_signal(sig)
        p.history.append((time.monotonic(), f"signal {sig.name} pid={p.popen.pid}"))
        if sig == signal.SIGKILL:
            p.kills += 1
        try:
            return p.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.history.append((time.monotonic(), f"signal SIGKILL pid={p.popen.pid} (deadline)"))
            return p.popen.wait(10)

    def remove(self, name: str, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Stop the named process (as :meth:`kill`) and forget it; its exit code."""
        code = self.kill(name, sig)
        del self.procs[name]
        return code

    def restart(self, name: str, *, sig: signal.Signals = signal.SIGKILL) -> Proc:
        """Stop the named process with ``sig`` (if running) and start it again, same settings."""
        self.kill(name, sig)
        p = self.procs[name]
        p.unhealthy_since = None
        self._spawn(p)
        return p

    def stop_all(self, *, timeout: float = 20.0) -> dict[str, int | None]:
        """SIGTERM every running process, SIGKILL those still running at the deadline; exit codes."""
        running = [p for p in self.procs.values() if p.alive()]
        for p in running:
            assert p.popen is not None
            p.signalled = True
            p.popen.send_signal(signal.SIGTERM)
            p.history.append((time.monotonic(), f"signal SIGTERM pid={p.popen.pid}"))
        deadline = time.monotonic() + timeout
        for p in running:
            assert p.popen is not None
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.history.append((time.monotonic(), f"signal SIGKILL pid={p.popen.pid} (deadline)"))
                p.popen.wait(10)
        return {p.name: (p.popen.returncode if p.popen else None) for p in self.procs.values()}

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop_all()
