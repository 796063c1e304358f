"""An offline speech recognizer for intelligibility tests: pocketsphinx + jiwer.

pocketsphinx ships its US English acoustic model, dictionary and a general language model
in its PyPI wheel, so this needs no download. It is a weak recognizer (a human would score
better), which makes the word error it reports an upper bound on how unintelligible the
voice is: garbled or silent audio scores near 1.0, clear speech well under 0.1.

``word_error(audio, sample_rate, reference)`` resamples to 16 kHz, recognizes, normalizes
both texts (lower case, no punctuation, digits spelled out) and returns jiwer's WER.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from streams.bench.asr_text import normalize_text  # shared with the alignment benchmark
from streams.bench.corpus import ASR_SENTENCES as SENTENCES  # the scored sentences live with the corpora

__all__ = ["SENTENCES", "normalize_text", "recognize", "word_error", "word_error_many"]


@functools.lru_cache(maxsize=1)
def _decoder():  # type: ignore[no-untyped-def]
    from pocketsphinx import Decoder

    return Decoder(samprate=16000, loglevel="FATAL")


def _to_16k(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    from engine.audio import resample

    return resample(np.asarray(audio, np.float32), sample_rate, 16000)


def recognize(audio: np.ndarray, sample_rate: int) -> str:
    """The words pocketsphinx hears in float mono audio (any sample rate)."""
    x = _to_16k(audio, sample_rate)
    peak = float(np.max(np.abs(x))) if len(x) else 0.0
    if peak > 0:
        x = x * (0.9 / peak)
    pcm = (np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2")
    # half a second of silence around the speech helps the recognizer's end-pointing
    pad = np.zeros(8000, "<i2")
    d = _decoder()
    d.start_utt()
    d.process_raw(np.concatenate([pad, pcm, pad]).tobytes(), full_utt=True)
    d.end_utt()
    hyp = d.hyp()
    return hyp.hypstr if hyp is not None else ""


def word_error(audio: np.ndarray, sample_rate: int, reference: str) -> float:
    """jiwer word error rate of what the recognizer hears against ``reference``."""
    import jiwer

    ref = normalize_text(reference)
    hyp = normalize_text(recognize(audio, sample_rate))
    if not hyp:
        return 1.0
    return float(jiwer.wer(ref, hyp))


def word_error_many(audios: Sequence[np.ndarray], sample_rate: int, references: Sequence[str]) -> float:
    """Corpus word error: total edits over total reference words (not a mean of ratios)."""
    import jiwer

    refs = [normalize_text(r) for r in references]
    hyps = [normalize_text(recognize(a, sample_rate)) or "<silence>" for a in audios]
    return float(jiwer.wer(refs, hyps))
