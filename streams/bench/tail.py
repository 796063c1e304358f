"""Where the tail goes, and how much one run can be trusted: shared by ``bench latency`` and ``bench baseline``.

* :func:`ttsflow_path` splits one ttsflow request's latency (publish to the committed
  completion a ``read_committed`` client sees) into the places named by the completion's
  :class:`~schemas.Timings` (stage, read, wait, model, upload, collect, join, commit_wait) plus
  ``txn_read`` (the transaction that commits it and the client's fetch of it), so the parts
  add up to the total.
* :func:`baseline_path` does the same for a Celery task (queue, task, result read).
* :func:`breakdown` compares the parts of the median requests with those of the slowest 1%:
  ``excess_ms`` says which place the tail's extra time went to.
* :func:`summarize_repeats` gives, for each number of several repeated runs, the median and
  the spread (min, max), so a claim rests on the repeats, not on one noisy phase;
  :func:`run_repeats` is both benchmarks' ``--repeat N`` main.

Pure but for :func:`run_repeats` (which prints): no Kafka, no clock.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["TTSFLOW_PARTS", "baseline_path", "breakdown", "repeat_table", "run_repeats", "summarize_repeats",
           "ttsflow_path"]

TTSFLOW_PARTS = ("stage", "read", "wait", "model", "upload", "collect", "join", "commit_wait", "txn_read")
BASELINE_PARTS = ("queue", "synth", "upload", "task_rest", "result_read")


def ttsflow_path(c: Any, sent: float, seen: float) -> dict[str, float] | None:
    """Seconds per place of completion ``c`` published at ``sent`` and seen at ``seen`` (epoch
    seconds); None when its timings do not say (failed early, or an older worker)."""
    t = c.timings
    if t is None or c.completed_at is None or t.read_ms is None or t.commit_wait_ms is None:
        return None
    parts = {k: (getattr(t, f"{k}_ms") or 0.0) / 1000 for k in TTSFLOW_PARTS[:-1]}
    if t.stage_ms is None:  # no enqueue time: the stage is what the publish-to-read leaves
        parts["stage"] = 0.0
    began = c.completed_at.timestamp() + parts["commit_wait"]
    parts["txn_read"] = max(0.0, seen - began)
    parts["total"] = seen - sent
    return parts


def baseline_path(result: Mapping[str, Any], sent: float, seen: float) -> dict[str, float] | None:
    """Seconds per place of a Celery task's result (``started_at``, ``task_s``, ``synth_s``, ``upload_s``)."""
    started = result.get("started_at")
    if started is None:
        return None
    task = float(result.get("task_s", 0.0))
    synth, upload = float(result.get("synth_s", 0.0)), float(result.get("upload_s", 0.0))
    return {"queue": max(0.0, started - sent), "synth": synth, "upload": upload,
            "task_rest": max(0.0, task - synth - upload), "result_read": max(0.0, seen - started - task),
            "total": seen - sent}


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def breakdown(paths: Iterable[Mapping[str, float]]) -> dict[str, Any]:
    """The parts of the median requests (45th-55th percentile of the total) against those of the
    slowest 1% (at least one request), means in ms, and each part's p50/p99 on its own."""
    from streams.bench.harness import percentile

    rows = sorted(paths, key=lambda r: r["total"])
    if not rows:
        return {"n": 0}
    keys = [k for k in rows[0] if k != "total"] + ["total"]
    n = len(rows)
    mid = rows[int(0.45 * (n - 1)):int(0.55 * (n - 1)) + 1]
    slow = rows[min(n - 1, int(0.99 * n)):] or rows[-1:]

    def mean(rs: list[Mapping[str, float]], k: str) -> float:
        return sum(r[k] for r in rs) / len(rs)

    med = {k: _ms(mean(mid, k)) for k in keys}
    tail = {k: _ms(mean(slow, k)) for k in keys}
    excess = {k: round((tail[k] or 0.0) - (med[k] or 0.0), 1) for k in keys}
    return {"n": n, "median_requests": len(mid), "slowest_requests": len(slow), "median_ms": med,
            "slowest_1pct_ms": tail, "excess_ms": excess,
            "per_part": {k: {"p50_ms": _ms(percentile([r[k] for r in rows], 50)),
                             "p99_ms": _ms(percentile([r[k] for r in rows], 99))} for k in keys}}


def _spread(xs: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3),
            "values": [round(x, 3) for x in xs]}


def summarize_repeats(runs: list[dict[str, Any]], figures: Mapping[str, Callable[[dict[str, Any]], Any]]
                      ) -> dict[str, Any]:
    """For each named figure (a getter on one run's report), its median, min, max and values over
    the runs that have it (None in a run: left out; ``n`` says how many counted)."""
    out: dict[str, Any] = {}
    for name, get in figures.items():
        xs: list[float] = []
        for r in runs:
            try:
                v = get(r)
            except (KeyError, TypeError, IndexError):
                v = None
            if isinstance(v, bool):
                v = float(v)
            if isinstance(v, int | float):
                xs.append(float(v))
        out[name] = {"n": len(xs), **(_spread(xs) if xs else {"median": None})}
    return out


def repeat_table(rep: dict[str, Any]) -> str:
    """The repeats' summary (:func:`summarize_repeats`) as a text table."""
    lines = [f"{'figure':32} {'n':>2} {'median':>10} {'min':>10} {'max':>10}"]
    for name, v in rep.items():
        lines.append(f"{name:32} {v['n']:>2} {v['median']!s:>10} {v.get('min', '-')!s:>10} {v.get('max', '-')!s:>10}")
    return "\n".join(lines)


def run_repeats(name: str, repeat: int, run_one: Callable[[int], dict[str, Any]],
                summary: Callable[[list[dict[str, Any]]], dict[str, Any]], table: Callable[[dict[str, Any]], str],
                *, as_json: bool) -> int:
    """A benchmark's ``--repeat N`` main: ``run_one(k)`` N times (a table after each unless
    ``as_json``), then one JSON document on stdout: the run itself, or ``{"repeat", "repeats":
    summary(runs), "runs"}``. A repeat that raises ends the series; what ran is still printed and
    the exit status is 1 (2 for a bad ``repeat``)."""
    if repeat < 1:
        print(f"ttsflow bench {name}: --repeat >= 1", file=sys.stderr)
        return 2
    runs: list[dict[str, Any]] = []
    try:
        for k in range(repeat):
            runs.append(run_one(k))
            if not as_json:
                print(table(runs[-1]))
    except Exception as e:
        print(f"ttsflow bench {name}: {type(e).__name__}: {e}", file=sys.stderr)
        if not runs:
            return 1
    r: dict[str, Any] = runs[0] if len(runs) == 1 else {"repeat": len(runs), "repeats": summary(runs), "runs": runs}
    if len(runs) > 1 and not as_json:
        print(repeat_table(r["repeats"]))
    print(json.dumps(r))
    return 0 if len(runs) == repeat else 1
