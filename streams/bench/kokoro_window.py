# ruff: noqa: RUF001 - Chinese punctuation is the subject here
"""``python -m streams.bench.kokoro_window --json``: would decoding only Kokoro's voiced frames keep its voice?

A tried-and-dropped idea for issue 26's Mandarin first chunk, kept as a measurement. Kokoro's graph is
split (``onnx.utils.Extractor``) at the tensors its decoder reads (the aligned text features, F0 and
energy curves: 600 samples a frame) into a front (text encoder, duration and prosody predictors) and
the decoder. For each text the decoder runs twice: on every frame (which gives the whole graph's
samples exactly), and on a window from ``--lead`` frames before the leading pad's end to ``--tail``
frames into the longest of the last four tokens (the held final phoneme), the samples outside it
zero, as the edge silence is in the whole decode's output (< -130 dB). Printed: the front's and the
decoder's share of a call, the window's decoder time against the whole's, and Whisper base's
character error of both (:mod:`streams.bench.asr_zh`) on the corpus's 24 Mandarin sentences and on
their first clauses (a streaming request's first segment).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "run_bench"]

_ASR, _F0, _N = "/encoder/MatMul_1_output_0", "/encoder/Reshape_output_0", "/encoder/Reshape_1_output_0"
_FRAME = 600  # samples of audio per aligned frame (24 kHz)


def _split(timed: Path, into: Path, durations: str) -> tuple[Path, Path]:
    import onnx
    import onnx.utils

    ex = onnx.utils.Extractor(onnx.load(str(timed)))
    front, dec = into / "front.onnx", into / "decoder.onnx"
    onnx.save(ex.extract_model(["tokens", "style", "speed"], [_ASR, _F0, _N, durations]), str(front))
    onnx.save(ex.extract_model([_ASR, _F0, _N, "style"], ["audio"]), str(dec))
    return front, dec


def run_bench(*, lead: int = 10, tail: int = 18, voice: str = "zf_xiaobei", threads: int = 2) -> dict[str, Any]:
    from engine.base import SynthItem
    from engine.kokoro import KokoroBackend, ref_style
    from engine.providers import make_session
    from engine.store import ModelStore
    from engine.timed_graph import timed_graph
    from streams.bench import asr_zh
    from streams.settings import load_settings

    model = ModelStore(load_settings().effective_model_dir).current("kokoro").onnx_path
    backend = KokoroBackend(model, threads=1, solo=False)
    timed = timed_graph(model, None)
    assert isinstance(timed.model, Path) and timed.durations is not None

    def session(path: Path) -> Any:
        return make_session(path, providers="CPUExecutionProvider", threads=threads, name="kokoro-window")[0]

    with tempfile.TemporaryDirectory(prefix="ttsflow-window-") as tmp:
        front_path, dec_path = _split(timed.model, Path(tmp), timed.durations)
        whole, front, dec = session(timed.model), session(front_path), session(dec_path)

    def decode(f: list[np.ndarray], ref: np.ndarray, a: int, b: int) -> np.ndarray:
        asr, f0, n = f[0], f[1], f[2]
        return dec.run(None, {_ASR: np.ascontiguousarray(asr[:, :, a:b]), _F0: np.ascontiguousarray(f0[:, 2 * a:2 * b]),
                              _N: np.ascontiguousarray(n[:, 2 * a:2 * b]), "style": ref})[0].reshape(-1)

    clauses = [s.split("，")[0] + "，" for s in asr_zh.SENTENCES if "，" in s]
    out: dict[str, Any] = {"lead_frames": lead, "tail_frames": tail, "threads": threads, "voice": voice,
                           "model": str(model)}
    t = {"whole": 0.0, "front": 0.0, "decoder": 0.0, "window": 0.0}
    same = True
    for name, texts in (("sentences", list(asr_zh.SENTENCES)), ("first_clauses", clauses)):
        full_audio, window_audio, frames, kept = [], [], 0, 0
        for text in texts:
            prepared = backend.prepare(SynthItem(text=text, voice=voice))
            fa, wa = [], []
            for ids in prepared.payload:
                ref = ref_style(backend.style(voice), ids)
                feeds = {"tokens": ids[None, :], "style": ref, "speed": np.asarray([1.0], np.float32)}
                t0 = time.perf_counter()
                w = np.asarray(whole.run(None, feeds)[0]).reshape(-1)
                t1 = time.perf_counter()
                f = front.run(None, feeds)
                t2 = time.perf_counter()
                full = decode(f, ref, 0, f[0].shape[2])
                t3 = time.perf_counter()
                dur = np.asarray(f[3]).reshape(-1)
                starts = np.concatenate([[0], np.cumsum(dur)])
                last = len(dur) - 1 - int(np.argmax(dur[::-1][:4]))
                a, b = max(0, int(dur[0]) - lead), min(f[0].shape[2], int(starts[last]) + tail)
                part = decode(f, ref, a, b)
                t4 = time.perf_counter()
                t["whole"] += t1 - t0
                t["front"] += t2 - t1
                t["decoder"] += t3 - t2
                t["window"] += t4 - t3
                same = same and bool(np.array_equal(full, w))
                y = np.zeros_like(full)
                y[a * _FRAME:b * _FRAME] = part
                fa.append(full)
                wa.append(y)
                frames += f[0].shape[2]
                kept += b - a
            full_audio.append(np.concatenate(fa))
            window_audio.append(np.concatenate(wa))
        out[name] = {"n": len(texts), "frames": frames, "window_frames": kept,
                     "cer_whole": round(asr_zh.char_error_many(full_audio, 24_000, texts), 4),
                     "cer_window": round(asr_zh.char_error_many(window_audio, 24_000, texts), 4)}
    out["split_equals_whole_graph"] = same
    out["front_share"] = round(t["front"] / t["whole"], 3)
    out["decoder_share"] = round(t["decoder"] / t["whole"], 3)
    out["window_decoder_time_ratio"] = round(t["window"] / t["decoder"], 3)
    out["seconds"] = {k: round(v, 2) for k, v in t.items()}
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m streams.bench.kokoro_window", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    ap.add_argument("--lead", type=int, default=10, help="frames decoded before the leading pad's end")
    ap.add_argument("--tail", type=int, default=18, help="frames decoded into the held final phoneme")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    r = run_bench(lead=a.lead, tail=a.tail, threads=a.threads)
    if not a.json:
        print(json.dumps(r, indent=1), file=sys.stderr)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
