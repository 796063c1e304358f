"""ElevenLabs' ``stream-input`` WebSocket on the gateway: text in as it is written, audio out as it commits.

``/v1/text-to-speech/{voice_id}/stream-input``, the messages of ElevenLabs' published protocol:

* in: a first message ``{"text": " ", "voice_settings": {...}, "generation_config": {...},
  "xi_api_key": "..."}``, then ``{"text": "Hello wor", "try_trigger_generation": true}``,
  ``{"text": "", "flush": true}`` (or ``"flush": true`` with text), and ``{"text": ""}`` to end;
* out: ``{"audio": <base64>, "isFinal": null}`` per piece of audio, then ``{"isFinal": true}``;
  an error as ``{"message": ..., "error": <code>}`` before the socket closes.

Each socket is one request sent in pieces (docs/using/streaming-input.md): the messages become
numbered pieces of one request id on ``tts.requests`` (the SDK's :class:`~streams.client.sync.TextPieces`),
and the audio comes from ``tts.chunks`` as each segment commits, once each and in order, so
what an agent hears is what the pipeline answered exactly once. Authentication: the
``xi-api-key`` header (or ``xi_api_key`` in the first message, or ``Authorization: Bearer``)
with the gateway's keys. ``output_format``: ``mp3_*`` (MP3 at 24 kHz whatever rate the name
says), ``pcm_8000``..``pcm_48000`` (16-bit little-endian mono at that rate), ``ulaw_8000``.
Each audio message carries ``alignment`` and ``normalizedAlignment`` (the same: characters as the
voice read them) from the chunk's words when the voice times its words (``chars``,
``charStartTimesMs``, ``charsDurationsMs``, milliseconds from the message's audio start).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import WebSocket, WebSocketDisconnect

from schemas import Chunk, Completion, WordSpan
from streams.gateway.audio import RATE, StreamEncoder, to_rate
from streams.gateway.auth import ApiKey
from streams.gateway.errors import ApiError
from streams.gateway.pipeline import Pipeline

__all__ = ["OUTPUT_FORMATS", "WsEncoder", "alignment", "serve_stream_input"]

_log = logging.getLogger("ttsflow.gateway")

PCM_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
OUTPUT_FORMATS = ("mp3_22050_32", "mp3_44100_32", "mp3_44100_64", "mp3_44100_96", "mp3_44100_128",
                  "mp3_44100_192", *(f"pcm_{r}" for r in PCM_RATES), "ulaw_8000")
_CHUNK_GRACE_S = 5.0  # after the completion, how long chunks not yet seen are waited for
_MAX_MESSAGE_CHARS = 10_000


class WsEncoder:
    """One socket's audio in its ``output_format``, fed 24 kHz int16 samples chunk by chunk."""

    def __init__(self, output_format: str) -> None:
        if output_format not in OUTPUT_FORMATS:
            raise ApiError(400, f"Unsupported output_format {output_format[:32]!r}; use one of "
                                f"{', '.join(OUTPUT_FORMATS)}.", param="output_format", code="invalid_output_format")
        kind, _, rest = output_format.partition("_")
        self.kind = kind
        self.rate = int(rest.split("_")[0])
        self._mp3 = StreamEncoder("mp3") if kind == "mp3" else None

    def feed(self, samples: np.ndarray) -> bytes:
        if self._mp3 is not None:
            return self._mp3.feed(samples)
        x = _resample(samples, self.rate)
        return _ulaw(x) if self.kind == "ulaw" else x.astype("<i2").tobytes()

    def close(self) -> bytes:
        return self._mp3.close() if self._mp3 is not None else b""


def _resample(samples: np.ndarray, rate: int) -> np.ndarray:
    if rate == RATE or len(samples) == 0:
        return samples
    n = max(1, round(len(samples) * rate / RATE))
    x = np.linspace(0, len(samples) - 1, n)
    return np.interp(x, np.arange(len(samples)), samples.astype(np.float32)).round().astype(np.int16)


def _ulaw(samples: np.ndarray) -> bytes:
    """G.711 mu-law of 16-bit samples."""
    x = samples.astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), 32635) + 0x84
    exp = np.floor(np.log2(mag)).astype(np.int32) - 7
    mantissa = (mag >> (exp + 3)) & 0x0F
    return (~(sign | (exp << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


def alignment(words: list[WordSpan], duration_s: float) -> dict[str, list[Any]]:
    """ElevenLabs' character alignment of one chunk from its words: each word's characters share its
    time evenly, the space after it the gap to the next word (milliseconds, from the chunk's start)."""
    chars: list[str] = []
    starts: list[int] = []
    durs: list[int] = []
    for i, w in enumerate(words):
        n = max(1, len(w.word))
        step = (w.end_s - w.start_s) * 1000 / n
        for k, c in enumerate(w.word):
            chars.append(c)
            starts.append(round(w.start_s * 1000 + k * step))
            durs.append(round(step))
        if i < len(words) - 1:
            nxt = words[i + 1].start_s
            chars.append(" ")
            starts.append(round(w.end_s * 1000))
            durs.append(max(0, round((nxt - w.end_s) * 1000)))
    return {"chars": chars, "charStartTimesMs": starts, "charsDurationsMs": durs}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"message": message, "error": code}


async def serve_stream_input(ws: WebSocket, voice_id: str, *, pipeline: Pipeline | None,
                             authenticate: Callable[[str | None], ApiKey], resolve_voice: Callable[[str], str],
                             enter: Callable[[ApiKey], None], leave: Callable[[ApiKey], None]) -> None:
    """One socket, start to close (see the module docstring)."""
    await ws.accept()
    q = ws.query_params
    output_format = q.get("output_format", "mp3_44100_128")
    try:
        inactivity_s = float(q.get("inactivity_timeout", "20"))
    except ValueError:
        inactivity_s = 20.0
    inactivity_s = min(max(inactivity_s, 1.0), 180.0)
    key: ApiKey | None = None
    entered = False
    try:
        try:
            first = await asyncio.wait_for(ws.receive_json(), inactivity_s)
        except (TimeoutError, ValueError):
            raise ApiError(400, "The first message must be a JSON object with 'text' (a space to begin).",
                           code="invalid_message") from None
        if not isinstance(first, dict) or not isinstance(first.get("text"), str):
            raise ApiError(400, "The first message must be a JSON object with 'text' (a space to begin).",
                           code="invalid_message")
        xi = ws.headers.get("xi-api-key") or first.get("xi_api_key")
        auth = f"Bearer {xi}" if isinstance(xi, str) and xi else ws.headers.get("authorization")
        key = authenticate(auth)
        voice = resolve_voice(voice_id)
        enc = WsEncoder(output_format)
        vs = first.get("voice_settings")
        settings: dict[str, Any] = vs if isinstance(vs, dict) else {}
        speed = settings.get("speed", 1.0) if isinstance(settings.get("speed", 1.0), int | float) else 1.0
        if not 0.7 <= float(speed) <= 1.2:  # ElevenLabs' range
            raise ApiError(400, f"voice_settings.speed must be between 0.7 and 1.2, not {speed}.",
                           param="voice_settings.speed", code="invalid_value")
        if pipeline is None:
            raise ApiError(503, "The gateway is starting.", type="server_error", code="unavailable")
        enter(key)
        entered = True
        await _run(ws, pipeline, key, voice, enc, first["text"], float(speed), inactivity_s)
    except ApiError as e:
        _log.info("event=ws_refused code=%s user=%r message=%r", e.code, key.user if key else None, e.message)
        await _send_quietly(ws, _error(e.code or "error", e.message))
        await _close_quietly(ws, 1008 if e.status in (401, 403) else 1011 if e.status >= 500 else 1003)
    except WebSocketDisconnect:
        pass
    finally:
        if entered and key is not None:
            leave(key)


async def _run(ws: WebSocket, p: Pipeline, key: ApiKey, voice: str, enc: WsEncoder, first_text: str, speed: float,
               inactivity_s: float) -> None:
    """Pieces in (a task), audio out (here), until the completion and its chunks are sent."""
    rid = f"ws-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Chunk] = asyncio.Queue()

    def on_chunk(ch: Chunk) -> None:
        loop.call_soon_threadsafe(events.put_nowait, ch)

    client = p.client
    client.listen_chunks(rid, on_chunk)
    fut = client.wait_future(rid)
    pieces = client.open_text(key.user, voice, "wav", rid, speed=speed, sample_rate=RATE, stream=True,
                              timestamps=True)  # words on the chunks: the alignment
    send_lock = asyncio.Lock()
    closed_by_client = asyncio.Event()

    async def write(text: str, **kw: bool) -> None:
        await p.run(lambda: pieces.write(text, **kw))

    async def receive() -> None:
        """Messages to pieces; the end (``{"text": ""}``, a disconnect, or inactivity) sends the final one."""
        await write(first_text)  # piece 0 carries the settings (its text is usually " ")
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(ws.receive_json(), inactivity_s)
                except TimeoutError:
                    _log.info("event=ws_inactive request_id=%s after_s=%.0f", rid, inactivity_s)
                    break
                except ValueError:
                    async with send_lock:
                        await ws.send_json(_error("invalid_message", "Messages must be JSON objects."))
                    continue
                if not isinstance(msg, dict):
                    continue
                text = msg.get("text")
                flush = msg.get("flush") is True
                if text == "" and not flush:
                    break  # the closing message
                if isinstance(text, str) and len(text) > _MAX_MESSAGE_CHARS:
                    async with send_lock:
                        await ws.send_json(_error("message_too_long", f"A message's text is at most "
                                                                      f"{_MAX_MESSAGE_CHARS} characters."))
                    continue
                if (isinstance(text, str) and text) or flush:
                    await write(text if isinstance(text, str) else "", flush=flush)
        except WebSocketDisconnect:
            closed_by_client.set()
        await p.run(lambda: pieces.close(10.0))

    sender = asyncio.ensure_future(receive())
    live: asyncio.Future[Completion] = asyncio.wrap_future(fut)
    next_seq, sent = 0, 0
    pending: dict[int, Chunk] = {}
    completion: Completion | None = None
    grace_end = 0.0
    ended_at: float | None = None  # when the final piece went out
    try:
        while True:
            get = asyncio.ensure_future(events.get())
            waits: set[asyncio.Future[Any]] = {get} | ({live} if completion is None else set())
            done, _ = await asyncio.wait(waits, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and ended_at is None:
                ended_at = time.monotonic()
                sender.result()  # the broker refused the pieces: raised here
            if completion is None and ended_at is not None and time.monotonic() - ended_at > p.gw.gateway_wait_s:
                raise ApiError(504, f"No completion for request {rid} within {p.gw.gateway_wait_s:g} s of its last "
                                    "piece.", type="server_error", code="timeout")
            if get in done:
                ch = get.result()
                if ch.seq >= next_seq:
                    pending[ch.seq] = ch
            else:
                get.cancel()
            if completion is None and live in done:
                completion = live.result()
                grace_end = time.monotonic() + _CHUNK_GRACE_S
            while next_seq in pending:
                ch = pending.pop(next_seq)
                next_seq += 1
                audio = await p.run(enc.feed, await p.run(to_rate, await p.part(ch)))
                if audio and not closed_by_client.is_set():
                    if sent == 0:
                        _log.info("event=ws_first_audio request_id=%s ms=%.0f", rid, (time.monotonic() - t0) * 1000)
                    sent += len(audio)
                    msg: dict[str, Any] = {"audio": base64.b64encode(audio).decode(), "isFinal": None}
                    if ch.words:
                        msg["normalizedAlignment"] = msg["alignment"] = alignment(ch.words, ch.audio.duration_s)
                    async with send_lock:
                        await ws.send_json(msg)
            if completion is not None and (completion.status == "failed" or next_seq >= completion.segments
                                           or time.monotonic() > grace_end):
                break
        assert completion is not None
        tail = await p.run(enc.close)
        async with send_lock:
            if tail:
                await ws.send_json({"audio": base64.b64encode(tail).decode(), "isFinal": None})
            if completion.status == "failed":
                err = completion.error
                await ws.send_json(_error(err.code if err else "failed", err.message if err else "the request failed"))
            await ws.send_json({"isFinal": True})
        await _close_quietly(ws, 1000)
        _log.info("event=ws_done request_id=%s user=%r status=%s chunks=%d bytes=%d ms=%.0f", rid, key.user,
                  completion.status, next_seq, sent, (time.monotonic() - t0) * 1000)
    except WebSocketDisconnect:
        _log.info("event=ws_client_gone request_id=%s", rid)
    finally:
        client.stop_listening(rid, on_chunk)
        if not sender.done():
            await asyncio.wait({sender}, timeout=15.0)  # the final piece still goes out: nothing stays open
        if not fut.done():
            client._forget(rid, fut)


async def _send_quietly(ws: WebSocket, msg: dict[str, Any]) -> None:
    try:
        await ws.send_json(msg)
    except (WebSocketDisconnect, RuntimeError):
        pass


async def _close_quietly(ws: WebSocket, code: int) -> None:
    try:
        await ws.close(code)
    except (WebSocketDisconnect, RuntimeError):
        pass
