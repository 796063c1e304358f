"""``python -m streams.bench.paired --a DIR --b DIR``: two checkouts of ttsflow, side by side, on the same load.

For a change to the worker or the stage whose effect is a few milliseconds, which ``bench
latency``'s run-to-run spread hides. Each pair of runs starts one stage and one worker from
checkout A, then from checkout B (each in its own directory, on the running local stack, with
its own ``TTS_*`` settings from ``--a-env`` / ``--b-env``, and the broker's dynamic settings
from ``--a-broker`` / ``--b-broker`` while it runs), and sends both the same requests
at the same moments: a warm-up, then ``--seconds`` of Poisson arrivals at each of ``--rates``
requests per second (the texts and arrival times drawn from the pair's seed, every second
request streaming, as in ``bench latency``). Every run asks for a speed of its own (1 - k *
0.0001, k counting runs: the audio is the same to a hundredth of a percent), so no run is
answered from another's parts in the cache.

The JSON has, per rate and arm, the median over the pairs of each phase's p50 and p99, of
the median request's parts (``stage``, ``read``, ... ``txn_read``: the phase's own ``breakdown``)
and of the CPU its stage and worker processes used per request sent in the phase (``cpu_ms_per_request``),
and the per-pair p50 and p99 ratios B / A with their median. One pair's runs follow each other,
so a drift of the machine's load falls on both arms; the pairs alternate which arm runs first.

``--one`` (internal) is one arm's run in the current directory, printing its JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "run_one"]

_RUN_HERE = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
_PARTS = ("stage", "read", "wait", "model", "upload", "collect", "join", "commit_wait", "txn_read", "total")


def _say(msg: str) -> None:
    print(f"bench paired: {msg}", file=sys.stderr, flush=True)


def run_one(rates: list[float], seconds: float, seed: int, speed: float) -> dict[str, Any]:
    """One arm: a stage and a worker of this checkout, the pair's requests at ``rates``; per rate the
    phase's p50/p99 and the median request's parts."""
    import msgspec

    from streams.bench import harness
    from streams.bench.baseline import _phase, schedule, unit_gaps
    from streams.bench.corpus import bench_texts
    from streams.bench.harness import isolated, new_run_id, require_stack_up
    from streams.bench.latency import _TtsflowTimed
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    class _AtSpeed(_TtsflowTimed):
        def _request(self, rid: str, text: str) -> Any:
            return msgspec.structs.replace(super()._request(rid, text), speed=speed)

    run_id = new_run_id()
    base = load_settings()
    require_stack_up(base)
    s = isolated(base, run_id).replace(threads=os.cpu_count() or 1)
    stack.ensure_topics(s)
    rng = random.Random(seed)
    pool = iter(bench_texts(5000, seed=seed))
    sup = Supervisor(Path("out/bench-paired") / run_id / "logs")
    tf = _AtSpeed(s, 1, run_id, sup, 2)
    out: dict[str, Any] = {"run_id": run_id, "seed": seed, "speed": speed, "rates": {}}
    try:
        tf.wait_ready(240)
        _phase(tf, "warm", [next(pool) for _ in range(3)], None, answer_timeout=120, prefix="pr")
        _phase(tf, "warmburst", [next(pool) for _ in range(24)], None, answer_timeout=300, prefix="pr")
        for k, rate in enumerate(rates):
            n = max(6, int(rate * seconds))
            before = _cpu_s(sup)
            ph = _phase(tf, f"r{k}", [next(pool) for _ in range(n)], schedule(unit_gaps(rng, n), n, rate),
                        answer_timeout=max(60.0, 3 * seconds), prefix="pr")
            after = _cpu_s(sup)
            out["rates"][str(rate)] = {"p50_ms": ph.get("p50_ms"), "p99_ms": ph.get("p99_ms"),
                                       "lost": ph.get("lost"), "median_ms": ph["breakdown"].get("median_ms"),
                                       "cpu_ms_per_request": {name: round((after[name] - before[name]) * 1000 / n, 2)
                                                              for name in after if name in before}}
            _say(f"{rate}/s: p50 {ph.get('p50_ms')} p99 {ph.get('p99_ms')} ms")
    finally:
        with contextlib.suppress(Exception):
            tf.close()
        sup.stop_all()
        # a checkout from before 2026-12-05's cleanup_run deletes its topics only
        getattr(harness, "cleanup_run", harness.cleanup_run_topics)(s, _say)
    return out


def _cpu_s(sup: Any) -> dict[str, float]:
    """CPU seconds (user + system) each running process of ``sup`` has used so far (Linux /proc)."""
    from streams.bench.harness import process_cpu_s

    cpu = {name: process_cpu_s(proc.pid) for name, proc in sup.procs.items()}
    return {name: s for name, s in cpu.items() if s is not None}


def _pairs(items: list[str]) -> dict[str, str]:
    """``K=V`` arguments as a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"bench paired: {item!r} is not K=V")
        out[key] = value
    return out


def _median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return round(statistics.median(vals), 3) if vals else None


def summarize(runs: list[dict[str, Any]], rates: list[float]) -> dict[str, Any]:
    """Per rate: each arm's medians over the pairs, and the pairs' B / A ratios of p50 and p99."""
    out: dict[str, Any] = {}
    for rate in map(str, rates):
        row: dict[str, Any] = {}
        for arm in ("a", "b"):
            phases = [r[arm]["rates"][rate] for r in runs]
            row[arm] = {"p50_ms": _median([p["p50_ms"] for p in phases]),
                        "p99_ms": _median([p["p99_ms"] for p in phases]),
                        "median_request_ms": {k: _median([(p["median_ms"] or {}).get(k) for p in phases])
                                              for k in _PARTS},
                        "cpu_ms_per_request": {k: _median([(p.get("cpu_ms_per_request") or {}).get(k) for p in phases])
                                               for k in sorted({k for p in phases for k in p.get("cpu_ms_per_request") or {}})}}
        for q in ("p50_ms", "p99_ms"):
            ratios = [r["b"]["rates"][rate][q] / r["a"]["rates"][rate][q] for r in runs
                      if r["a"]["rates"][rate][q] and r["b"]["rates"][rate][q]]
            row[f"ratio_{q[:3]}"] = {"median": _median(ratios), "values": [round(x, 3) for x in ratios]}
        out[rate] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m streams.bench.paired", description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, help="checkout A (its root)")
    ap.add_argument("--b", type=Path, help="checkout B (its root)")
    ap.add_argument("--a-env", action="append", default=[], metavar="K=V", help="a TTS_* setting for A's run")
    ap.add_argument("--b-env", action="append", default=[], metavar="K=V", help="a TTS_* setting for B's run")
    ap.add_argument("--rates", default="3,5,7", help="requests per second, one phase each (default 3,5,7)")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each phase (default 20)")
    ap.add_argument("--a-broker", action="append", default=[], metavar="K=V",
                    help="a dynamic setting of every broker while A runs, removed after it")
    ap.add_argument("--b-broker", action="append", default=[], metavar="K=V",
                    help="a dynamic setting of every broker while B runs, removed after it")
    ap.add_argument("--pairs", type=int, default=3, help="pairs of runs (default 3)")
    ap.add_argument("--seed", type=int, default=None, help="first pair's seed (default: random)")
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    ap.add_argument("--one", nargs=2, type=float, metavar=("SEED", "SPEED"), help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    rates = [float(x) for x in ns.rates.split(",")]
    if ns.one is not None:
        print(json.dumps(run_one(rates, ns.seconds, int(ns.one[0]), ns.one[1])))
        return 0
    if ns.a is None or ns.b is None:
        ap.error("--a and --b are required")
    from streams.kafka.admin import broker_settings
    from streams.settings import load_settings

    kafka = load_settings().kafka
    seed = ns.seed if ns.seed is not None else random.SystemRandom().randrange(2**20)
    t0 = time.monotonic()
    runs: list[dict[str, Any]] = []
    k = 0
    for i in range(ns.pairs):
        pair: dict[str, Any] = {"seed": seed + i}
        arms = [("a", ns.a, ns.a_env, ns.a_broker), ("b", ns.b, ns.b_env, ns.b_broker)]
        for arm, root, env, broker in arms if i % 2 == 0 else arms[::-1]:
            k += 1
            speed = round(1 - k * 0.0001, 4)
            _say(f"pair {i + 1}/{ns.pairs}: {arm} ({root}, {' '.join(env + broker) or 'defaults'}), seed {seed + i}")
            # this file run in the checkout's directory ('' first on sys.path): its streams package, and the
            # stage and worker it starts, are that checkout's (one older than this module works too)
            args = ["--one", str(seed + i), str(speed), "--rates", ns.rates, "--seconds", str(ns.seconds)]
            with broker_settings(kafka, _pairs(broker)):
                proc = subprocess.run([sys.executable, "-c", _RUN_HERE, __file__, *args],
                                      cwd=root, env={**os.environ, **_pairs(env)},
                                      stdout=subprocess.PIPE, text=True, check=True)
            pair[arm] = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(pair)
    report = {"a": {"root": str(ns.a.resolve()), "env": ns.a_env, "broker": ns.a_broker},
              "b": {"root": str(ns.b.resolve()), "env": ns.b_env, "broker": ns.b_broker},
              "rates": rates, "seconds": ns.seconds, "pairs": ns.pairs, "seed": seed,
              "summary": summarize(runs, rates), "runs": runs, "wall_s": round(time.monotonic() - t0, 1)}
    if not ns.json:
        for rate, row in report["summary"].items():
            _say(f"{rate}/s: p50 A {row['a']['p50_ms']} B {row['b']['p50_ms']} (B/A {row['ratio_p50']['median']}), "
                 f"p99 A {row['a']['p99_ms']} B {row['b']['p99_ms']} (B/A {row['ratio_p99']['median']})")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
