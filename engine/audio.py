"""Audio arrays to bytes and back: encoding, resampling, joining segments.

Guarantees: ``encode`` takes float32 mono samples in [-1, 1] (values outside are clipped)
and returns a complete file (``wav`` = 16-bit PCM, ``flac`` = 16-bit, ``ogg`` = Vorbis);
``decode`` reads any of them back as float32 mono. ``resample`` is band-limited (FFT
based) and keeps the duration to the nearest sample. ``join`` puts segments together
with short fades at every edge and a pause between them, so a join never clicks.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

from engine.errors import ItemError

__all__ = ["FORMATS", "content_type", "decode", "encode", "join", "resample"]

# format -> (soundfile format, subtype, MIME type)
_FORMATS: dict[str, tuple[str, str, str]] = {
    "wav": ("WAV", "PCM_16", "audio/wav"),
    "flac": ("FLAC", "PCM_16", "audio/flac"),
    "ogg": ("OGG", "VORBIS", "audio/ogg"),
}
FORMATS: tuple[str, ...] = tuple(_FORMATS)


def content_type(fmt: str) -> str:
    """The MIME type of an encoded format (``audio/wav``...)."""
    return _FORMATS[_check_format(fmt)][2]


def _check_format(fmt: str) -> str:
    f = fmt.lower().lstrip(".")
    if f not in _FORMATS:
        raise ItemError(f"unsupported audio format {fmt!r}; use one of {', '.join(FORMATS)}")
    return f


def _mono_float(samples: np.ndarray) -> np.ndarray:
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim == 2:
        x = x.mean(axis=1, dtype=np.float32)
    return x


def encode(samples: np.ndarray, sample_rate: int, fmt: str = "wav") -> bytes:
    """Float mono samples -> the bytes of a ``wav``, ``flac`` or ``ogg`` file."""
    import soundfile as sf

    f = _check_format(fmt)
    x = np.clip(_mono_float(samples), -1.0, 1.0)
    if f == "ogg" and len(x) == 0:
        x = np.zeros(1, np.float32)  # libvorbis cannot write an empty stream
    buf = io.BytesIO()
    container, subtype, _ = _FORMATS[f]
    sf.write(buf, x, int(sample_rate), format=container, subtype=subtype)
    return buf.getvalue()


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """The bytes of an audio file -> (float32 mono samples, sample rate)."""
    import soundfile as sf

    x, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=False)
    return _mono_float(x), int(sr)


def resample(samples: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """Band-limited resampling by FFT (ideal low-pass at the lower Nyquist).

    The signal is padded with 20 ms of silence on each side first so the FFT's implicit
    wrap-around does not smear the end into the beginning.
    """
    x = _mono_float(samples)
    if sr_in == sr_out or len(x) == 0:
        return x.copy()
    if sr_in <= 0 or sr_out <= 0:
        raise ValueError(f"sample rates must be positive, got {sr_in} -> {sr_out}")
    pad = sr_in // 50
    xp = np.concatenate([np.zeros(pad, np.float32), x, np.zeros(pad, np.float32)])
    n_in = len(xp)
    n_out = max(1, round(n_in * sr_out / sr_in))
    spec = np.fft.rfft(xp.astype(np.float64))
    keep = min(len(spec), n_out // 2 + 1)
    out_spec = np.zeros(n_out // 2 + 1, np.complex128)
    out_spec[:keep] = spec[:keep]
    if n_out < n_in and n_out % 2 == 0:
        out_spec[-1] = out_spec[-1].real  # the new Nyquist bin must be real
    y = np.fft.irfft(out_spec, n_out) * (n_out / n_in)
    start = round(pad * sr_out / sr_in)
    length = round(len(x) * sr_out / sr_in)
    return y[start:start + length].astype(np.float32)


def _fade(x: np.ndarray, n: int) -> np.ndarray:
    n = min(n, len(x) // 2)
    if n <= 0:
        return x
    ramp = (0.5 - 0.5 * np.cos(np.pi * (np.arange(n, dtype=np.float32) + 0.5) / n)).astype(np.float32)
    y = x.copy()
    y[:n] *= ramp
    y[-n:] *= ramp[::-1]
    return y


def join(parts: Sequence[np.ndarray], sample_rate: int, gap_ms: float = 150.0, fade_ms: float = 5.0) -> np.ndarray:
    """Segments -> one float32 array: each faded in and out over ``fade_ms``, with
    ``gap_ms`` of silence between consecutive segments (a natural sentence pause)."""
    fade = int(sample_rate * fade_ms / 1000)
    gap = np.zeros(int(sample_rate * gap_ms / 1000), np.float32)
    out: list[np.ndarray] = []
    for i, p in enumerate(parts):
        if i:
            out.append(gap)
        out.append(_fade(_mono_float(p), fade))
    return np.concatenate(out) if out else np.zeros(0, np.float32)
