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
import re
from collections.abc import Sequence

import numpy as np

from streams.bench.corpus import ASR_SENTENCES as SENTENCES  # the scored sentences live with the corpora

__all__ = ["SENTENCES", "normalize_text", "recognize", "word_error", "word_error_many"]


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _number_words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + _number_words(rest))
    if n < 1_000_000:
        rest = n % 1000
        return _number_words(n // 1000) + " thousand" + ("" if rest == 0 else " " + _number_words(rest))
    return " ".join(_ONES[int(d)] for d in str(n))


def normalize_text(text: str) -> str:
    """Lower case, digits as words, apostrophes kept inside words, other punctuation gone."""
    t = text.lower().replace("\u2019", "'")
    t = re.sub(r"\d+", lambda m: f" {_number_words(int(m.group()))} ", t.replace(",", " "))
    t = re.sub(r"[^a-z' ]+", " ", t)
    t = re.sub(r"(?<![a-z])'|'(?![a-z])", " ", t)
    return " ".join(t.split())


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
