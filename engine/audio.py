"""Audio arrays to bytes and back: encoding, resampling, joining segments.

Guarantees: ``encode`` takes float32 mono samples in [-1, 1] (values outside are clipped)
and returns a complete file (``wav`` = 16-bit PCM, ``flac`` = 16-bit, ``ogg`` = Vorbis);
``decode`` reads any of them back as float32 mono. ``resample`` is band-limited (FFT
based) and keeps the duration to the nearest sample. ``join`` puts segments together
with short fades at every edge and a pause between them, so a join never clicks.
:class:`JoinWriter` does what ``join`` + ``resample`` + ``encode`` do, one segment at a
time into a file, so a request's audio is never whole in memory: without resampling its
file is byte for byte the one ``encode(join(parts))`` gives (wav, flac); with resampling
each segment is resampled on its own onto the whole signal's output grid (the pauses are
silence, so it differs from resampling the whole join only by the low-pass ringing that
the whole-signal filter spreads into the pauses).
``with_chunk`` / ``read_chunk`` carry extra data inside a WAV file as a RIFF chunk after its
samples (readers skip chunks they do not know: the audio reads the same), so one object
holds a part's audio and what belongs to it.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from engine.errors import ItemError

__all__ = ["FORMATS", "JoinWriter", "content_type", "decode", "encode", "join", "joined_frames", "part_starts", "read_chunk", "resample",
           "wav_header", "with_chunk"]

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


def _pcm16(x: np.ndarray) -> bytes:
    """Float samples -> 16-bit little-endian PCM, as libsndfile (1.2) writes them: clipped to [-1, 1],
    scaled by 32768 in float32, rounded down, 1.0 kept at 32767. The same bytes without its
    per-call cost (a request's 10 s: ~2.5 ms through soundfile, ~0.3 ms here)."""
    y = np.clip(x, -1.0, 1.0)
    y *= np.float32(32768.0)
    np.floor(y, out=y)
    return np.minimum(y, np.float32(32767.0), out=y).astype("<i2").tobytes()


def wav_header(frames: int | None, sample_rate: int) -> bytes:
    """The 44-byte header of a 16-bit mono PCM WAV file of ``frames`` samples (libsndfile's, byte for
    byte); ``None``: of a stream whose length is not known yet (both sizes 0xFFFFFFFF, as streaming
    players expect)."""
    riff, data = (0xFFFFFFFF, 0xFFFFFFFF) if frames is None else (36 + 2 * frames, 2 * frames)
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1, sample_rate,
                       2 * sample_rate, 2, 16, b"data", data)


def encode(samples: np.ndarray, sample_rate: int, fmt: str = "wav") -> bytes:
    """Float mono samples -> the bytes of a ``wav``, ``flac`` or ``ogg`` file."""
    import soundfile as sf

    f = _check_format(fmt)
    if f == "wav":
        x = _mono_float(samples)
        return wav_header(len(x), int(sample_rate)) + _pcm16(x)
    x = np.clip(_mono_float(samples), -1.0, 1.0)
    if f == "ogg" and len(x) == 0:
        x = np.zeros(1, np.float32)  # libvorbis cannot write an empty stream
    buf = io.BytesIO()
    container, subtype, _ = _FORMATS[f]
    sf.write(buf, x, int(sample_rate), format=container, subtype=subtype)
    return buf.getvalue()


def _plain_wav(data: bytes) -> tuple[np.ndarray, int] | None:
    """A 16-bit mono PCM WAV file (as :func:`encode` writes it, perhaps with chunks after its samples:
    :func:`with_chunk`) read with numpy, as libsndfile reads it (each sample / 32768); None for any
    other file."""
    fmt, pcm = read_chunk(data, b"fmt "), read_chunk(data, b"data")
    if fmt is None or pcm is None or len(fmt) != 16 or len(pcm) % 2:
        return None
    tag, channels, sr, _rate, _align, bits = struct.unpack("<HHIIHH", fmt)
    if tag != 1 or channels != 1 or bits != 16:
        return None
    x = np.frombuffer(pcm, "<i2").astype(np.float32)
    x *= np.float32(1 / 32768)
    return x, int(sr)


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """The bytes of an audio file -> (float32 mono samples, sample rate)."""
    import soundfile as sf

    plain = _plain_wav(data)
    if plain is not None:  # our own WAV (a part, a join): ~0.02 ms against soundfile's ~0.2 for 3 s
        return plain
    x, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=False)
    return _mono_float(x), int(sr)


def with_chunk(wav: bytes, chunk_id: bytes, payload: bytes) -> bytes:
    """``wav`` with a RIFF chunk ``chunk_id`` (4 ASCII bytes) holding ``payload`` appended after its
    last chunk (padded to an even length, the RIFF size updated)."""
    if len(chunk_id) != 4 or wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise ValueError("with_chunk needs a RIFF/WAVE file and a 4-byte chunk id")
    pad = b"\0" if len(wav) % 2 else b""  # chunks start at even offsets (a pad byte after an odd one)
    chunk = chunk_id + len(payload).to_bytes(4, "little") + payload + (b"\0" if len(payload) % 2 else b"")
    size = len(wav) + len(pad) + len(chunk) - 8
    # one copy of the samples (a part's are ~150 kB), not three
    return b"".join((wav[:4], size.to_bytes(4, "little"), memoryview(wav)[8:], pad, chunk))


def read_chunk(wav: bytes, chunk_id: bytes) -> bytes | None:
    """The payload of the first RIFF chunk ``chunk_id`` in ``wav``, or None (not a WAV file, no such
    chunk, or a chunk that runs past the end)."""
    if wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        return None
    at = 12
    while at + 8 <= len(wav):
        size = int.from_bytes(wav[at + 4:at + 8], "little")
        if wav[at:at + 4] == chunk_id:
            return wav[at + 8:at + 8 + size] if at + 8 + size <= len(wav) else None
        at += 8 + size + (size % 2)
    return None


def resample(samples: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """Band-limited resampling by FFT (ideal low-pass at the lower Nyquist).

    The signal is padded with 20 ms of silence on each side first so the FFT's implicit
    wrap-around does not smear the end into the beginning; output sample k is the signal at
    input time k * sr_in / sr_out exactly (see :func:`_resample_grid`).
    """
    x = _mono_float(samples)
    if sr_in == sr_out or len(x) == 0:
        return x.copy()
    if sr_in <= 0 or sr_out <= 0:
        raise ValueError(f"sample rates must be positive, got {sr_in} -> {sr_out}")
    return _resample_grid(x, sr_in, sr_out, 0.0, round(len(x) * sr_out / sr_in))


def _resample_grid(x: np.ndarray, sr_in: int, sr_out: int, offset: float, m: int) -> np.ndarray:
    """``m`` samples of ``x``'s band-limited interpolation (``resample``'s ideal low-pass) at
    input times ``offset + k * sr_in / sr_out``: one segment on the output grid of a longer
    signal it is part of. The padded length is a multiple of ``sr_in / gcd`` so the grid is
    exact, and the FFT's wrap-around falls in the 20 ms of padding."""
    pad = sr_in // 50
    q = sr_in // math.gcd(sr_in, sr_out)
    n_in = len(x) + 2 * pad
    n_in += -n_in % q
    n_out = n_in * sr_out // sr_in
    xp = np.zeros(n_in, np.float64)
    xp[pad:pad + len(x)] = x
    spec = np.fft.rfft(xp)
    keep = min(len(spec), n_out // 2 + 1)
    out_spec = np.zeros(n_out // 2 + 1, np.complex128)
    out_spec[:keep] = spec[:keep]
    if n_out < n_in and n_out % 2 == 0:
        out_spec[-1] = out_spec[-1].real
    out_spec *= np.exp(2j * np.pi * np.arange(len(out_spec)) * (pad + offset) / n_in)  # x(t + pad + offset)
    y = np.fft.irfft(out_spec, n_out) * (n_out / n_in)
    return y[:m].astype(np.float32)


def _fade(x: np.ndarray, n: int) -> np.ndarray:
    n = min(n, len(x) // 2)
    if n <= 0:
        return x
    ramp = (0.5 - 0.5 * np.cos(np.pi * (np.arange(n, dtype=np.float32) + 0.5) / n)).astype(np.float32)
    y = x.copy()
    y[:n] *= ramp
    y[-n:] *= ramp[::-1]
    return y


def part_starts(lengths: Sequence[int], sample_rate: int, gap_ms: float = 150.0) -> list[float]:
    """Where each part starts, in seconds, in ``join``'s (and ``JoinWriter``'s) output: after
    the parts before it and a pause of ``gap_ms`` between each two (fades keep lengths).
    Word timings of a part move by its start to become times in the request's audio."""
    gap = int(sample_rate * gap_ms / 1000)
    out, at = [], 0
    for k, n in enumerate(lengths):
        at += gap if k else 0
        out.append(at / sample_rate)
        at += int(n)
    return out


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


def joined_frames(lengths: Sequence[int], sr_in: int, sr_out: int, fmt: str = "wav", *,
                  gap_ms: float = 150.0) -> int:
    """How many samples :class:`JoinWriter` writes for parts of ``lengths`` samples at ``sr_in``
    (its pauses and its resampling grid, the same arithmetic), without the audio: what a timed
    request's words know of its length before its join has run."""
    sr_in, sr_out = int(sr_in), int(sr_out)
    gap = int(sr_in * gap_ms / 1000)
    pos = frames = 0
    for k, n in enumerate(lengths):
        n = int(n)
        if k:
            pos += gap
        if sr_in == sr_out:
            frames = max(frames, pos) + n
        else:
            j0 = -(-pos * sr_out // sr_in)
            j1 = round((pos + n) * sr_out / sr_in)
            frames = max(frames, j0)
            if n and j1 > j0:
                frames += j1 - j0
        pos += n
    if fmt == "ogg" and frames == 0:
        frames = 1
    return frames


class JoinWriter:
    """Streams segments into one encoded file: ``join``'s fades and pauses, ``resample`` to
    ``sr_out``, ``encode``'s clipping and format, one segment in memory at a time.

    ``out`` is a seekable binary file (a wav or flac header is finished at :meth:`close`).
    ``frames`` counts the samples written so far, so a caller can stop a request that grows
    past its limit before the file does.
    """

    def __init__(self, out: IO[bytes], sr_in: int, sr_out: int, fmt: str = "wav", *, gap_ms: float = 150.0,
                 fade_ms: float = 5.0) -> None:
        import soundfile as sf

        self.fmt = _check_format(fmt)
        self.sr_in, self.sr_out = int(sr_in), int(sr_out)
        self._fade = int(self.sr_in * fade_ms / 1000)
        self._gap_in = int(self.sr_in * gap_ms / 1000)
        self._pos_in = 0  # where the next segment starts in the joined signal at sr_in
        self._out = out
        self._file: Any = None
        if self.fmt == "wav":  # written here (libsndfile's bytes at a tenth of its cost); the header at close
            self._start = out.tell()
            out.write(wav_header(0, self.sr_out))
        else:
            container, subtype, _ = _FORMATS[self.fmt]
            self._file = sf.SoundFile(out, "w", samplerate=self.sr_out, channels=1, format=container,
                                      subtype=subtype)
        self.segments = 0
        self.frames = 0

    def add(self, samples: np.ndarray) -> None:
        """Append one segment (float mono at ``sr_in``), after a pause if it is not the first."""
        x = _fade(_mono_float(samples), self._fade)
        if self.segments:
            self._pos_in += self._gap_in
        if self.sr_in == self.sr_out:
            self._write(np.zeros(self._pos_in - self.frames, np.float32))
            self._write(x)
        else:
            # the output samples whose times fall in this segment, on the whole signal's grid;
            # those before it (the pause) are silence
            a, b = self.sr_in, self.sr_out
            j0 = -(-self._pos_in * b // a)
            j1 = round((self._pos_in + len(x)) * b / a)  # the last one ends where resample(join) does
            self._write(np.zeros(j0 - self.frames, np.float32))
            if len(x) and j1 > j0:
                self._write(_resample_grid(x, a, b, (j0 * a - self._pos_in * b) / b, j1 - j0))
        self._pos_in += len(x)
        self.segments += 1

    def _write(self, x: np.ndarray) -> None:
        if len(x) > 0:
            if self._file is None:
                self._out.write(_pcm16(x))
            else:
                self._file.write(np.clip(x, -1.0, 1.0))
            self.frames += len(x)

    @property
    def duration_s(self) -> float:
        return self.frames / self.sr_out

    def close(self) -> None:
        """Finish the file (its header); ``out`` stays open."""
        if self.fmt == "ogg" and self.frames == 0:
            self._write(np.zeros(1, np.float32))  # libvorbis cannot write an empty stream
        if self._file is not None:
            self._file.close()
            return
        end = self._out.tell()
        self._out.seek(self._start)
        self._out.write(wav_header(self.frames, self.sr_out))
        self._out.seek(end)
