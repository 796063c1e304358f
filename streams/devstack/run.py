"""``ttsflow run [--workers N]``: the whole local service in one command, in the foreground.

Brings the stack up (what is not running), then runs one stage, N workers and the gateway
under the process :class:`~streams.devstack.procs.Supervisor`, prints one status line per
process (its pid, state and log) when they are ready and whenever one changes state, and on
Ctrl-C (SIGINT or SIGTERM) stops them all: SIGTERM, then SIGKILL after a deadline. A process
that exits on its own is reported and started again (the way an orchestrator would), so a
crash never leaves the service half up in silence. The stack itself stays up (``make down``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from streams.devstack.errors import ProcError
from streams.settings import Settings, SettingsError, load_settings

__all__ = ["main"]


def _line(name: str, state: str, pid: int | None, log: Path, extra: str = "") -> str:
    return f"{name:<10} {state:<8} pid={pid or '-':<8} {extra}{' ' if extra else ''}log={log}"


def local_backends(settings: Settings, env: Mapping[str, str]) -> Settings:
    """The local service speaks what the default install speaks: the configured backend plus kokoro
    (Mandarin, Japanese, and the zh/en/ja mixes) where the ``kokoro`` extra is installed, as
    ``make demo`` does. ``TTS_BACKENDS``, when set (even empty), decides alone."""
    from engine.voices import backend_installed
    from streams.devstack.procs import serving

    if "TTS_BACKENDS" in env or not backend_installed("kokoro"):
        return settings
    return serving(settings, "kokoro")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow run", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--workers", type=int, default=1, help="synthesis workers to run (default 1)")
    ap.add_argument("--port", type=int, default=None, help="gateway port (default TTS_GATEWAY_PORT)")
    ap.add_argument("--no-stack", action="store_true", help="do not start the stack; it must be up already")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if a.workers < 1:
        print("ttsflow run: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        settings = local_backends(load_settings(gateway_port=a.port), os.environ)
    except SettingsError as e:
        print(f"ttsflow run: {e}", file=sys.stderr)
        return 2
    from streams.devstack import stack
    from streams.devstack.errors import StackError
    from streams.devstack.procs import Supervisor

    try:
        if a.no_stack:
            down = [name for name, e in stack.status(settings).items() if not e["ok"]]
            if down:
                raise StackError(f"{', '.join(down)} not answering; start the stack (make up) or drop --no-stack")
        else:
            stack.stack_up(settings, quiet=True)
    except StackError as e:
        print(f"ttsflow run: {e}", file=sys.stderr)
        return 1
    log_dir = Path(settings.process.home) / "logs" / "run"
    stopping = {"sig": 0}

    def on_signal(sig: int, _frame: FrameType | None) -> None:
        stopping["sig"] = sig

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    sup = Supervisor(log_dir)
    try:
        print(f"ttsflow run: stack up at {settings.kafka.bootstrap_servers}; starting 1 stage, {a.workers} worker(s) "
              f"serving {','.join(settings.engine.served_backends)} (TTS_BACKENDS), the gateway (logs in {log_dir})",
              flush=True)
        sup.stage("stage", settings)
        for i in range(a.workers):
            sup.worker(f"worker-{i}", settings, claim_id=True)
        sup.gateway("gateway", settings, keep_port=True)
        url = f"http://{settings.gateway.gateway_host}:{settings.gateway.gateway_port}"
        pending = set(sup.procs)
        deadline = time.monotonic() + 600
        state: dict[str, str] = {}
        while not stopping["sig"]:
            for name, p in sup.procs.items():
                now = "exited" if not p.alive() else ("ready" if name not in pending else "starting")
                if name in pending and p.alive():
                    from streams.devstack.procs import metrics_up

                    if metrics_up(p.metrics_port):
                        pending.discard(name)
                        now = "ready"
                if state.get(name) != now:
                    state[name] = now
                    extra = f"url={url}" if name == "gateway" and now == "ready" else ""
                    print(_line(name, now, p.pid, p.log_path, extra), flush=True)
                    if now == "ready" and not pending:
                        print(f"ttsflow run: all ready. Try: curl -s {url}/v1/audio/speech -H 'Content-Type: "
                              f"application/json' -d '{{\"model\":\"tts-1\",\"input\":\"Hello!\",\"voice\":\"alloy\"}}'"
                              f" -o hello.mp3   (playground: {url}/ ; Ctrl-C stops everything)", flush=True)
                if now == "exited":
                    print(f"{name}: exited with {p.popen.returncode if p.popen else None}; last lines of its log:\n"
                          f"{p.log_tail(8)}\nrestarting {name}", file=sys.stderr, flush=True)
                    sup.restart(name)
                    pending.add(name)
            if pending and time.monotonic() > deadline:
                raise ProcError(f"not ready after 600 s: {', '.join(sorted(pending))}")
            time.sleep(0.5)
        print(f"ttsflow run: {signal.Signals(stopping['sig']).name}: stopping everything", flush=True)
    except ProcError as e:
        print(f"ttsflow run: {e}", file=sys.stderr)
        return 1
    finally:
        codes = sup.stop_all()
        for name, code in codes.items():
            print(_line(name, "stopped", sup.procs[name].pid, sup.procs[name].log_path, f"exit={code}"), flush=True)
        for s, h in old.items():
            signal.signal(s, h)
    return 0
