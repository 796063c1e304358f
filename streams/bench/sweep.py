"""``ttsflow bench sweep``: the deployment choice as a designed experiment, speed and intelligibility
side by side, the Pareto front and the fastest point above a quality floor.

The seed's method (fix 50 sentences, vary the knobs in a Latin square, plot quality against
speed, take the fastest point above the acceptable quality), built in:

1. **Design.** Per backend the factors are ``precision`` (the versions the model store can make),
   ``batch`` (``TTS_MAX_BATCH``) and ``threads`` (``TTS_THREADS`` with one model lane). A full
   grid when it has at most ``--max-points`` points, else a Latin square: rows are the levels
   of the first factor, columns those of the second, the third takes level ``(row + col) mod n``
   (each pair of levels of any two factors then appears equally often when the level counts
   are equal). The design (kind, factors, points) is in the output.
2. **Speed per point**, each point in a fresh process (so its peak RSS is its own): cold start
   (load + warm-up), first-audio latency (one first sentence alone, the time a request's first
   segment waits for its model call), then ``--repeats`` passes over the first ``--speed-texts``
   sentences of the corpus in batches of ``batch``: throughput (audio seconds per second, the
   median pass and the passes' spread as the noise estimate), real-time factor, batch p50/p99.
3. **Intelligibility per version**: word error (pocketsphinx, English voices) or character error
   (Whisper base, Mandarin kokoro) of all 50 sentences of the language's corpus
   (:mod:`streams.bench.sweep_corpus`), synthesized one by one; ``--quality-jobs`` versions at
   once (one thread each), after every timed point, so scoring never overlaps a timing. Batch and threads do not change
   the arithmetic of an item (a batch pads and trims; tests/unit/test_engine*.py check batched
   items against single ones), so one score per backend x precision serves each of its points;
   ``quality_from`` says so in every row.
4. **The front**: per language, the points no other point beats on both throughput and error;
   the recommendation is the fastest point whose error is at most ``--max-wer`` (English) /
   ``--max-cer`` (Mandarin), printed as the ``TTS_*`` settings to run it with, and run again
   (``rerun``: its throughput the second time over the first; the goal is within 15%).
   ``--plot`` writes the front as a PNG. ``--pipeline`` then runs ``ttsflow bench pipeline`` with
   each recommendation's settings against the local stack, to show what stage + worker keep of
   the engine's speed.

The last line of stdout is one JSON object; progress (points done, time left) goes to stderr.
Numbers on a shared machine are noisy: compare rows of one run, and read ``spread``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from streams.bench.engine import nearest_pct, positive_ints

__all__ = ["design", "front", "main", "recommend"]

_LANG = {"hibari": "en", "piper": "en", "kokoro": "zh"}
_PRECISIONS = {"hibari": ("int8", "fp32", "fp16"), "piper": ("fp32", "fp16", "int8"), "kokoro": ("int8", "fp32", "fp16")}
_FIRST = {"en": "Thank you for calling, your order has shipped and should arrive on Thursday afternoon.",
          "zh": "您好，您的快递已经到达小区门口的快递柜，取件码是三六八二。"}  # noqa: RUF001 - Mandarin punctuation


# -- 1. design ------------------------------------------------------------------------

def design(factors: dict[str, Sequence[Any]], max_points: int) -> tuple[str, list[dict[str, Any]]]:
    """(kind, points) over ``factors`` (name -> levels, in order): the full grid when it has at most
    ``max_points`` points, else a Latin square on the first three factors (see the module doc);
    any further factor cycles with ``row + 2 * col``."""
    names = list(factors)
    levels = [list(factors[n]) for n in names]
    grid = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*levels)]
    if len(grid) <= max_points or len(names) < 3:
        return "full", grid
    n = max(len(lv) for lv in levels)
    seen: set[tuple[Any, ...]] = set()
    points: list[dict[str, Any]] = []
    for row in range(n):
        for col in range(n):
            idx = [row, col, row + col, *(row + (k + 1) * col for k in range(1, len(names) - 2))]
            combo = tuple(lv[i % len(lv)] for lv, i in zip(levels, idx, strict=True))
            if combo not in seen:
                seen.add(combo)
                points.append(dict(zip(names, combo, strict=True)))
    return "latin-square", points


# -- 4. the front and the recommendation -------------------------------------------

def front(rows: Sequence[dict[str, Any]], *, speed: str = "audio_s_per_s", error: str = "error") -> list[int]:
    """Indices of the Pareto-optimal rows: no other row is at least as fast and at most as wrong,
    and strictly better in one. Rows without both figures take no part."""
    scored = [(i, r[speed], r[error]) for i, r in enumerate(rows) if r.get(speed) is not None and r.get(error) is not None]
    out = []
    for i, s, e in scored:
        beaten = any(s2 >= s and e2 <= e and (s2 > s or e2 < e) for j, s2, e2 in scored if j != i)
        if not beaten:
            out.append(i)
    return out


def recommend(rows: Sequence[dict[str, Any]], max_error: float) -> int | None:
    """Index of the fastest row whose error is at most ``max_error``; None when no row is."""
    ok = [(r["audio_s_per_s"], i) for i, r in enumerate(rows)
          if r.get("error") is not None and r.get("audio_s_per_s") is not None and r["error"] <= max_error]
    return max(ok)[1] if ok else None


def settings_for(row: dict[str, Any]) -> dict[str, str]:
    """The ``TTS_*`` settings a worker runs a point with (one model lane: the point's threads are its own)."""
    return {"TTS_BACKEND": row["backend"], "TTS_PRECISION": row["precision"], "TTS_MAX_BATCH": str(row["batch"]),
            "TTS_THREADS": str(row["threads"]), "TTS_MODEL_LANES": "1", "TTS_PROVIDERS": row.get("providers", "auto")}


# -- 2./3. one point, one version: run in a child process ---------------------------

def _rss_mib() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def _engine(spec: dict[str, Any]) -> Any:
    from engine.reload import open_engine
    from engine.store import ModelStore
    from streams.settings import load_settings

    settings = load_settings(model_dir=spec.get("model_dir") or None)
    mv = ModelStore(settings.effective_model_dir).ensure(spec["backend"], spec["precision"])
    return open_engine(mv, providers=spec.get("providers", "auto"), threads=spec["threads"], max_batch=spec["batch"])


def _synth(engine: Any, texts: Sequence[str]) -> tuple[float, list[Any]]:
    from engine.base import Audio, SynthItem

    t0 = time.perf_counter()
    out = engine.synthesize([SynthItem(t, "") for t in texts])
    dt = time.perf_counter() - t0
    bad = [o for o in out if not isinstance(o, Audio)]
    if bad:
        raise RuntimeError(f"synthesis failed in the sweep: {bad[0]}")
    return dt, out


def measure_point(spec: dict[str, Any]) -> dict[str, Any]:
    """Speed of one point (in this process): see the module docstring, step 2."""
    from streams.bench.sweep_corpus import CORPORA

    lang = _LANG[spec["backend"]]
    texts = list(CORPORA[lang][: spec["speed_texts"]])
    t0 = time.perf_counter()
    engine = _engine(spec)
    cold = time.perf_counter() - t0
    try:
        firsts = [_synth(engine, [_FIRST[lang]])[0] for _ in range(3)]
        passes, walls = [], []
        for _ in range(spec["repeats"]):
            audio = wall = 0.0
            for k in range(0, len(texts), spec["batch"]):
                dt, out = _synth(engine, texts[k:k + spec["batch"]])
                walls.append(dt)
                wall += dt
                audio += sum(o.duration_s for o in out)
            passes.append(audio / wall)
        provider = engine.info.provider
    finally:
        engine.close()
    med = statistics.median(passes)
    return {"audio_s_per_s": round(med, 2), "rtf": round(1 / med, 5),
            "spread": round((max(passes) - min(passes)) / med, 3), "passes": [round(p, 2) for p in passes],
            "batch_p50_ms": round(statistics.median(walls) * 1e3, 1), "batch_p99_ms": round(nearest_pct(walls, 0.99) * 1e3, 1),
            "first_audio_ms": round(statistics.median(firsts) * 1e3, 1), "cold_start_s": round(cold, 2),
            "peak_rss_mib": _rss_mib(), "provider": provider}


def measure_quality(spec: dict[str, Any]) -> dict[str, Any]:
    """Intelligibility of one backend x precision over its language's 50 sentences (step 3)."""
    from streams.bench.sweep_corpus import CORPORA

    lang = _LANG[spec["backend"]]
    texts = CORPORA[lang][: spec.get("quality_texts", 50)]
    engine = _engine({**spec, "batch": 1, "threads": spec.get("threads", 0)})
    try:
        outs = [_synth(engine, [t])[1][0] for t in texts]
    finally:
        engine.close()
    if lang == "zh":
        from streams.bench import asr_zh

        if not asr_zh.available():
            return {"error": None, "metric": "cer", "why": "Whisper base not installed (extra asr-zh)"}
        err = asr_zh.char_error_many([o.samples for o in outs], outs[0].sample_rate, texts)
        return {"error": round(err, 4), "metric": "cer", "sentences": len(texts)}
    from engine.convert import WordErrorMeter

    if not WordErrorMeter.available():
        return {"error": None, "metric": "wer", "why": "pocketsphinx/jiwer not installed (extra dev)"}
    meter = WordErrorMeter()
    # corpus word error: each sentence's edits (its error x its words) over all reference words
    sizes = [len(t.split()) for t in texts]
    edits = sum(meter.wer(t, o.samples, o.sample_rate) * n for t, o, n in zip(texts, outs, sizes, strict=True))
    return {"error": round(edits / sum(sizes), 4), "metric": "wer", "sentences": len(texts)}


def _child(kind: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its last stdout line is the JSON."""
    cmd = [sys.executable, "-m", "streams.bench.sweep", f"--{kind}", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or "").strip().splitlines()[-3:]
        return {"failed": f"exit {p.returncode}: {' | '.join(tail)[:400]}"}
    return json.loads(lines[-1])


# -- the sweep ------------------------------------------------------------------------

def run(*, backends: Sequence[str], batches: Sequence[int], threads: Sequence[int], precisions: Sequence[str] | None,
        repeats: int, speed_texts: int, quality_texts: int = 50, max_points: int, max_wer: float, max_cer: float, providers: str,
        model_dir: str | None, quality: bool = True, quality_jobs: int = 1, rerun: bool = True, timeout: float = 900,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    started = time.monotonic()
    plan: list[dict[str, Any]] = []
    designs = {}
    for b in backends:
        precs = [p for p in (precisions or _PRECISIONS[b]) if p in _PRECISIONS[b]]
        kind, points = design({"precision": precs, "batch": list(batches), "threads": list(threads)}, max_points)
        designs[b] = {"kind": kind, "factors": {"precision": precs, "batch": list(batches), "threads": list(threads)},
                      "points": len(points)}
        plan += [{"backend": b, **p} for p in points]
    versions = sorted({(p["backend"], p["precision"]) for p in plan})
    total = len(plan) + (len(versions) if quality else 0)
    done = 0
    rows: list[dict[str, Any]] = []

    def progress(what: str) -> None:
        nonlocal done
        done += 1
        el = time.monotonic() - started
        log(f"# sweep {done}/{total} {what}  ({el:.0f} s, ~{el / done * (total - done):.0f} s left)")

    common = {"repeats": repeats, "speed_texts": speed_texts, "providers": providers, "model_dir": model_dir or ""}
    for p in plan:
        row = {**p, "providers": providers, **_child("point", {**p, **common}, timeout)}
        rows.append(row)
        progress(f"{p['backend']} {p['precision']} b={p['batch']} t={p['threads']}: "
                 + (row["failed"] if "failed" in row else
                    f"x{row['audio_s_per_s']} realtime (spread {row['spread']}), first audio {row['first_audio_ms']} ms, "
                    f"rss {row['peak_rss_mib']} MiB"))
    scores: dict[str, dict[str, Any]] = {}
    if quality:  # after every timed point, so scoring several versions at once disturbs no timing
        one_each = quality_jobs > 1
        with ThreadPoolExecutor(max_workers=quality_jobs) as pool:
            jobs = {pool.submit(_child, "quality", {
                "backend": b, "precision": prec, "threads": 1 if one_each else max(threads),
                "quality_texts": quality_texts, **common}, timeout): f"{b}/{prec}" for b, prec in versions}
            for job in as_completed(jobs):
                scores[jobs[job]] = q = job.result()
                progress(f"{jobs[job].replace('/', ' ')} quality: {q}")
        scores = dict(sorted(scores.items()))
    for r in rows:
        q = scores.get(f"{r['backend']}/{r['precision']}", {})
        r["language"] = _LANG[r["backend"]]
        r["error"] = q.get("error")
        r["metric"] = q.get("metric")
        r["quality_from"] = f"{r['backend']}/{r['precision']} over {q.get('sentences', 0)} sentences"
    result: dict[str, Any] = {
        "bench": "sweep", "design": designs, "repeats": repeats, "speed_texts": speed_texts,
        "quality_sentences": quality_texts, "providers": providers,
        "machine": {"cpus": os.cpu_count(), "loadavg_1m_start_end": None, "python": platform.python_version()},
        "results": rows, "quality": scores, "fronts": {}, "recommendations": {},
    }
    for lang, floor in (("en", max_wer), ("zh", max_cer)):
        idx = [i for i, r in enumerate(rows) if r["language"] == lang and "failed" not in r]
        if not idx:
            continue
        sub = [rows[i] for i in idx]
        on_front = [idx[k] for k in front(sub)]
        for i in on_front:
            rows[i]["pareto"] = True
        result["fronts"][lang] = on_front
        k = recommend(sub, floor)
        if k is None:
            result["recommendations"][lang] = {"floor": floor, "none": f"no point has error <= {floor}"}
            continue
        best = sub[k]
        rec: dict[str, Any] = {"floor": floor, "row": idx[k], "settings": settings_for(best),
                               "audio_s_per_s": best["audio_s_per_s"], "error": best["error"]}
        if rerun:
            again = _child("point", {**{f: best[f] for f in ("backend", "precision", "batch", "threads")}, **common}, timeout)
            if "failed" not in again:
                rec["rerun_audio_s_per_s"] = again["audio_s_per_s"]
                rec["rerun_ratio"] = round(again["audio_s_per_s"] / best["audio_s_per_s"], 3)
            else:
                rec["rerun_failed"] = again["failed"]
        result["recommendations"][lang] = rec
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def plot(result: dict[str, Any], path: Path) -> Path:
    """Error against throughput per language, the front joined, the recommendation circled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = [lang for lang in ("en", "zh") if lang in result["fronts"]]
    fig, axes = plt.subplots(1, max(1, len(langs)), figsize=(6.5 * max(1, len(langs)), 4.6), squeeze=False)
    rows = result["results"]
    for ax, lang in zip(axes[0], langs, strict=False):
        pts = [r for r in rows if r["language"] == lang and r.get("error") is not None and "failed" not in r]
        for backend in sorted({r["backend"] for r in pts}):
            mine = [r for r in pts if r["backend"] == backend]
            ax.scatter([r["audio_s_per_s"] for r in mine], [r["error"] for r in mine], label=backend, alpha=0.7)
            for r in mine:
                ax.annotate(f"{r['precision']} b{r['batch']} t{r['threads']}", (r["audio_s_per_s"], r["error"]),
                            fontsize=6, alpha=0.7)
        fr = sorted((rows[i] for i in result["fronts"][lang] if rows[i].get("error") is not None),
                    key=lambda r: r["audio_s_per_s"])
        ax.plot([r["audio_s_per_s"] for r in fr], [r["error"] for r in fr], "k--", lw=1, label="Pareto front")
        rec = result["recommendations"].get(lang, {})
        if "row" in rec:
            r = rows[rec["row"]]
            ax.scatter([r["audio_s_per_s"]], [r["error"]], s=160, facecolors="none", edgecolors="red",
                       label=f"recommended (error <= {rec['floor']})")
            ax.axhline(rec["floor"], color="red", lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("throughput: audio seconds per second (log)")
        ax.set_ylabel("word error" if lang == "en" else "character error")
        ax.set_title(f"{'English' if lang == 'en' else 'Mandarin'}: quality against speed")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pipeline(rec: dict[str, Any], requests: int, timeout: float) -> dict[str, Any]:
    """``ttsflow bench pipeline`` under a recommendation's settings (the local stack must be up)."""
    env = {**os.environ, **rec["settings"]}
    cmd = [sys.executable, "-m", "streams.cli", "bench", "pipeline", "--json", "--requests", str(requests)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"failed": f"exit {p.returncode}: {(p.stderr or '').strip()[-400:]}"}
    return json.loads(lines[-1])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ttsflow bench sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="only the JSON object on stdout (progress always on stderr)")
    p.add_argument("--backend", default="hibari,piper", help="comma separated: hibari, piper, kokoro (default hibari,piper)")
    p.add_argument("--precision", default=None, help="comma separated subset of fp32,fp16,int8 (default: each backend's)")
    p.add_argument("--batch", type=positive_ints, default=[1, 4, 8], help="max batch levels (default 1,4,8)")
    p.add_argument("--threads", type=positive_ints, default=[1, 2], help="engine thread levels (default 1,2)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes per point (default 3)")
    p.add_argument("--speed-texts", type=int, default=16, help="corpus sentences per timed pass (default 16)")
    p.add_argument("--quality-texts", type=int, default=50, help="corpus sentences scored per version (default all 50)")
    p.add_argument("--max-points", type=int, default=9,
                   help="a backend's full grid above this many points becomes a Latin square (default 9: the 3 x 3 x 2 "
                        "grid of precision x batch x threads runs as a 9-point Latin square; 18 runs it whole)")
    p.add_argument("--quality-jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="versions scored at once, one thread each, after the timed points (default: 2 on 2+ cores)")
    p.add_argument("--max-wer", type=float, default=0.10, help="English quality floor for the recommendation")
    p.add_argument("--max-cer", type=float, default=0.10, help="Mandarin quality floor for the recommendation")
    p.add_argument("--providers", default="auto", help="TTS_PROVIDERS for every point (e.g. torch-cuda on a GPU)")
    p.add_argument("--no-quality", action="store_true", help="speed only (no recognizer): rows carry no error, no front")
    p.add_argument("--no-rerun", action="store_true", help="do not run the recommended point again")
    p.add_argument("--quick", action="store_true", help="hibari, int8, batch 1,4, 1 thread, 1 repeat, 4 texts timed and scored: a smoke run")
    p.add_argument("--plot", default="out/bench/sweep.png", help="PNG of the fronts (empty: none)")
    p.add_argument("--pipeline", action="store_true", help="then run `bench pipeline` with each recommendation (stack up)")
    p.add_argument("--pipeline-requests", type=int, default=60, help="--pipeline: requests per run (default 60)")
    p.add_argument("--model-dir", default=None, help="model store (default: TTS_MODEL_DIR or <home>/models)")
    p.add_argument("--point", default=None, help=argparse.SUPPRESS)
    p.add_argument("--quality", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.point or args.quality:
        out = measure_point(json.loads(args.point)) if args.point else measure_quality(json.loads(args.quality))
        print(json.dumps(out), flush=True)
        return 0
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    if not backends or any(b not in _LANG for b in backends):
        p.error(f"unknown backend in {args.backend!r}; expected hibari, piper, kokoro")
    precisions = [x.strip() for x in args.precision.split(",")] if args.precision else None
    if precisions and any(x not in ("fp32", "fp16", "int8") for x in precisions):
        p.error(f"bad --precision {args.precision!r}")
    batches, threads, repeats, texts, scored = args.batch, args.threads, args.repeats, args.speed_texts, args.quality_texts
    if args.quick:
        backends, precisions, batches, threads, repeats, texts, scored = (["hibari"], precisions or ["int8"], [1, 4], [1],
                                                                          1, 4, 4)
    if repeats < 1 or texts < 1 or not 1 <= scored <= 50:
        p.error("--repeats and --speed-texts must be >= 1, --quality-texts 1..50")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    load0 = os.getloadavg()[0]
    result = run(backends=backends, batches=batches, threads=threads, precisions=precisions, repeats=repeats,
                 speed_texts=texts, quality_texts=scored, max_points=args.max_points, max_wer=args.max_wer, max_cer=args.max_cer,
                 providers=args.providers, model_dir=args.model_dir, quality=not args.no_quality,
                 quality_jobs=max(1, args.quality_jobs), rerun=not args.no_rerun, log=log)
    result["machine"]["loadavg_1m_start_end"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    if args.plot and result["fronts"]:
        result["plot"] = str(plot(result, Path(args.plot)))
    if args.pipeline:
        result["pipeline"] = {lang: _pipeline(rec, args.pipeline_requests, 1200)
                              for lang, rec in result["recommendations"].items() if "settings" in rec}
    for lang, rec in result["recommendations"].items():
        if "settings" in rec:
            log(f"# {lang}: fastest point with error <= {rec['floor']}: "
                + " ".join(f"{k}={v}" for k, v in rec["settings"].items())
                + f"  (x{rec['audio_s_per_s']} realtime, error {rec['error']}, rerun x{rec.get('rerun_audio_s_per_s')})")
        else:
            log(f"# {lang}: {rec.get('none')}")
    if not args.json:
        _table(result, log)
    print(json.dumps(result), flush=True)
    failed = [r for r in result["results"] if "failed" in r]
    return 1 if failed and len(failed) == len(result["results"]) else 0


def _table(result: dict[str, Any], log: Callable[[str], None]) -> None:
    log(f"{'backend':7} {'prec':5} {'b':>2} {'t':>2} {'x realtime':>11} {'spread':>7} {'first ms':>9} "
        f"{'rss MiB':>8} {'error':>7}  front")
    for r in result["results"]:
        if "failed" in r:
            log(f"{r['backend']:7} {r['precision']:5} {r['batch']:>2} {r['threads']:>2}  failed: {r['failed']}")
            continue
        log(f"{r['backend']:7} {r['precision']:5} {r['batch']:>2} {r['threads']:>2} {r['audio_s_per_s']:>11} "
            f"{r['spread']:>7} {r['first_audio_ms']:>9} {r['peak_rss_mib']:>8} {r.get('error')!s:>7}  "
            f"{'*' if r.get('pareto') else ''}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
