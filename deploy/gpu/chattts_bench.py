#!/usr/bin/env python3
"""ChatTTS engine benchmark with the user's own weights (FP16 vs FP32 on CUDA, batch sizes).

ChatTTS's weights are CC BY-NC 4.0 and never shipped or downloaded: point
``TTS_CHATTTS_ASSET_DIR`` (or ``--assets``) at a local copy (the folder holding
``asset/gpt``, ``asset/tokenizer`` and the ``*.safetensors``). Needs the ``chattts``
extra (``pip install -e '.[chattts]'``: torch with its CUDA wheels, chattts 0.2.5, AGPL-3.0)::

    TTS_CHATTTS_ASSET_DIR=/data/chattts python deploy/gpu/chattts_bench.py            # cuda, fp16 and fp32
    python deploy/gpu/chattts_bench.py --tiny --device cpu --batch 1,4 --runs 2         # smoke run, no weights

``--tiny`` builds random-weight assets with ChatTTS's architecture (``make_tiny_assets``):
the numbers then only show that the path works.

For each precision it loads the backend (cold start = load + one warm-up sentence), then
for each batch size times ``Engine.synthesize`` on ``--runs`` batches of the corpus
sentences. Per row: ``rtf`` (median compute s / audio s), ``audio_s_per_s``,
``batch_p50_ms``, ``batch_p99_ms``, ``generate_calls_per_batch`` (must be 1: the batch is
one padded ``generate``), ``tokens_capped`` (items that hit ``--max-new-token``), and on
CUDA ``gpu_mem_peak_mib`` (``torch.cuda.max_memory_allocated``). The last line of stdout
is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CORPUS = (
    "The morning train to the coast was delayed by twenty minutes, so most of us waited on the cold platform.",
    "Please remember to bring your passport and two forms of identification to the appointment.",
    "Scientists announced that the new telescope had captured clear images of a distant galaxy.",
    "If the weather stays calm tonight, we will walk down to the harbor and watch the boats come in.",
    "She opened the old wooden box and found a bundle of letters tied with a faded ribbon.",
    "Our support team is available every day from eight in the morning until ten at night.",
    "The committee will review each proposal carefully and publish its decision next month.",
    "After the storm had passed, the children ran outside to splash in the puddles.",
)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def bench(assets: Path, *, device: str, precisions: list[str], batches: list[int], runs: int, max_new_token: int,
          threads: int, speaker: str, seed: int, log: Any = print) -> dict[str, Any]:
    import torch

    from engine.base import Audio, SynthItem
    from engine.chattts import chattts_version
    from engine.registry import load_engine

    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for prec in precisions:
        cuda = torch.cuda.is_available() and device != "cpu"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            engine = load_engine("chattts", model_path=assets, precision=prec, providers="auto", threads=threads,
                                 max_batch=max(batches),
                                 backend_options={"device": device, "max_new_token": max_new_token, "seed": seed,
                                                  "speaker": speaker})
        except Exception as e:  # a precision the device cannot run is reported, not fatal
            skipped.append({"precision": prec, "reason": str(e)})
            log(f"# chattts {prec}: skipped ({e})")
            continue
        be = engine.backend
        log(f"# chattts {engine.info.version} {engine.info.precision} on {engine.info.provider}: "
            f"cold start {engine.cold_start_s:.2f} s")
        try:
            for batch in batches:
                rtfs: list[float] = []
                walls: list[float] = []
                audio_total, capped = 0.0, 0
                calls0 = be.generate_calls  # type: ignore[attr-defined]
                for r in range(runs):
                    texts = [CORPUS[(r * batch + k) % len(CORPUS)] for k in range(batch)]
                    if cuda:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    out = engine.synthesize([SynthItem(t, "") for t in texts])
                    if cuda:
                        torch.cuda.synchronize()
                    dt = time.perf_counter() - t0
                    bad = [o for o in out if not isinstance(o, Audio)]
                    if bad:
                        raise RuntimeError(f"synthesis failed: {bad[0]}")
                    audio = sum(o.duration_s for o in out if isinstance(o, Audio))
                    cap_s = (max_new_token - 1) * 512 / 24_000
                    capped += sum(1 for o in out if isinstance(o, Audio) and o.duration_s >= cap_s)
                    rtfs.append(dt / audio)
                    walls.append(dt)
                    audio_total += audio
                calls = be.generate_calls - calls0  # type: ignore[attr-defined]
                row = {"precision": engine.info.precision, "provider": engine.info.provider, "batch": batch,
                       "runs": runs, "rtf": round(statistics.median(rtfs), 4),
                       "audio_s_per_s": round(audio_total / sum(walls), 2),
                       "batch_p50_ms": round(statistics.median(walls) * 1e3, 1),
                       "batch_p99_ms": round(_pct(walls, 0.99) * 1e3, 1),
                       "generate_calls_per_batch": round(calls / runs, 2), "tokens_capped": int(capped),
                       "cold_start_s": round(engine.cold_start_s or 0.0, 2), "version": engine.info.version}
                if cuda:
                    row["gpu_mem_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
                rows.append(row)
                log(f"  {row['precision']} b={batch:<2} rtf={row['rtf']:.4f} x{row['audio_s_per_s']:>6.1f} realtime "
                    f"p50={row['batch_p50_ms']:>8.1f} ms generate/batch={row['generate_calls_per_batch']}"
                    + (f" mem={row['gpu_mem_peak_mib']} MiB" if cuda else ""))
        finally:
            be.close()
            del engine, be
    speedup = {}
    base = {r["batch"]: r["rtf"] for r in rows if r["precision"] == "fp32"}
    for row in rows:
        if row["precision"] == "fp16" and row["batch"] in base:
            speedup[f"fp16/b{row['batch']}"] = round(base[row["batch"]] / row["rtf"], 3)
    import torch as _t

    return {"bench": "chattts", "torch": _t.__version__, "cuda": _t.version.cuda,
            "gpu": _t.cuda.get_device_name(0) if _t.cuda.is_available() else None, "chattts": chattts_version(),
            "machine": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
                        "python": platform.python_version()},
            "max_new_token": max_new_token, "results": rows, "skipped": skipped, "fp16_speedup_vs_fp32": speedup}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--assets", default=None, help="ChatTTS asset dir (default: TTS_CHATTTS_ASSET_DIR)")
    p.add_argument("--tiny", action="store_true", help="build tiny random-weight assets in a temp dir (smoke run)")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--precision", default=None, help="comma separated fp16,fp32 (default: fp16,fp32 on CUDA, fp32 on CPU)")
    p.add_argument("--batch", default="1,4,8,16", help="batch sizes")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--max-new-token", type=int, default=None, help="audio token cap per item (default 2048; 32 with --tiny)")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)

    from streams.settings import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"chattts_bench: {e}", file=sys.stderr)
        return 2
    try:
        batches = [int(x) for x in args.batch.split(",") if x.strip()]
    except ValueError:
        p.error(f"bad --batch {args.batch!r}")
    try:
        import torch
    except ImportError:
        print("chattts_bench: the chattts extra is not installed: pip install -e '.[chattts]'", file=sys.stderr)
        return 2
    on_cuda = args.device != "cpu" and torch.cuda.is_available()
    precisions = args.precision.split(",") if args.precision else (["fp16", "fp32"] if on_cuda else ["fp32"])
    out = sys.stderr

    def log(line: str) -> None:
        print(line, file=out, flush=True)

    with tempfile.TemporaryDirectory(prefix="chattts-tiny-") as tmp:
        if args.tiny:
            from engine.chattts import make_tiny_assets

            assets = make_tiny_assets(Path(tmp))
            max_new = args.max_new_token or 32
        else:
            assets_s = args.assets or settings.engine.chattts_asset_dir
            if not assets_s:
                print("chattts_bench: no weights: set TTS_CHATTTS_ASSET_DIR (or --assets DIR) to a local ChatTTS "
                      "asset dir, or use --tiny for a smoke run", file=sys.stderr)
                return 2
            assets = Path(assets_s)
            max_new = args.max_new_token or 2048
        result = bench(assets, device=args.device, precisions=precisions, batches=batches, runs=max(1, args.runs),
                       max_new_token=max_new, threads=args.threads, speaker=settings.engine.chattts_speaker,
                       seed=settings.engine.chattts_seed, log=log)
    result["tiny"] = bool(args.tiny)
    print(json.dumps(result), flush=True)
    return 0 if result["results"] else 1


if __name__ == "__main__":
    sys.exit(main())
