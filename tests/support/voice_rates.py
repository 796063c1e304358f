"""Measure a voice's speaking rate and loudness on an English corpus; print JSON.

``python -m tests.support.voice_rates --backend hibari [--corpus asr|bench]`` synthesizes
every sentence (``asr``: :data:`tests.support.asr.SENTENCES`, the tests' held-out corpus;
``bench``: 24 sentences of :func:`streams.bench.corpus.sentences`, seed 1) at speed 1 and prints,
per voice, the spoken characters (letters and digits) per second of audio and per voiced
second (:func:`engine.quality.audio_stats`), min / median / max, the quietest loudest-frame
level, and what :func:`engine.quality.check_audio` says of every part with the voice's
registered threshold (:data:`engine.voices.VOICES`). These numbers are where the
thresholds in ``engine/voices.py`` come from.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from engine import Audio, SynthItem, load_engine
from engine.quality import audio_stats, check_audio, spoken_chars
from engine.voices import voice_info


def _corpus(name: str) -> list[str]:
    if name == "asr":
        from tests.support.asr import SENTENCES

        return list(SENTENCES)
    from streams.bench.corpus import sentences

    it = sentences(1)
    return [next(it) for _ in range(24)]


def measure(backend: str, corpus: str) -> dict[str, object]:
    engine = load_engine(backend, threads=1)
    voice = engine.backend.default_voice
    info = voice_info(voice)
    texts = _corpus(corpus)
    rows = []
    refused = []
    for text, out in zip(texts, engine.synthesize([SynthItem(t, voice) for t in texts]), strict=True):
        assert isinstance(out, Audio), out
        dur, voiced, loud = audio_stats(out.samples, out.sample_rate)
        n = spoken_chars(text)
        rows.append({"chars": n, "duration_s": round(dur, 3), "voiced_s": round(voiced, 3),
                     "chars_per_s": round(n / dur, 2), "chars_per_voiced_s": round(n / voiced, 2),
                     "loudest_dbfs": round(loud, 1)})
        if info is not None:
            why = check_audio(out.samples, out.sample_rate, text, max_chars_per_s=info.max_chars_per_s)
            if why is not None:
                refused.append({"text": text, "why": why.message})
    engine.close()

    def summary(key: str) -> dict[str, float]:
        vals = [float(r[key]) for r in rows]  # type: ignore[arg-type]
        return {"min": min(vals), "median": round(statistics.median(vals), 2), "max": max(vals)}

    return {"backend": backend, "voice": voice, "corpus": corpus, "parts": len(rows),
            "chars_per_s": summary("chars_per_s"), "chars_per_voiced_s": summary("chars_per_voiced_s"),
            "loudest_dbfs": summary("loudest_dbfs"),
            "registered_max_chars_per_s": info.max_chars_per_s if info else None,
            "refused": refused, "false_refusal_rate": len(refused) / len(rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--backend", action="append", default=None)
    ap.add_argument("--corpus", choices=("asr", "bench"), default="asr")
    ns = ap.parse_args(argv)
    for b in ns.backend or ["hibari", "piper"]:
        json.dump(measure(b, ns.corpus), sys.stdout)
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
