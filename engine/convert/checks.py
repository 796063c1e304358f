"""Does a converted voice still sound like its fp32 graph? Measured on spoken sentences.

``check_against`` speaks :data:`CHECK_SENTENCES` with two engines and ``compare`` puts
numbers on each pair: length ratio, correlation of the waveforms and of their spectral
envelopes (phase-blind, tolerant of a frame or two of drift), and, when pocketsphinx and
jiwer are installed, word error of both. It reports; it never decides pass or fail.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import ConversionError

__all__ = ["CHECK_SENTENCES", "Comparison", "WordErrorMeter", "check_against", "compare", "summarize"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One sentence, candidate vs reference audio."""

    text: str
    length_ratio: float
    waveform_corr: float
    envelope_corr: float
    wer_reference: float | None = None
    wer_candidate: float | None = None


def _band_envelope(x: np.ndarray, sr: int, bands: int = 40) -> np.ndarray:
    """Log energy in ``bands`` linear-in-mel bands per 20 ms frame: phase-blind."""
    n_fft = 1 << max(8, int(np.ceil(np.log2(0.04 * sr))))
    hop = max(1, int(0.02 * sr))
    if len(x) < n_fft:
        x = np.pad(x, (0, n_fft - len(x)))
    frames = np.lib.stride_tricks.sliding_window_view(x.astype(np.float32), n_fft)[::hop]
    spec = np.abs(np.fft.rfft(frames * np.hanning(n_fft).astype(np.float32), axis=1)) ** 2
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    mel = 2595.0 * np.log10(1.0 + freqs / 700.0)
    edges = np.linspace(mel[1], mel[-1], bands + 1)
    idx = np.clip(np.searchsorted(edges, mel) - 1, 0, bands - 1)
    env = np.zeros((spec.shape[0], bands), np.float64)
    for b in range(bands):
        sel = idx == b
        if sel.any():
            env[:, b] = spec[:, sel].sum(axis=1)
    return np.log(env + 1e-8)


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a = a.ravel().astype(np.float64) - a.mean()
    b = b.ravel().astype(np.float64) - b.mean()
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else 0.0


def _stretch(env: np.ndarray, frames: int) -> np.ndarray:
    """Linearly time-stretch an envelope to ``frames`` rows (durations may drift a frame or two)."""
    if len(env) == frames:
        return env
    src = np.linspace(0.0, 1.0, len(env))
    dst = np.linspace(0.0, 1.0, frames)
    return np.stack([np.interp(dst, src, env[:, b]) for b in range(env.shape[1])], axis=1)


def compare(text: str, reference: np.ndarray, candidate: np.ndarray, sample_rate: int) -> Comparison:
    """Length ratio, waveform correlation (over the common length) and envelope correlation."""
    n = min(len(reference), len(candidate))
    ratio = len(candidate) / len(reference) if len(reference) else float("inf")
    wave = _corr(reference[:n], candidate[:n]) if n else 0.0
    er = _band_envelope(reference, sample_rate)
    ec = _stretch(_band_envelope(candidate, sample_rate), len(er))
    return Comparison(text=text, length_ratio=round(ratio, 4), waveform_corr=round(wave, 4),
                      envelope_corr=round(_corr(er, ec), 4))


def summarize(rows: Sequence[Comparison]) -> dict[str, Any]:
    """Worst and mean numbers over the sentences, the lines a person reads first."""
    if not rows:
        return {}
    out: dict[str, Any] = {
        "sentences": len(rows),
        "length_ratio_min": min(r.length_ratio for r in rows),
        "length_ratio_max": max(r.length_ratio for r in rows),
        "waveform_corr_mean": round(float(np.mean([r.waveform_corr for r in rows])), 4),
        "envelope_corr_min": min(r.envelope_corr for r in rows),
        "envelope_corr_mean": round(float(np.mean([r.envelope_corr for r in rows])), 4),
    }
    if all(r.wer_candidate is not None for r in rows):
        out["wer_reference"] = round(float(np.mean([r.wer_reference for r in rows])), 4)  # type: ignore[arg-type]
        out["wer_candidate"] = round(float(np.mean([r.wer_candidate for r in rows])), 4)  # type: ignore[arg-type]
    return out


def _words(text: str) -> list[str]:
    import re

    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()


class WordErrorMeter:
    """Offline word error with pocketsphinx (its en-US model ships on PyPI) and jiwer.

    Optional: ``available()`` is False when either package is missing (they are in the
    ``dev`` extra), and callers report no word error rather than fail.
    """

    def __init__(self) -> None:
        self._decoder: Any = None

    @staticmethod
    def available() -> bool:
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in ("pocketsphinx", "jiwer"))

    def transcribe(self, samples: np.ndarray, sample_rate: int) -> str:
        from engine.audio import resample

        if self._decoder is None:
            from pocketsphinx import Decoder

            self._decoder = Decoder(samprate=16000, logfn=os.devnull)
        x = resample(np.asarray(samples, np.float32), sample_rate, 16000)
        pcm = (np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        d = self._decoder
        d.start_utt()
        d.process_raw(pcm, full_utt=True)
        d.end_utt()
        hyp = d.hyp()
        return hyp.hypstr if hyp is not None else ""

    def wer(self, text: str, samples: np.ndarray, sample_rate: int) -> float:
        import jiwer

        ref = " ".join(_words(text))
        hyp = " ".join(_words(self.transcribe(samples, sample_rate)))
        if not hyp:
            return 1.0
        return float(jiwer.wer(ref, hyp))


CHECK_SENTENCES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog near the river bank this morning.",
    "Please remember to bring your passport and two forms of identification to the appointment.",
    "Scientists announced on Tuesday that the new telescope had captured images of a distant galaxy.",
    "If the weather stays clear tonight, we will walk down to the harbor and watch the boats come in.",
)


def check_against(reference: Any, candidate: Any, sentences: Sequence[str] = CHECK_SENTENCES,
                  *, wer: bool = True) -> list[Comparison]:
    """Speak ``sentences`` with two engines (anything with ``synthesize(items)``) and compare.

    ``reference`` is normally the fp32 graph. A sentence either engine fails on raises
    ``ConversionError`` naming it. Word error is added when pocketsphinx is installed.
    """
    from engine.base import Audio, SynthItem

    items = [SynthItem(s, "") for s in sentences]
    ref = reference.synthesize(items)
    cand = candidate.synthesize(items)
    meter = WordErrorMeter() if wer and WordErrorMeter.available() else None
    rows: list[Comparison] = []
    for s, a, b in zip(sentences, ref, cand, strict=True):
        if not isinstance(a, Audio) or not isinstance(b, Audio):
            bad = a if not isinstance(a, Audio) else b
            raise ConversionError(f"check sentence failed ({bad}): {s!r}")
        row = compare(s, a.samples, b.samples, a.sample_rate)
        if meter is not None:
            row = Comparison(row.text, row.length_ratio, row.waveform_corr, row.envelope_corr,
                             round(meter.wer(s, a.samples, a.sample_rate), 4),
                             round(meter.wer(s, b.samples, b.sample_rate), 4))
        rows.append(row)
    return rows
