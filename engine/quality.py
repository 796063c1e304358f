"""Is a part's audio an answer? A cheap check of synthesized audio against its text. Pure.

A voice that has no phonemes for a text answers with silence or a blip, and the request
would otherwise come back ``ok``. :func:`check_audio` refuses a part when

* it is **near-silent**: no frame reaches ``min_level`` (RMS of the loudest frame sampled,
  default -40 dBFS; speech from every shipped voice peaks 20-30 dB above it), or
* it is **far shorter than its text implies**: fewer voiced seconds than the text's
  spoken characters (letters and digits, :func:`spoken_chars`) at ``max_chars_per_s``
  times the speed. ``max_chars_per_s`` is per voice (:attr:`engine.voices.VoiceInfo.max_chars_per_s`):
  twice the fastest rate measured for that voice, so a part must come out at least half as
  long as the shortest the voice was ever seen to need (numbers and how they were measured
  in :mod:`engine.voices`).

Voiced seconds are the share of frames (``_FRAME`` samples, about 5 ms) whose RMS reaches
``active_level`` (-50 dBFS), times the duration. At most ``_MAX_FRAMES`` frames are
looked at, spread evenly over the part, so the cost is bounded whatever the part's length
(measured: a few microseconds per part, ``python -m engine.quality``).

Returns a :class:`Refusal` (``reason``: ``empty``, ``silent`` or ``too_short``, and a
one-sentence ``message`` for the failed completion), or None when the audio passes.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["ACTIVE_DBFS", "MIN_DBFS", "Refusal", "audio_stats", "check_audio", "spoken_chars"]

MIN_DBFS = -40.0     # the loudest frame must reach this
ACTIVE_DBFS = -50.0  # a frame this loud counts as voiced
_FRAME = 128
_MAX_FRAMES = 64
_NOT_ALNUM = bytes(b for b in range(256) if not (b < 128 and chr(b).isalnum()))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a part's audio is not an answer."""

    reason: str
    message: str


def spoken_chars(text: str) -> int:
    """Letters and digits in ``text``: what the audio's length is held to."""
    if text.isascii():
        return len(text.encode("ascii").translate(None, _NOT_ALNUM))
    return sum(map(str.isalnum, text))


def _db(x: float) -> float:
    return 20.0 * math.log10(x) if x > 0 else -math.inf


def audio_stats(samples: np.ndarray, sample_rate: int, *,
                active_dbfs: float = ACTIVE_DBFS) -> tuple[float, float, float]:
    """``(duration_s, voiced_s, loudest_dbfs)`` of float mono ``samples``, from at most
    ``_MAX_FRAMES`` frames spread evenly over them."""
    n = len(samples)
    if n == 0:
        return 0.0, 0.0, -math.inf
    duration = n / sample_rate
    nf = n // _FRAME
    if nf == 0:
        frames = np.asarray(samples, np.float32)[None, :]
    else:
        frames = np.asarray(samples[: nf * _FRAME]).reshape(nf, _FRAME)[:: max(1, nf // _MAX_FRAMES)]
    width = frames.shape[1]
    energy = np.einsum("ij,ij->i", frames, frames)  # per frame: width * mean square
    loudest = _db(math.sqrt(float(energy.max()) / width))
    voiced = duration * float(np.count_nonzero(energy >= width * 10.0 ** (active_dbfs / 10.0))) / len(energy)
    return duration, voiced, loudest


def check_audio(samples: np.ndarray, sample_rate: int, text: str, *, speed: float = 1.0,
                max_chars_per_s: float, min_dbfs: float = MIN_DBFS,
                active_dbfs: float = ACTIVE_DBFS) -> Refusal | None:
    """None when ``samples`` (float mono in [-1, 1]) can be the audio of ``text``, else why not."""
    if len(samples) == 0:
        return Refusal("empty", "the voice returned no audio")
    duration, voiced, loudest = audio_stats(samples, sample_rate, active_dbfs=active_dbfs)
    if loudest < min_dbfs:
        level = "is all zeros" if math.isinf(loudest) else f"reaches only {loudest:.0f} dBFS (loudest 5 ms)"
        return Refusal("silent", f"near-silent audio: {duration:.2f} s for {len(text)} characters of text "
                       f"{level}, below {min_dbfs:.0f} dBFS; the voice likely cannot speak this text")
    chars = spoken_chars(text)
    need = chars / (max_chars_per_s * speed)
    if voiced < need:
        return Refusal("too_short", f"audio far shorter than its text: {voiced:.2f} s voiced ({duration:.2f} s "
                       f"in all) for {chars} letters and digits, at least {need:.2f} s expected (at most "
                       f"{max_chars_per_s:g} per second at speed {speed:g}); the voice likely skipped text it "
                       "cannot speak")
    return None


def _bench(repeat: int = 20000) -> dict[str, float]:
    """Microseconds per call of :func:`check_audio` on speech-like parts of several lengths."""
    rng = np.random.default_rng(0)
    text = "The quick brown fox jumps over the lazy dog. " * 4
    out: dict[str, float] = {}
    for seconds in (1, 5, 20):
        sr = 24000
        t = np.arange(seconds * sr) / sr
        x = (0.2 * np.sin(2 * np.pi * 150 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) +
             0.01 * rng.standard_normal(len(t))).astype(np.float32)
        check_audio(x, sr, text, max_chars_per_s=40.0)
        t0 = time.perf_counter()
        for _ in range(repeat):
            check_audio(x, sr, text, max_chars_per_s=40.0)
        out[f"us_per_part_{seconds}s"] = round((time.perf_counter() - t0) / repeat * 1e6, 2)
    t0 = time.perf_counter()
    for _ in range(repeat):
        spoken_chars(text)
    out["us_spoken_chars_180_chars"] = round((time.perf_counter() - t0) / repeat * 1e6, 2)
    return out


if __name__ == "__main__":
    json.dump(_bench(), sys.stdout)
    print()
