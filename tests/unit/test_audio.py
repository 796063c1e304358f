"""Encoding, decoding, resampling and joining audio."""

from __future__ import annotations

import io

import numpy as np
import pytest

from engine import decode, encode, join, resample
from engine.audio import JoinWriter, joined_frames, read_chunk, with_chunk
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


@pytest.mark.parametrize("sr", [8000, 22050, 24000])
def test_wav_is_byte_for_byte_what_libsndfile_writes(sr: int) -> None:
    import soundfile as sf

    rng = np.random.default_rng(sr)
    edges = np.array([1.0, -1.0, 1.5, -2.0, 0.5 / 32767, 1.5 / 32767, -2.5 / 32767, 0.0, -0.0], np.float32)
    for x in (np.concatenate([rng.uniform(-1.2, 1.2, 5001).astype(np.float32), edges]), np.zeros(0, np.float32)):
        buf = io.BytesIO()
        sf.write(buf, np.clip(x, -1.0, 1.0), sr, format="WAV", subtype="PCM_16")
        assert encode(x, sr, "wav") == buf.getvalue()
        streamed = io.BytesIO(b"before")  # the writer starts where the file is and leaves it at the end
        streamed.seek(6)
        w = JoinWriter(streamed, sr, sr, "wav", fade_ms=0.0)
        w.add(x[:100])
        w._write(x[100:])  # the rest straight after, no pause
        w.close()
        assert streamed.getvalue() == b"before" + buf.getvalue() and streamed.tell() == len(streamed.getvalue())


def test_our_wav_reads_back_as_libsndfile_reads_it() -> None:
    import soundfile as sf

    x = np.random.default_rng(3).uniform(-1.1, 1.1, 4001).astype(np.float32)
    data = encode(x, 22050, "wav")
    want, sr = sf.read(io.BytesIO(data), dtype="float32")
    for got_from in (data, with_chunk(data, b"wrds", b'{"a": 1}')):  # a part object with its words after
        got, got_sr = decode(got_from)
        assert got_sr == sr == 22050 and got.dtype == np.float32 and np.array_equal(got, want)
    stereo = io.BytesIO()
    sf.write(stereo, np.stack([x, -x], axis=1).clip(-1, 1), 8000, format="WAV", subtype="PCM_16")
    y, sr = decode(stereo.getvalue())  # not the plain layout: soundfile reads it
    assert sr == 8000 and len(y) == len(x) and np.max(np.abs(y)) < 1e-4
    with pytest.raises(sf.LibsndfileError):
        decode(data[:30])  # a header cut short is soundfile's to refuse


def test_encode_clips_and_rejects_unknown_formats() -> None:
    y, _ = decode(encode(np.array([2.0, -3.0, 0.25], np.float32), SR, "wav"))
    assert y[0] == pytest.approx(1.0, abs=1e-4) and y[1] == pytest.approx(-1.0, abs=1e-4)
    with pytest.raises(ItemError, match="mp3"):
        encode(np.zeros(10, np.float32), SR, "mp3")


def test_a_chunk_rides_in_a_wav_file_that_reads_the_same() -> None:
    import wave

    wav = encode(_tone(440, 0.1), SR)
    both = with_chunk(with_chunk(wav, b"abcd", b"odd"), b"wrds", b'{"words": []}')
    assert read_chunk(both, b"abcd") == b"odd" and read_chunk(both, b"wrds") == b'{"words": []}'
    assert read_chunk(wav, b"wrds") is None and read_chunk(b"not a wav", b"wrds") is None
    assert np.array_equal(decode(both)[0], decode(wav)[0])  # libsndfile skips what it does not know
    with wave.open(io.BytesIO(both)) as w:  # so does the standard library's reader
        assert w.getnframes() == len(decode(wav)[0])
    assert int.from_bytes(both[4:8], "little") == len(both) - 8 and len(both) % 2 == 0
    assert read_chunk(both[:-4], b"wrds") is None  # cut short: not read as words


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


# -- streamed join (engine.audio.JoinWriter) -------------------------------------------------

def _speechlike_parts(seed: int = 1, n: int = 6) -> list[np.ndarray]:
    """Parts of varied length: tones plus noise, one clipping (values above 1)."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n):
        k = int(SR * rng.uniform(0.3, 1.5))
        t = np.arange(k) / SR
        parts.append((0.4 * np.sin(2 * np.pi * rng.uniform(100, 3000) * t) + 0.1 * rng.standard_normal(k))
                     .astype(np.float32))
    parts[2][100:200] = 1.7
    return parts


def _streamed(parts: list[np.ndarray], sr_out: int, fmt: str) -> tuple[bytes, JoinWriter]:
    buf = io.BytesIO()
    w = JoinWriter(buf, SR, sr_out, fmt)
    for p in parts:
        w.add(p)
    w.close()
    return buf.getvalue(), w


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_streamed_join_is_byte_for_byte_the_in_memory_join(fmt: str) -> None:
    parts = _speechlike_parts()
    data, w = _streamed(parts, SR, fmt)
    assert data == encode(join(parts, SR), SR, fmt)
    assert w.frames == len(join(parts, SR)) and w.segments == len(parts)
    assert w.duration_s == pytest.approx(w.frames / SR)


@pytest.mark.parametrize("sr_out", [8000, 16000, 22050, 44100, 48000])
def test_streamed_join_with_resampling_matches_resampling_the_whole_join(sr_out: int) -> None:
    parts = _speechlike_parts()
    data, w = _streamed(parts, sr_out, "wav")
    got, sr = decode(data)
    want, _ = decode(encode(resample(join(parts, SR), SR, sr_out), sr_out, "wav"))
    assert sr == sr_out and len(got) == len(want) == w.frames
    # only the low-pass ringing that the whole-signal filter spreads into the pauses differs
    assert np.sqrt(np.mean((got - want) ** 2)) < 0.005 * np.sqrt(np.mean(want ** 2))
    assert np.max(np.abs(got - want)) < 0.02


@pytest.mark.parametrize("sr_out", [16000, 22050, 48000])
def test_streamed_resampling_is_exact_on_a_tone(sr_out: int) -> None:
    # each part is one stretch of a 440 Hz tone on the joined signal's clock; away from the fades
    # the resampled join is that tone sampled at sr_out
    f, gap = 440.0, int(SR * 0.15)
    lengths = [7000, 5003, 9001]
    parts, pos = [], 0
    for i, n in enumerate(lengths):
        pos += gap if i else 0
        parts.append((0.5 * np.sin(2 * np.pi * f * (pos + np.arange(n)) / SR)).astype(np.float32))
        pos += n
    buf = io.BytesIO()
    w = JoinWriter(buf, SR, sr_out, "flac")
    for p in parts:
        w.add(p)
    w.close()
    got, _ = decode(buf.getvalue())
    t = np.arange(len(got)) / sr_out
    ideal = 0.5 * np.sin(2 * np.pi * f * t)
    pos = 0
    for i, n in enumerate(lengths):
        pos += gap if i else 0
        a, b = int((pos + 600) * sr_out / SR), int((pos + n - 600) * sr_out / SR)  # inside, past the fades
        assert np.max(np.abs(got[a:b] - ideal[a:b])) < 2e-3, f"part {i}"
        pos += n


def test_streamed_join_writes_ogg_and_an_empty_one() -> None:
    parts = _speechlike_parts(n=3)
    data, w = _streamed(parts, SR, "ogg")
    y, sr = decode(data)
    assert data[:4] == b"OggS" and sr == SR and abs(len(y) - w.frames) <= 1
    empty, w0 = _streamed([], 16000, "ogg")
    assert empty[:4] == b"OggS" and w0.frames == 1
    with pytest.raises(ItemError, match="mp3"):
        JoinWriter(io.BytesIO(), SR, SR, "mp3")


@pytest.mark.parametrize("sr_out", [SR, 16000, 22050, 44100, 8000])
@pytest.mark.parametrize("lengths", [[SR], [1, 0, 7], [0], [12345, 2, 24000, 999], [0, 0, 3]])
def test_joined_frames_is_what_the_writer_writes(lengths: list[int], sr_out: int) -> None:
    # a timed request's captions are built before its join from this: it must be the writer's length exactly
    buf = io.BytesIO()
    w = JoinWriter(buf, SR, sr_out, "wav")
    for n in lengths:
        w.add(np.full(n, 0.1, np.float32))
    w.close()
    assert joined_frames(lengths, SR, sr_out, "wav") == w.frames


def test_joined_frames_of_nothing_in_ogg_is_the_one_sample_the_writer_adds() -> None:
    w = JoinWriter(io.BytesIO(), SR, SR, "ogg")
    w.close()
    assert joined_frames([], SR, SR, "ogg") == w.frames == 1
