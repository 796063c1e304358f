"""Encoding, decoding, resampling and joining audio."""

from __future__ import annotations

import numpy as np
import pytest

from engine import decode, encode, join, resample
from engine.errors import ItemError

SR = 24000


def _tone(freq: float, seconds: float, sr: int = SR, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.mark.parametrize(("fmt", "atol"), [("wav", 1e-4), ("flac", 1e-4), ("ogg", None)])
def test_round_trip(fmt: str, atol: float | None) -> None:
    x = _tone(440, 0.5)
    data = encode(x, SR, fmt)
    assert data[:4] == {"wav": b"RIFF", "flac": b"fLaC", "ogg": b"OggS"}[fmt]
    y, sr = decode(data)
    assert sr == SR and y.dtype == np.float32
    if atol is not None:  # lossless: sample exact up to 16-bit quantization
        assert len(y) == len(x) and np.max(np.abs(y - x)) < atol
    else:  # lossy: same length, same tone
        assert abs(len(y) - len(x)) <= 1
        n = min(len(x), len(y))
        assert np.corrcoef(x[:n], y[:n])[0, 1] > 0.98


def test_encode_clips_and_rejects_unknown_formats() -> None:
    y, _ = decode(encode(np.array([2.0, -3.0, 0.25], np.float32), SR, "wav"))
    assert y[0] == pytest.approx(1.0, abs=1e-4) and y[1] == pytest.approx(-1.0, abs=1e-4)
    with pytest.raises(ItemError, match="mp3"):
        encode(np.zeros(10, np.float32), SR, "mp3")


@pytest.mark.parametrize("sr_out", [16000, 22050, 48000])
def test_resample_keeps_duration_and_pitch(sr_out: int) -> None:
    x = _tone(440, 1.0)
    y = resample(x, SR, sr_out)
    assert len(y) == sr_out
    spectrum = np.abs(np.fft.rfft(y[sr_out // 10: -sr_out // 10] * np.hanning(len(y) - 2 * (sr_out // 10))))
    peak_hz = np.argmax(spectrum) * sr_out / (len(y) - 2 * (sr_out // 10))
    assert abs(peak_hz - 440) < 3
    assert np.sqrt(np.mean(y[sr_out // 10: -sr_out // 10] ** 2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.02)


def test_resample_removes_what_the_new_rate_cannot_hold() -> None:
    y = resample(_tone(10000, 0.5), SR, 16000)  # 10 kHz is above 8 kHz Nyquist
    assert np.sqrt(np.mean(y ** 2)) < 0.01


def test_join_has_no_click_and_pauses_between_parts() -> None:
    # Parts that start and end at full amplitude (a DC offset): a hard cut would jump by 0.8.
    parts = [np.full(4800, 0.8, np.float32), _tone(200, 0.3) + 0.3, np.full(2400, -0.8, np.float32)]
    out = join(parts, SR, gap_ms=150, fade_ms=5)
    assert len(out) == sum(map(len, parts)) + 2 * int(SR * 0.15)
    assert np.max(np.abs(np.diff(out))) < 0.05  # a 5 ms fade moves at most ~0.8 * pi / 240 per sample
    assert abs(out[0]) < 0.01 and abs(out[-1]) < 0.01
    gap = out[4800: 4800 + int(SR * 0.15)]
    assert np.all(gap == 0)
    assert join([], SR).size == 0
