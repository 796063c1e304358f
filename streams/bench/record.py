"""``python -m streams.bench.record NAME -- COMMAND...``: run a benchmark, keep its JSON as a dated run.

The docs' benchmark tables are generated from these files only, so no figure is typed by hand.
The recorder runs COMMAND (its stderr passes through; its stdout is captured), takes the JSON
object it prints (the whole stdout, else its last line that parses as a JSON object, the
benchmarks' convention) and writes it, wrapped in an envelope that says when, where and how it
was measured, to ``docs/benchmarks/data/<NAME>-<YYYYMMDD-HHMM>.json`` (UTC):

.. code-block:: json

    {"format": "ttsflow-bench-run/1", "name": "latency",
     "recorded_at": "2026-01-31T12:00:00Z", "wall_s": 412.3,
     "command": ["ttsflow", "bench", "latency", "--json"], "exit_code": 0,
     "git": {"commit": "<40 hex>", "dirty": false, "changed_during_run": false},
     "machine": {"cpu_model": "...", "cores": 2, "memory_gib": 7.7, "gpu": null,
                 "os": "Linux 6.8.0", "python": "3.11.7", "loadavg_at_start": [0.4, 0.5, 0.6]},
     "result": {"...": "the command's JSON object, unchanged"}}

``git`` is the checkout as the command started (the code that ran); ``changed_during_run`` says
whether a commit or an edit came while it ran (the record then stands for the start's state only).

A run is recorded even when the command exits non-zero after printing its JSON (a chaos run that
lost a request is a result too); the recorder then exits with the command's status. Without a
JSON object on stdout nothing is written and it exits 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "envelope", "machine", "main", "parse_json_output", "write_run"]

FORMAT = "ttsflow-bench-run/1"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def parse_json_output(stdout: str) -> dict[str, Any] | None:
    """The JSON object ``stdout`` holds: all of it, else its last line that is one; None if none."""
    try:
        whole = json.loads(stdout)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return whole
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gpu() -> str | None:
    """``name (memory)`` of each NVIDIA GPU nvidia-smi sees, joined; None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = [f"{name.strip()} ({mem.strip()})" for name, _, mem in
            (line.partition(",") for line in out.splitlines() if line.strip())]
    return ", ".join(gpus) or None


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, GPU (None when there is none), OS, Python and the load at start."""
    return {"cpu_model": _cpu_model(), "cores": os.cpu_count(), "memory_gib": _memory_gib(), "gpu": _gpu(),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None}


def _git(cwd: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def envelope(name: str, command: list[str], result: dict[str, Any], *, exit_code: int, wall_s: float,
             recorded_at: dt.datetime, git: dict[str, Any], host: dict[str, Any]) -> dict[str, Any]:
    """The file's content: the run's context around the benchmark's unchanged ``result``."""
    return {"format": FORMAT, "name": name,
            "recorded_at": recorded_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "wall_s": round(wall_s, 1), "command": command, "exit_code": exit_code, "git": git, "machine": host,
            "result": result}


def write_run(run: dict[str, Any], out_dir: Path) -> Path:
    """Write ``run`` as ``<name>-<YYYYMMDD-HHMM>.json`` (a suffix when that minute is taken)."""
    stamp = dt.datetime.strptime(run["recorded_at"], "%Y-%m-%dT%H:%M:%SZ").strftime("%Y%m%d-%H%M")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{run['name']}-{stamp}.json"
    n = 2
    while path.exists():
        path = out_dir / f"{run['name']}-{stamp}-{n}.json"
        n += 1
    path.write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m streams.bench.record",
                                 usage="python -m streams.bench.record NAME [--out DIR] -- COMMAND...",
                                 description="Run a benchmark command that prints a JSON object and keep it, "
                                             "dated, with the machine and commit, for the docs' tables.")
    ap.add_argument("name", help="benchmark name, e.g. latency, baseline, engine, chaos (the docs page it goes to)")
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks/data"),
                    help="directory of the run files (default docs/benchmarks/data, from the repository root)")
    ap.epilog = "Then -- and the command, e.g. -- ttsflow bench latency --json"
    if "--" not in argv:
        ns = ap.parse_args(argv)  # --help, or a usage error
        ap.error("give the command after --")
    cut = argv.index("--")
    ns, command = ap.parse_args(argv[:cut]), argv[cut + 1:]
    if not _NAME.fullmatch(ns.name) or not command:
        print("usage: python -m streams.bench.record NAME -- COMMAND... (NAME: lowercase letters, digits, - and _)",
              file=sys.stderr)
        return 2
    started = dt.datetime.now(dt.UTC)
    host = machine()
    at_start = _git(Path.cwd())
    t0 = time.monotonic()
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    except OSError as e:
        print(f"record: cannot run {command[0]!r}: {e}", file=sys.stderr)
        return 2
    wall = time.monotonic() - t0
    result = parse_json_output(proc.stdout)
    if result is None:
        sys.stdout.write(proc.stdout)
        print(f"record: {command[0]} printed no JSON object (exit {proc.returncode}); nothing recorded",
              file=sys.stderr)
        return 2
    run = envelope(ns.name, command, result, exit_code=proc.returncode, wall_s=wall, recorded_at=started,
                   git={**at_start, "changed_during_run": _git(Path.cwd()) != at_start}, host=host)
    path = write_run(run, ns.out)
    print(f"record: {path} (exit {proc.returncode})")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
