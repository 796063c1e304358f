"""``ttsflow bench latency``: latency against load, ttsflow and the Celery baseline side by side.

Both systems run at once on this machine (:mod:`streams.bench.baseline`'s two: one
``ttsflow stage`` + one ``ttsflow worker`` on topics of their own, and one Celery node,
same backend, voice, model version and engine threads), driven by the same seeded
open-loop (Poisson) arrivals on the same fresh texts per phase, phases interleaved
(ttsflow, then the baseline) so the shared machine's load hits both alike:

1. **capacity** (``--capacity``): ``burst``: a batch of requests at once (100; 8 with
   ``--quick``), its completion rate (answers over first publish to last answer) is the
   system's own *capacity* C; ``sustained`` (the default of a full run): after that burst, open
   loop at 0.6, 0.7, 0.8, ... 1.45 times its rate for ``--ramp-s`` each, up to the first rate after
   the first not sustained (``baseline.sustained``) twice running (a step not sustained is run once
   more: ``baseline.ramp``), and C is the highest arrival rate of a sustained step (half the burst's
   if none was). A burst of 100 moved by 10% or more run to run, and "70% of
   C" was anything from ~60% to ~90% of the sustainable rate, so the latency there followed that
   one measurement (issue 32);
2. **open loop** at 30/50/70/90% of each system's own C (``--fractions``): completion
   latency p50/p90/p99 (publish to the answer a client sees: ttsflow's committed
   completion read ``read_committed``, the baseline's result in its backend), and whether
   the rate was sustained (``baseline.sustained``); *sustained rate* is the highest arrival
   rate among sustained runs;
3. **first chunk** (ttsflow): every ``--stream-every``-th request asks for streaming
   (``stream: true``); the time from its publish to its first chunk seen on ``tts.chunks``
   by a ``read_committed`` reader, p50/p99, for requests of several segments (and for all
   streaming ones). A worker that produces no chunks gives null with the reason;
4. **where the time goes** (both systems, every phase, ``breakdown``): per request, the
   seconds in each place (:mod:`streams.bench.tail`; ttsflow: stage, read, wait, model,
   upload, collect, join, commit_wait from its completion's ``timings``, and ``txn_read``, the
   transaction and the client's read; Celery: queue, synth, upload, the rest of the task,
   result read), the median requests against the slowest 1% (``excess_ms`` says where the
   tail's time went), and the worker's garbage collections (``gc``).

Capacity is measured after a warm-up burst (unmeasured) long enough for both systems to
reach a steady state (caches, first fetches, thread pools). ``--repeat N`` runs the whole
benchmark N times and reports each figure's median and spread (``repeats``).

A PNG plot of latency against load for both systems is written next to the JSON
(``--out``, default ``out/bench-latency/<run id>/``). The machine is shared: read the
ratios measured in one run. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.bench.baseline import _Baseline, _phase, _Ttsflow, ramp, schedule, unit_gaps

__all__ = ["main", "run_bench"]

_FRACTIONS = [0.3, 0.5, 0.7, 0.9]
# of the burst's rate: where a capacity is looked for (--capacity sustained), up to the first rate after
# the first not sustained twice running (a burst can understate what a system keeps up with as well as overstate it)
_RAMP = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.45)  # of the burst's rate: a capacity within 10% of it


def _say(msg: str) -> None:
    print(f"bench latency: {msg}", file=sys.stderr, flush=True)


def _stats(xs: list[float]) -> dict[str, float | None]:
    """p50/p90/p99/mean of seconds, in ms."""
    from streams.bench.harness import percentile

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {"n": len(xs), "p50_ms": ms(percentile(xs, 50)), "p90_ms": ms(percentile(xs, 90)),
            "p99_ms": ms(percentile(xs, 99)), "mean_ms": ms(sum(xs) / len(xs) if xs else None)}


class _TtsflowTimed(_Ttsflow):
    """ttsflow as :mod:`~streams.bench.baseline` drives it, plus streaming requests, their chunks,
    the segments' arrival and each completion kept whole (its timings)."""

    def __init__(self, s: Any, workers: int, run_id: str, sup: Any, stream_every: int) -> None:
        super().__init__(s, workers, run_id, sup)
        self.stream_every = stream_every
        self.n_published = 0
        self.streaming: set[str] = set()
        self.completions: dict[str, tuple[Any, float]] = {}   # id -> (completion, seen at)
        self.first_chunk: dict[str, float] = {}               # id -> first chunk seen at
        self.chunks: dict[str, list[int]] = {}                # id -> seqs in the order seen
        self.chunk_reader: Any = None
        self._chunks_stop = threading.Event()
        self._chunks_thread: threading.Thread | None = None

    def wait_ready(self, timeout: float) -> None:
        from streams.bench.harness import TopicReader

        super().wait_ready(timeout)
        self.chunk_reader = TopicReader(self.s.kafka, self.s.kafka.topic_chunks, start="end")
        # a thread of its own, blocked in its poll: a chunk is stamped as it arrives, not when the loop
        # that waits for completions next looks (up to its poll's 20-50 ms later)
        self._chunks_thread = threading.Thread(target=self._read_chunks, name="chunks", daemon=True)
        self._chunks_thread.start()

    def _read_chunks(self) -> None:
        from schemas import SchemaError, decode_chunk

        while not self._chunks_stop.is_set():
            for rec in self.chunk_reader.poll(0.1):
                try:
                    ch = decode_chunk(rec.value)
                except SchemaError:
                    continue
                self.first_chunk.setdefault(ch.request_id, rec.received)
                self.chunks.setdefault(ch.request_id, []).append(ch.seq)

    def _request(self, rid: str, text: str) -> Any:
        import msgspec

        stream = self.stream_every > 0 and self.n_published % self.stream_every == 0
        self.n_published += 1
        if stream:
            self.streaming.add(rid)
        return msgspec.structs.replace(super()._request(rid, text), stream=stream)

    def _answered(self, c: Any, received: float) -> None:
        self.completions[c.request_id] = (c, received)

    def close(self) -> None:
        self._chunks_stop.set()
        if self._chunks_thread is not None:
            self._chunks_thread.join(5)
        if self.chunk_reader is not None:
            with contextlib.suppress(Exception):
                self.chunk_reader.close()
        super().close()

    # -- what a phase's requests say -------------------------------------------------------
    def first_chunk_stats(self, ids: list[str], *, settle_s: float = 5.0) -> dict[str, Any]:
        """First-chunk latency and chunk checks of the streaming requests among ``ids``. A request's chunks
        commit in or before its completion's transaction, but on another topic and reader: the last
        request's can come a moment after its completion, so they are waited for (``settle_s`` at most)
        before any is called missing."""
        stream = [i for i in ids if i in self.streaming and i in self.completions
                  and self.completions[i][0].status == "ok"]
        deadline = time.monotonic() + settle_s
        while (any(len(set(self.chunks.get(i, ()))) < self.completions[i][0].segments for i in stream)
               and time.monotonic() < deadline):
            time.sleep(0.02)
        multi = [i for i in stream if self.completions[i][0].segments >= 2]
        seen = [i for i in stream if i in self.first_chunk]
        out: dict[str, Any] = {"streaming_requests": len(stream), "of_several_segments": len(multi),
                               "with_chunks": len(seen)}
        if not self.first_chunk:
            out.update(p50_ms=None, p99_ms=None, reason=(
                "no chunk event seen on tts.chunks during the run: this worker does not produce chunks"))
            return out
        out["several_segments"] = _stats([self.first_chunk[i] - self.a.sent[i] for i in multi if i in self.first_chunk])
        out["all_streaming"] = _stats([self.first_chunk[i] - self.a.sent[i] for i in seen])
        out["p50_ms"], out["p99_ms"] = out["several_segments"]["p50_ms"], out["several_segments"]["p99_ms"]
        out["chunks_out_of_order"] = sum(1 for i in seen if self.chunks[i] != sorted(set(self.chunks[i])))
        out["chunks_missing"] = sum(1 for i in seen if len(set(self.chunks[i])) != self.completions[i][0].segments)
        return out


def _phase_ids(sysm: Any, prefix: str, label: str) -> list[str]:
    head = f"{prefix}-{sysm.name[:2]}-{label}-"
    return sorted(i for i in sysm.a.sent if i.startswith(head))


def _latencies(sysm: Any, ids: list[str]) -> list[float]:
    return [sysm.a.got[i][2] - sysm.a.sent[i] for i in ids if i in sysm.a.got]


def run_bench(*, quick: bool = False, seed: int | None = None, run_s: float | None = None,
              fractions: list[float] | None = None, stream_every: int = 2,
              out_dir: Path | None = None, capacity: str = "sustained", ramp_s: float = 15.0) -> dict[str, Any]:
    import importlib.util

    if importlib.util.find_spec("celery") is None:
        raise RuntimeError("celery is not installed: pip install -e '.[bench]'")
    from streams.bench.corpus import bench_texts
    from streams.bench.harness import cleanup_run, isolated, new_run_id, require_stack_up
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    t_start = time.monotonic()
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    run_s = run_s if run_s is not None else (4.0 if quick else 30.0)
    fractions = fractions or ([0.5, 0.9] if quick else list(_FRACTIONS))
    # ~8 s of work per system: the pipeline's own first-answer latency (a few hundred ms) is then a
    # small part of the span the capacity is measured over, not ~8% of it as with 40 requests
    burst_n = 8 if quick else 100
    run_id = new_run_id()
    out = (out_dir or Path("out/bench-latency")) / run_id
    base = load_settings()
    require_stack_up(base)
    cpus = os.cpu_count() or 1
    s = isolated(base, run_id).replace(threads=cpus)
    stack.ensure_topics(s)
    rng = random.Random(seed)
    pool = iter(bench_texts(3000 if quick else 20000, seed=seed))

    def texts(n: int) -> list[str]:
        return [next(pool) for _ in range(n)]

    prefix = f"lat-{run_id}"
    report: dict[str, Any] = {
        "run_id": run_id, "seed": seed, "quick": quick, "cpus": cpus,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()], "workers": 1, "engine_threads": cpus,
        "backend": s.engine.backend, "max_batch": s.batching.max_batch, "max_wait_ms": s.batching.max_wait_ms,
        "fair_slot_ms": s.batching.fair_slot_ms, "short_first": s.batching.short_first, "capacity": capacity,
        "run_s": run_s, "fractions": fractions, "stream_every": stream_every,
    }
    sup = Supervisor(out / "logs")
    systems: list[Any] = []
    try:
        _say(f"run {run_id}: starting ttsflow (1 stage + 1 worker) and the Celery baseline (1 pool process)")
        tf = _TtsflowTimed(s, 1, run_id, sup, stream_every)
        systems.append(tf)
        bl = _Baseline(s, 1, run_id, out / "logs", 20 if quick else 60)
        systems.append(bl)
        tf.wait_ready(240)
        bl.wait_ready(240)
        report["model"] = {"baseline": bl.model(), "ttsflow": tf.model()}
        # the same thread budget: the baseline's one process runs one call on all of it, ttsflow's
        # worker splits it into model lanes (TTS_MODEL_LANES) when its backend runs items one by one
        report["model_calls"] = {"baseline": f"1 x {report['engine_threads']} threads", "ttsflow": tf.lanes()}
        for sysm in systems:
            _phase(sysm, "warm", texts(3), None, answer_timeout=120, prefix=prefix)
        warm_texts = texts(4 if quick else 24)  # a burst to a steady state before the one that measures
        for sysm in systems:
            _phase(sysm, "warmburst", warm_texts, None, answer_timeout=300, prefix=prefix)
        res: dict[str, dict[str, Any]] = {x.name: {"rates": []} for x in systems}

        burst_texts = texts(burst_n)
        for sysm in systems:
            _say(f"{sysm.name}: burst of {burst_n}")
            res[sysm.name]["burst"] = _phase(sysm, "burst", burst_texts, None, answer_timeout=300, prefix=prefix)
        cap = {x.name: max(0.05, res[x.name]["burst"]["throughput_rps"]) for x in systems}
        if capacity == "sustained":
            cap = _ramp(systems, res, cap, texts, rng, ramp_s, prefix)
        for name, c in cap.items():
            res[name]["capacity_rps"] = c

        for k, f in enumerate(fractions):
            n = {x.name: max(6, int(f * cap[x.name] * run_s)) for x in systems}
            shared = texts(max(n.values()))
            unit = unit_gaps(rng, max(n.values()))  # both systems' arrivals: one shape, each at its rate
            for sysm in systems:
                rate = f * cap[sysm.name]
                label = f"f{k}"
                _say(f"{sysm.name}: open loop {n[sysm.name]} requests at {rate:.2f}/s ({f:.0%} of its capacity)")
                ph = _phase(sysm, label, shared[:n[sysm.name]], schedule(unit, n[sysm.name], rate),
                            answer_timeout=max(60.0, 3 * run_s), prefix=prefix)
                ids = _phase_ids(sysm, prefix, label)
                ph["fraction"] = f
                ph["completion"] = _stats(_latencies(sysm, ids))
                ph["loadavg_1m"] = round(os.getloadavg()[0], 2)
                if sysm is tf:
                    ph["first_chunk"] = tf.first_chunk_stats(ids)
                res[sysm.name]["rates"].append(ph)
                _say(f"{sysm.name}: -> p50 {ph['completion']['p50_ms']} p99 {ph['completion']['p99_ms']} ms, "
                     f"sustained {ph['sustained']}")

        for x in systems:
            ok = [p for p in res[x.name]["rates"] if p["sustained"]]
            res[x.name]["sustained_rps"] = max((p["sent_rps"] for p in ok), default=None)
        report["systems"] = res
        report["table"] = _rows(res)
        report["ratios"] = _ratios(res)
    finally:
        for sysm in systems:
            with contextlib.suppress(Exception):
                sysm.close()
        sup.stop_all()
        cleanup_run(s, _say)
    report["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    out.mkdir(parents=True, exist_ok=True)
    report["json"] = str(out / "latency.json")
    report["plot"] = _plot(report, out / "latency.png")
    Path(report["json"]).write_text(json.dumps(report, indent=1))
    return report


def _ramp(systems: list[Any], res: dict[str, dict[str, Any]], burst: dict[str, float],
          texts: Callable[[int], list[str]], rng: random.Random, ramp_s: float, prefix: str) -> dict[str, float]:
    """Each system's capacity as the highest rate it sustained on a ramp of fractions of its burst's
    (:data:`_RAMP`, ``ramp_s`` each; :func:`streams.bench.baseline.ramp`); half its burst's rate if
    none was. The steps go in ``res[name]["ramp"]``."""
    steps = ramp(systems, burst, _RAMP, texts, rng, ramp_s, prefix, "c")
    for x in systems:
        res[x.name]["ramp"] = steps[x.name]  # the burst's own rate is in res[name]["burst"]
    return {x.name: ramp_capacity(steps[x.name], burst[x.name]) for x in systems}


def ramp_capacity(steps: list[dict[str, Any]], burst_rps: float) -> float:
    """The highest arrival rate of a sustained step; half the burst's rate if none was sustained."""
    return max((p["sent_rps"] for p in steps if p["sustained"]), default=0.5 * burst_rps)


def _rows(res: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (system, load): the table of the report."""
    rows = []
    for name, x in res.items():
        for p in x["rates"]:
            c = p["completion"]
            row = {"system": name, "fraction": p["fraction"], "offered_rps": p["offered_rps"],
                   "sent_rps": p["sent_rps"], "throughput_rps": p["throughput_rps"], "sustained": p["sustained"],
                   "p50_ms": c["p50_ms"], "p90_ms": c["p90_ms"], "p99_ms": c["p99_ms"]}
            if "first_chunk" in p:
                row["first_chunk_p50_ms"] = p["first_chunk"]["p50_ms"]
                row["first_chunk_p99_ms"] = p["first_chunk"]["p99_ms"]
            rows.append(row)
    return rows


def _ratios(res: dict[str, dict[str, Any]]) -> dict[str, Any]:
    tf, bl = res["ttsflow"], res["baseline"]

    def r(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else round(a / b, 3)

    return {"capacity_rps": r(tf["capacity_rps"], bl["capacity_rps"]),
            "sustained_rps": r(tf["sustained_rps"], bl["sustained_rps"]),
            "p50_by_fraction": {str(p["fraction"]): r(p["completion"]["p50_ms"], q["completion"]["p50_ms"])
                                for p, q in zip(tf["rates"], bl["rates"], strict=True)},
            "p99_by_fraction": {str(p["fraction"]): r(p["completion"]["p99_ms"], q["completion"]["p99_ms"])
                                for p, q in zip(tf["rates"], bl["rates"], strict=True)}}


def _plot(report: dict[str, Any], path: Path) -> str | None:
    """Completion p50/p99 (and ttsflow's first chunk) against load; the PNG's path, None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        report["plot_error"] = "matplotlib is not installed: pip install -e '.[dev]'"
        return None
    res = report.get("systems")
    if not res:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, style in (("ttsflow", "tab:blue"), ("baseline", "tab:orange")):
        rates = res[name]["rates"]
        for ax, xkey in ((axes[0], "fraction"), (axes[1], "offered_rps")):
            xs = [p[xkey] for p in rates]
            for q, ls in (("p50_ms", "-"), ("p99_ms", "--")):
                ys = [p["completion"][q] for p in rates]
                ax.plot(xs, ys, ls, marker="o", color=style, label=f"{name} completion {q[:3]}")
            if name == "ttsflow":
                fc = [p["first_chunk"]["p50_ms"] for p in rates]
                if any(v is not None for v in fc):
                    ax.plot(xs, fc, ":", marker="s", color="tab:green", label="ttsflow first chunk p50")
    axes[0].set_xlabel("load (fraction of the system's own burst capacity)")
    axes[1].set_xlabel("offered arrival rate (requests/s)")
    for ax in axes:
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    la = report["loadavg_at_start"]
    fig.suptitle(f"bench latency {report['run_id']} ({report['backend']}, 1 worker each, {report['cpus']} CPUs, "
                 f"load {la[0]}/{la[1]}/{la[2]} at start)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _excess_line(b: dict[str, Any]) -> str:
    """The slowest 1% against the median, and the three places the difference went to."""
    if not b.get("n"):
        return "no breakdown"
    top = sorted(((v, k) for k, v in b["excess_ms"].items() if k != "total"), reverse=True)[:3]
    return (f"median {b['median_ms']['total']} ms, slowest 1% {b['slowest_1pct_ms']['total']} ms; extra in "
            + ", ".join(f"{k} +{v:.0f}" for v, k in top))


def _table(r: dict[str, Any]) -> str:
    lines = [f"{'system':9} {'load':>5} {'rps':>6} {'sust':>5} {'p50':>8} {'p90':>8} {'p99':>8} {'chunk p50':>9} "
             f"{'chunk p99':>9}"]
    for row in r["table"]:
        lines.append(f"{row['system']:9} {row['fraction']:>5.0%} {row['sent_rps']:>6} {row['sustained']!s:>5} "
                     f"{row['p50_ms']!s:>8} {row['p90_ms']!s:>8} {row['p99_ms']!s:>8} "
                     f"{row.get('first_chunk_p50_ms', '-')!s:>9} {row.get('first_chunk_p99_ms', '-')!s:>9}")
    for name, x in r["systems"].items():
        for p in x["rates"]:
            lines.append(f"{name} at {p['fraction']:.0%}: {_excess_line(p.get('breakdown', {}))}")
    lines.append(f"ratios ttsflow/baseline: {r['ratios']}; plot: {r['plot']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 loads, 4 s runs, small burst: under 2 minutes")
    ap.add_argument("--seconds", type=float, default=None, help="length of each open-loop run (default 30, quick 4)")
    ap.add_argument("--fractions", default=None,
                    help="loads as fractions of each system's capacity C (default 0.3,0.5,0.7,0.9; quick 0.5,0.9)")
    ap.add_argument("--stream-every", type=int, default=2,
                    help="every Nth ttsflow request asks for streaming (0: none)")
    ap.add_argument("--out", type=Path, default=None, help="directory for <run id>/latency.json and .png")
    ap.add_argument("--seed", type=int, default=None, help="corpus and arrival seed (default: random)")
    ap.add_argument("--capacity", choices=("sustained", "burst"), default=None,
                    help="each system's capacity C: the highest rate sustained on a ramp after the burst "
                         "(default) or the burst's own rate (default with --quick)")
    ap.add_argument("--ramp-s", type=float, default=15.0, help="length of each ramp step (--capacity sustained)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the whole benchmark N times; the JSON then has each figure's median and spread")
    ap.add_argument("--json", action="store_true", help="print only the JSON object (always the last line)")
    ns = ap.parse_args(argv)
    fr = [float(x) for x in ns.fractions.split(",")] if ns.fractions else None
    if ns.stream_every < 0 or (fr is not None and not all(0 < f <= 5 for f in fr)):
        print("ttsflow bench latency: --stream-every >= 0, 0 < fractions <= 5", file=sys.stderr)
        return 2
    from streams.bench.tail import run_repeats

    def one(k: int) -> dict[str, Any]:
        return run_bench(quick=ns.quick, seed=None if ns.seed is None else ns.seed + k, run_s=ns.seconds, fractions=fr,
                         stream_every=ns.stream_every, out_dir=ns.out,
                         capacity=ns.capacity or ("burst" if ns.quick else "sustained"), ramp_s=ns.ramp_s)

    return run_repeats("latency", ns.repeat, one, repeat_summary, _table, as_json=ns.json)


def repeat_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread over the repeats of every figure a claim rests on."""
    from streams.bench.tail import summarize_repeats

    figures: dict[str, Any] = {
        "loadavg_1m": lambda r: r["loadavg_at_start"][0],
        "capacity_rps.ttsflow": lambda r: r["systems"]["ttsflow"]["capacity_rps"],
        "capacity_rps.baseline": lambda r: r["systems"]["baseline"]["capacity_rps"],
        "burst_rps.ttsflow": lambda r: r["systems"]["ttsflow"]["burst"]["throughput_rps"],
        "burst_rps.baseline": lambda r: r["systems"]["baseline"]["burst"]["throughput_rps"],
        "ratio.capacity": lambda r: r["ratios"]["capacity_rps"],
        "ratio.sustained": lambda r: r["ratios"]["sustained_rps"],
    }
    for f in runs[0]["fractions"]:
        key = str(f)
        for q in ("p50", "p99"):
            figures[f"ratio.{q}@{key}"] = lambda r, key=key, q=q: r["ratios"][f"{q}_by_fraction"][key]
            for name in ("ttsflow", "baseline"):
                figures[f"{q}_ms@{key}.{name}"] = lambda r, key=key, q=q, name=name: next(
                    p["completion"][f"{q}_ms"] for p in r["systems"][name]["rates"] if str(p["fraction"]) == key)
        figures[f"sustained@{key}.ttsflow"] = lambda r, key=key: next(
            p["sustained"] for p in r["systems"]["ttsflow"]["rates"] if str(p["fraction"]) == key)
    return summarize_repeats(runs, figures)


