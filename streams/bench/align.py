"""``ttsflow bench align``: how close a voice's own word timings are to an independent alignment.

Each sentence is synthesized with ``timestamps`` on; the same audio is then aligned by a
recognizer that knows nothing of the voice:

- English (hibari, piper): pocketsphinx's forced alignment of the sentence's words
  (its US English acoustic model, shipped in its wheel);
- Mandarin (kokoro): Whisper base's word times (faster-whisper ``word_timestamps``),
  matched character by character after both sides are normalized.

Reported per voice: the absolute error of each word's start (median, p90, worst, in ms),
its signed median (a constant lead or lag), how far the last word's end is from the
audio's voiced end, and what timing costs: the engine's CPU seconds (and wall seconds) with
``timestamps`` on and off, interleaved in one run (ratios; the machine is shared). One JSON object, last line.
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["english_alignment", "main", "voiced_end_s"]


def _pcm16k(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    from engine.audio import resample

    return np.asarray(resample(np.asarray(samples, np.float32), sample_rate, 16000), np.float32)


def voiced_end_s(samples: np.ndarray, sample_rate: int, floor_db: float = -40.0) -> float:
    """End of the last 10 ms frame whose energy is within ``floor_db`` of the loudest frame."""
    hop = max(1, sample_rate // 100)
    n = len(samples) // hop
    if n == 0:
        return 0.0
    rms = np.sqrt(np.mean(np.asarray(samples[: n * hop], np.float64).reshape(n, hop) ** 2, axis=1)) + 1e-12
    db = 20 * np.log10(rms / rms.max())
    loud = np.nonzero(db > floor_db)[0]
    return float((loud[-1] + 1) * hop / sample_rate) if len(loud) else 0.0


def english_alignment(samples: np.ndarray, sample_rate: int, words: Sequence[str]) -> list[tuple[str, float, float]]:
    """pocketsphinx's forced alignment of ``words`` (normalized, lower case) in the audio:
    ``(word, start_s, end_s)`` in order, silences and fillers left out."""
    from pocketsphinx import Decoder

    pcm = (np.clip(_pcm16k(samples, sample_rate), -1, 1) * 32767).astype("<i2").tobytes()
    d = Decoder(samprate=16000, loglevel="FATAL")
    d.set_align_text(" ".join(words))
    d.start_utt()
    d.process_raw(pcm, full_utt=True)
    d.end_utt()
    out = []
    for seg in d.seg():
        w = seg.word.split("(")[0]
        if w.startswith("<") or w.startswith("[") or w == "(NULL)":
            continue
        out.append((w, seg.start_frame / 100.0, (seg.end_frame + 1) / 100.0))
    return out


def _english_errors(audio: Any, sentence: str) -> list[float]:
    """Signed start errors (ours - pocketsphinx), seconds, one per written word it could match."""
    from streams.bench.asr_text import normalize_text

    ours = [(w, normalize_text(w.text).split()) for w in audio.words]
    flat = [x for _, ws in ours for x in ws]
    ref = english_alignment(audio.samples, audio.sample_rate, flat)
    if [r[0] for r in ref] != flat:  # the aligner gave up or skipped words: compare nothing rather than guess
        return []
    errs, k = [], 0
    for w, spoken in ours:
        if spoken:
            errs.append(w.start_s - ref[k][1])
        k += len(spoken)
    return errs


def _mandarin_errors(audio: Any, sentence: str) -> list[float]:
    """Signed start errors against Whisper's word times, matched on normalized characters."""
    from streams.bench.asr_zh import _model, _t2s, normalize_zh_text

    x = _pcm16k(audio.samples, audio.sample_rate)
    segments, _ = _model().transcribe(x, language="zh", beam_size=1, vad_filter=False,
                                      condition_on_previous_text=False, word_timestamps=True)
    heard: list[tuple[str, float]] = []  # (character, its start): a word's time goes to its first character
    for seg in segments:
        for w in seg.words or []:
            chars = normalize_zh_text(str(_t2s().convert(w.word)))
            step = (w.end - w.start) / max(1, len(chars))
            heard += [(c, w.start + i * step) for i, c in enumerate(chars)]
    mine: list[tuple[str, int]] = []  # (character, index of our word whose first character it is or -1)
    for k, w in enumerate(audio.words):
        chars = normalize_zh_text(w.text)
        mine += [(c, k if i == 0 else -1) for i, c in enumerate(chars)]
    sm = difflib.SequenceMatcher(None, [c for c, _ in mine], [c for c, _ in heard], autojunk=False)
    errs = []
    for a, b, size in sm.get_matching_blocks():
        for i in range(size):
            k = mine[a + i][1]
            if k >= 0:
                errs.append(audio.words[k].start_s - heard[b + i][1])
    return errs


def _stats_ms(errs: Sequence[float]) -> dict[str, float | int | None]:
    if not errs:
        return {"n": 0, "median_ms": None, "p90_ms": None, "worst_ms": None, "bias_ms": None}
    a = np.abs(np.asarray(errs)) * 1000
    return {"n": len(errs), "median_ms": round(float(np.median(a)), 1), "p90_ms": round(float(np.percentile(a, 90)), 1),
            "worst_ms": round(float(a.max()), 1), "bias_ms": round(float(np.median(errs)) * 1000, 1)}


def run(backend: str, *, model_path: str | None, speed: float, repeats: int, threads: int,
        limit: int | None = None) -> dict[str, Any]:
    from engine import Audio, SynthItem, load_engine

    engine = load_engine(backend, model_path=model_path, threads=threads)
    voice = engine.default_voice
    if backend == "kokoro":
        from streams.bench.asr_zh import SENTENCES as ZH

        sentences, errors_of, aligner = list(ZH), _mandarin_errors, "whisper-base word_timestamps (faster-whisper)"
    else:
        from streams.bench.corpus import ASR_SENTENCES

        sentences, errors_of, aligner = list(ASR_SENTENCES), _english_errors, "pocketsphinx forced alignment"
    sentences = sentences[:limit] if limit else sentences
    errs: list[float] = []
    end_gaps: list[float] = []
    words = compared_sentences = 0
    for s in sentences:
        a = engine.synthesize([SynthItem(s, voice, speed, True)])[0]
        assert isinstance(a, Audio) and a.words is not None, a
        words += len(a.words)
        e = errors_of(a, s)
        if e:
            compared_sentences += 1
            errs += e
        end_gaps.append(abs(a.words[-1].end_s - voiced_end_s(a.samples, a.sample_rate)))
    # what timing costs the engine: the same items with and without, interleaved, in CPU seconds of
    # this process (the engine's threads run in it) and in wall seconds (noisy on a shared machine)
    cpu = {False: 0.0, True: 0.0}
    wall = {False: 0.0, True: 0.0}
    for _ in range(repeats):
        for flag in (False, True):
            c0, t0 = time.process_time(), time.perf_counter()
            engine.synthesize([SynthItem(s, voice, speed, flag) for s in sentences])
            cpu[flag] += time.process_time() - c0
            wall[flag] += time.perf_counter() - t0
    engine.close()
    return {"bench": "align", "backend": backend, "voice": voice, "precision": engine.info.precision,
            "speed": speed, "aligner": aligner, "sentences": len(sentences), "sentences_compared": compared_sentences,
            "words": words, "start_error": _stats_ms(errs),
            "last_word_end_vs_voiced_end_ms": {"median": round(statistics.median(end_gaps) * 1000, 1),
                                               "worst": round(max(end_gaps) * 1000, 1)},
            "engine_cpu_seconds": {"timestamps_off": round(cpu[False], 3), "timestamps_on": round(cpu[True], 3),
                                   "cost_ratio": round(cpu[True] / cpu[False] - 1.0, 4) if cpu[False] > 0 else None},
            "engine_wall_seconds": {"timestamps_off": round(wall[False], 3), "timestamps_on": round(wall[True], 3),
                                    "cost_ratio": round(wall[True] / wall[False] - 1.0, 4) if wall[False] > 0 else None},
            "repeats": repeats,
            "date": time.strftime("%Y-%m-%d")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench align", description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("hibari", "piper", "kokoro"), default="hibari")
    ap.add_argument("--model-path", default=None, help="an ONNX file (kokoro: the store's model.onnx)")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2, help="passes of the with/without timing cost")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences of the corpus")
    ap.add_argument("--json", action="store_true", help="accepted for symmetry; the output is always JSON")
    args = ap.parse_args(argv)
    out = run(args.backend, model_path=args.model_path, speed=args.speed, repeats=args.repeats, threads=args.threads,
              limit=args.limit)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
