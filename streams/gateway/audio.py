"""The six response formats of OpenAI's speech API, made from the pipeline's audio.

The gateway asks the pipeline for 16-bit WAV at :data:`RATE` (24 kHz, OpenAI's rate) and
encodes here: ``wav`` and ``flac`` with libsndfile (soundfile), ``mp3`` (LAME), ``opus``
(libopus in Ogg), ``aac`` (FFmpeg's AAC encoder in an ADTS stream) with PyAV, whose wheels
bundle those codecs, and ``pcm`` as raw 16-bit little-endian mono samples at 24 kHz, as
OpenAI documents it. Asking the pipeline for one format whatever the caller wants keeps
its cache shared between formats, and lets a retry with another format reuse the synthesis.

Every function is pure (bytes in, bytes out) and runs in a worker thread of the gateway.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from engine.audio import wav_header
from streams.gateway.errors import TranscodeError

__all__ = ["CONTENT_TYPES", "RATE", "StreamEncoder", "decode_wav", "encode", "to_rate", "transcode"]

RATE = 24_000
CONTENT_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
# PyAV's (container, codec, bit rate) per compressed format
_AV: dict[str, tuple[str, str, int]] = {
    "mp3": ("mp3", "libmp3lame", 64_000),
    "opus": ("ogg", "libopus", 32_000),
    "aac": ("adts", "aac", 64_000),
}


def decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    """Mono int16 samples and their rate from the pipeline's audio (wav, flac or ogg)."""
    import soundfile as sf

    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    except Exception as e:  # soundfile raises its own LibsndfileError / RuntimeError
        raise TranscodeError(f"the pipeline's audio could not be decoded: {e}") from e
    return np.ascontiguousarray(samples.mean(axis=1).astype(np.int16) if samples.shape[1] > 1 else samples[:, 0]), rate


def _resample(samples: np.ndarray, rate: int) -> np.ndarray:
    if rate == RATE or len(samples) == 0:
        return samples
    n = round(len(samples) * RATE / rate)
    x = np.linspace(0, len(samples) - 1, n)
    return np.interp(x, np.arange(len(samples)), samples.astype(np.float32)).round().astype(np.int16)


def encode(samples: np.ndarray, fmt: str) -> bytes:
    """``samples`` (mono int16 at :data:`RATE`) in ``fmt``, one of :data:`CONTENT_TYPES`."""
    if fmt == "pcm":
        return samples.astype("<i2").tobytes()
    if fmt in ("wav", "flac"):
        import soundfile as sf

        buf = io.BytesIO()
        sf.write(buf, samples, RATE, format=fmt.upper(), subtype="PCM_16")
        return buf.getvalue()
    if fmt not in _AV:
        raise TranscodeError(f"unknown format {fmt!r}")
    return _encode_av(samples, *_AV[fmt])


def _encode_av(samples: np.ndarray, container: str, codec: str, bit_rate: int) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as out:
        stream: Any = out.add_stream(codec, rate=RATE, layout="mono")  # an AudioStream (av's stubs say a union)
        stream.bit_rate = bit_rate
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        # the encoder wants its own sample format (fltp for aac/opus) and frame size
        resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono", rate=RATE,
                                      frame_size=stream.codec_context.frame_size or None)
        for f in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(f):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def transcode(data: bytes, fmt: str) -> tuple[bytes, float]:
    """The pipeline's audio as ``fmt``, and its duration in seconds."""
    samples, rate = decode_wav(data)
    samples = _resample(samples, rate)
    return encode(samples, fmt), len(samples) / RATE


def to_rate(data: bytes) -> np.ndarray:
    """The pipeline's audio (a request's or one part's) as mono int16 at :data:`RATE`."""
    samples, rate = decode_wav(data)
    return _resample(samples, rate)


class _Sink:
    """A write-only, non-seekable file for PyAV: muxed bytes are taken as they come."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, b: bytes) -> int:
        self._parts.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class StreamEncoder:
    """One response encoded as its audio arrives: :meth:`feed` each part's samples, get the bytes
    ready so far; :meth:`close` flushes the encoder. The concatenation of everything returned is
    one valid file: ``pcm`` raw, ``wav`` with the "unknown length" sizes (0xFFFFFFFF) streaming
    WAV readers accept, the others one encoder and one muxer over a non-seekable output (so a
    streamed ``flac`` leaves its STREAMINFO total at 0, "unknown", as the format allows)."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self._out: Any = None
        self._header = fmt == "wav"
        if fmt in _AV or fmt == "flac":
            import av

            container, codec, bit_rate = _AV.get(fmt, ("flac", "flac", 0))
            self._sink = _Sink()
            self._out = av.open(self._sink, mode="w", format=container)
            self._stream: Any = self._out.add_stream(codec, rate=RATE, layout="mono")
            if bit_rate:
                self._stream.bit_rate = bit_rate
            self._resampler = av.AudioResampler(format=self._stream.codec_context.format, layout="mono", rate=RATE,
                                                frame_size=self._stream.codec_context.frame_size or None)
        elif fmt not in ("pcm", "wav"):
            raise TranscodeError(f"unknown format {fmt!r}")

    def feed(self, samples: np.ndarray) -> bytes:
        if self._out is None:
            head = b""
            if self._header:
                self._header = False
                head = wav_header(None, RATE)
            return head + samples.astype("<i2").tobytes()
        import av

        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        for f in self._resampler.resample(frame):
            for packet in self._stream.encode(f):
                self._out.mux(packet)
        return self._sink.take()

    def close(self) -> bytes:
        if self._out is None:
            return self.feed(np.zeros(0, np.int16)) if self._header else b""
        for f in self._resampler.resample(None):
            for packet in self._stream.encode(f):
                self._out.mux(packet)
        for packet in self._stream.encode(None):
            self._out.mux(packet)
        self._out.close()
        self._out = None
        return self._sink.take()
