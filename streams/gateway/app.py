"""The HTTP surface: OpenAI's ``POST /v1/audio/speech`` and its neighbours, on FastAPI.

==========================  ======================================================
``POST /v1/audio/speech``   OpenAI's body; audio bytes (or SSE events) back; with
                            ``"timestamps": true``: JSON, base64 audio and its words
``POST /dev/captioned_speech``  Kokoro-FastAPI's captioned speech: base64 audio with
                            ``timestamps`` (streamed: one JSON object per line)
``GET /v1/models``          the model names accepted in ``model``
``GET /v1/audio/voices``    our voices and the aliases that map onto them
``WS .../stream-input``     ``/v1/text-to-speech/{voice_id}/stream-input``: ElevenLabs' text-in WebSocket
``/v1/lexicons[/{name}]``   pronunciation lexicons; ``POST /dev/phonemize``, ``/dev/generate_from_phonemes``
                            (Kokoro-FastAPI's shapes): :mod:`streams.gateway.pronunciation`
``GET /``                   the playground page
``/healthz`` ``/readyz``    liveness (the completions reader runs) and readiness
``/metrics``                Prometheus: requests by status, latency, in flight
==========================  ======================================================

Guarantees: every error is OpenAI's ``{"error": {...}}`` shape (:mod:`streams.gateway.errors`);
every answer about a request carries ``x-request-id``; ``instructions`` is accepted and ignored
(the voices take no style prompt); caller-supplied strings reach logs only through ``%r``
and never reach an object key (request ids are derived, audio keys content-addressed).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict

from engine import mix as engine_mix
from engine import voices as engine_voices
from engine.languages import LANGUAGES
from schemas import Chunk, Completion, WordSpan, reads_as_ssml
from streams.gateway.audio import CONTENT_TYPES, StreamEncoder, to_rate, transcode
from streams.gateway.auth import ApiKey, KeyRing, Limiter, load_keys
from streams.gateway.errors import ApiError
from streams.gateway.metrics import CONTENT_TYPE, GatewayMetrics
from streams.gateway.pipeline import Pipeline, request_id_for
from streams.gateway.pronunciation import add_routes
from streams.gateway.stream_input import serve_stream_input
from streams.gateway.words import Carry, kokoro, ours
from streams.settings import Settings

__all__ = ["MODELS", "CaptionedBody", "SpeechBody", "build_app"]

_log = logging.getLogger("ttsflow.gateway")

MODELS: tuple[str, ...] = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "ttsflow")
_REPLICA = f"{socket.gethostname()}-{os.getpid()}"
_MAX_KEY = 255


class SpeechBody(BaseModel):
    """OpenAI's speech request; unknown fields are ignored, as OpenAI's SDK may add some."""

    model_config = ConfigDict(extra="ignore")

    model: str
    input: str
    voice: str | dict[str, Any]
    response_format: str = "mp3"
    speed: float = 1.0
    instructions: str | None = None  # accepted and ignored: the voices take no style prompt
    stream_format: str = "audio"
    text_type: str | None = None  # ttsflow's: "ssml" / "text"; absent: SSML when input is one <speak> document
    lexicons: list[str] | None = None  # ttsflow's: up to 5 of the caller's (or global/NAME) lexicons
    timestamps: bool = False  # ttsflow's: every word's time (the OpenAI SDK sends it with extra_body)
    # ttsflow's: the voice of each language of a mixed-language input, {"ja": "jf_alpha", "en": "heart"}
    voices: dict[str, str] | None = None


class CaptionedBody(BaseModel):
    """Kokoro-FastAPI's ``/dev/captioned_speech`` request (``lang_code``, ``volume_multiplier``,
    ``normalization_options`` and ``return_download_link`` are accepted and ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: str = "kokoro"
    input: str
    voice: str | dict[str, Any] | None = None  # None: the default voice
    response_format: str = "mp3"
    speed: float = 1.0
    stream: bool = True
    return_timestamps: bool = True


class Voices:
    """Our voices by name plus the alias map; an alias with no target speaks with the default voice."""

    def __init__(self, settings: Settings) -> None:
        # every served backend's voices (TTS_BACKENDS: kokoro's Mandarin and Japanese beside hibari), the
        # default backend's first; the workers and the stage serve the same set
        self.names = tuple(v for b in settings.engine.served_backends for v in engine_voices.backend_voices(b) or ())
        self.default = settings.engine.voice or (self.names[0] if self.names else "")
        self.aliases = {a: (v or self.default) for a, v in settings.gateway.aliases.items()}

    def resolve(self, voice: str | dict[str, Any]) -> str:
        name = voice.get("id") if isinstance(voice, dict) else voice
        if not isinstance(name, str) or not name:
            raise ApiError(400, "voice must be a voice name.", param="voice", code="invalid_value")
        if name in self.names:
            return name
        if engine_mix.is_mix(name):  # "zf_xiaobei(2)+zm_yunjian(1)": checked here, spelled one way
            try:
                return engine_voices.mix_info(name, served=self.names).voice
            except engine_mix.MixError as e:
                raise ApiError(400, f"{e}.", param="voice", code="unknown_voice") from e
        target = self.aliases.get(name.lower())
        if target:
            return target
        known = ", ".join([*self.names, *sorted(self.aliases)])
        raise ApiError(400, f"Unknown voice {name[:64]!r}; known voices: {known}.", param="voice", code="unknown_voice")

    def resolve_map(self, voices: dict[str, str] | None) -> dict[str, str] | None:
        """A per-language voice map, each voice resolved like ``voice`` (names, aliases, mixes); the
        languages are those the stage cuts by. Raises :class:`ApiError` 400 naming the bad entry."""
        if not voices:
            return None
        if len(voices) > 8:
            raise ApiError(400, f"voices maps {len(voices)} languages; at most 8.", param="voices",
                           code="invalid_value")
        out: dict[str, str] = {}
        for lang, voice in voices.items():
            if lang not in LANGUAGES:
                raise ApiError(400, f"voices: {lang[:16]!r} is not a language the input is cut by; use "
                                    f"{', '.join(LANGUAGES)}.", param="voices", code="unsupported_language")
            try:
                out[lang] = self.resolve(voice)
            except ApiError as e:
                raise ApiError(e.status, f"voices.{lang}: {e.message}", param="voices", code=e.code) from None
        return out

    def listing(self) -> dict[str, Any]:
        return {"voices": [{"id": n, "name": n, "default": n == self.default} for n in self.names],
                "aliases": dict(sorted(self.aliases.items()))}


def _validate(body: SpeechBody, settings: Settings) -> None:
    gw = settings.gateway
    if body.model not in MODELS and body.model not in settings.engine.served_backends:
        raise ApiError(400, f"Unknown model {body.model[:64]!r}; use one of "
                            f"{', '.join(dict.fromkeys((*MODELS, *settings.engine.served_backends)))}.", param="model",
                       code="model_not_found")
    if not body.input.strip():
        raise ApiError(400, "input must not be empty.", param="input", code="empty_input")
    if len(body.input) > gw.gateway_max_input_chars:
        raise ApiError(413, f"input is {len(body.input)} characters; the limit is {gw.gateway_max_input_chars}.",
                       param="input", code="input_too_long")
    if body.response_format not in CONTENT_TYPES:
        raise ApiError(400, f"Unknown response_format {body.response_format[:32]!r}; use one of "
                            f"{', '.join(CONTENT_TYPES)}.", param="response_format", code="invalid_value")
    if not 0.25 <= body.speed <= 4.0:
        raise ApiError(400, f"speed must be between 0.25 and 4.0, not {body.speed:g}.", param="speed",
                       code="invalid_value")
    if body.stream_format not in ("audio", "sse"):
        raise ApiError(400, "stream_format must be 'audio' or 'sse'.", param="stream_format", code="invalid_value")
    if body.text_type not in (None, "text", "ssml"):
        raise ApiError(400, "text_type must be 'text' or 'ssml'.", param="text_type", code="invalid_value")
    if body.lexicons is not None and len(body.lexicons) > 5:
        raise ApiError(400, f"lexicons names {len(body.lexicons)}; at most 5.", param="lexicons", code="invalid_value")
    if body.timestamps and "stream_format" in body.model_fields_set and body.stream_format == "audio":
        raise ApiError(400, "timestamps come with stream_format 'sse' (words on each event) or without streaming "
                            "(one JSON answer); raw streamed audio has no place for them.", param="timestamps",
                       code="invalid_value")


@dataclass
class _Call:
    """One speech request's bookkeeping (see ``_answer`` in :func:`build_app`)."""

    t0: float
    fmt: str  # the format asked for, or "invalid" (a metrics label)
    status: int = 500
    key: ApiKey | None = None
    entered: bool = False  # holds a slot of its key's limit
    handed_off: bool = False  # a streamed body releases the slot and finishes the metrics


def _error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def build_app(settings: Settings, *, pipeline: Pipeline | None = None) -> FastAPI:
    """The gateway's ASGI app. It connects to the pipeline at start-up (or uses ``pipeline``)."""
    gw = settings.gateway
    keys: KeyRing | None = load_keys(gw.gateway_keys_file)
    open_key = ApiKey(gw.gateway_open_user, name="open")
    limiter = Limiter()
    voices = Voices(settings)
    metrics = GatewayMetrics()
    state: dict[str, Any] = {"pipeline": pipeline}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if keys is None:
            _log.warning("event=gateway_open WARNING: no TTS_GATEWAY_KEYS_FILE: the gateway is OPEN, every caller is "
                         "user %r. Use it only locally; configure API keys before exposing it.", gw.gateway_open_user)
        else:
            _log.info("event=gateway_keys keys=%d", len(keys))
        if state["pipeline"] is None:
            state["pipeline"] = await Pipeline.connect(settings)
        _log.info("event=gateway_ready replica=%s host=%s port=%d", _REPLICA, gw.gateway_host, gw.gateway_port)
        try:
            yield
        finally:
            p, state["pipeline"] = state["pipeline"], None
            if p is not None:
                await asyncio.get_running_loop().run_in_executor(None, p.close)

    app = FastAPI(title="ttsflow gateway", lifespan=lifespan, docs_url="/docs", redoc_url=None)

    @app.exception_handler(ApiError)
    async def _api_error(_req: Request, e: ApiError) -> JSONResponse:
        return _error_response(e)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(_req: Request, e: RequestValidationError) -> JSONResponse:
        errs = e.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        param = ".".join(loc) or None
        msg = f"{param}: {first.get('msg', 'invalid')}" if param else str(first.get("msg", "invalid request body"))
        return _error_response(ApiError(422, msg, param=param, code="invalid_request_body"))

    def _caller(request: Request) -> ApiKey:
        if keys is None:
            return open_key
        return keys.lookup(request.headers.get("authorization"))

    @app.get("/healthz")
    async def healthz() -> Response:
        p = state["pipeline"]
        ok = p is not None and p.healthy
        return Response("ok\n" if ok else "completions reader down\n", status_code=200 if ok else 503,
                        media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        p = state["pipeline"]
        ok = p is not None and p.healthy
        return Response(("ready\n" if ok else "not ready\n") + f"replica={_REPLICA}\n", status_code=200 if ok else 503,
                        media_type="text/plain")

    @app.get("/metrics")
    async def prom() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        _caller(request)
        names = (*MODELS, *settings.engine.served_backends)
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "ttsflow"}
                                           for m in dict.fromkeys(names)]}

    @app.get("/v1/audio/voices")
    async def voice_list(request: Request) -> dict[str, Any]:
        _caller(request)
        return voices.listing()

    def _ws_caller(authorization: str | None) -> ApiKey:
        return open_key if keys is None else keys.lookup(authorization)

    @app.websocket("/v1/text-to-speech/{voice_id}/stream-input")
    async def stream_input(ws: WebSocket, voice_id: str) -> None:
        await serve_stream_input(ws, voice_id, pipeline=state["pipeline"], authenticate=_ws_caller,
                                 resolve_voice=voices.resolve, enter=limiter.enter, leave=limiter.leave)

    add_routes(app, settings, caller=_caller, state=state, voices=voices)

    @app.get("/", response_class=HTMLResponse)
    async def playground() -> HTMLResponse:
        return HTMLResponse(resources.files("streams.gateway").joinpath("playground.html").read_text("utf-8"))

    async def _answer(request: Request, response_format: str, answer: Callable[[_Call], Awaitable[Response]]
                      ) -> Response:
        """``answer(call)`` with a speech request's bookkeeping, the same for every route that speaks:
        the caller identified, the metrics started and finished, an :class:`ApiError` turned into its
        JSON answer, and the caller's limiter slot released, unless a streamed body took both over."""
        call = _Call(time.monotonic(), response_format if response_format in CONTENT_TYPES else "invalid")
        metrics.started()
        try:
            call.key = _caller(request)
            return await answer(call)
        except ApiError as e:
            call.status = e.status
            if call.status >= 500:
                _log.warning("event=speech_error status=%d code=%s user=%r message=%r", call.status, e.code,
                             call.key.user if call.key else None, e.message)
            return _error_response(e)
        finally:
            if not call.handed_off:
                if call.entered and call.key is not None:
                    limiter.leave(call.key)
                metrics.finished(call.status, call.fmt, time.monotonic() - call.t0)

    def _admit(call: _Call) -> Pipeline:
        """The caller takes a slot of its key's limit; the pipeline to ask (503 while it starts)."""
        assert call.key is not None
        limiter.enter(call.key)
        call.entered = True
        p: Pipeline | None = state["pipeline"]
        if p is None:
            raise ApiError(503, "The gateway is starting.", type="server_error", code="unavailable",
                           headers={"Retry-After": "1"})
        return p

    async def _streamed(call: _Call, p: Pipeline, ask: dict[str, Any], fmt: str, shape: str, timestamps: bool,
                        headers: dict[str, str], media_type: str) -> Response | Completion:
        """A streamed answer from the request's first chunk on (the body owns the limiter slot and the
        metrics from here), or its completion when it had no chunk (a cache hit, a failure)."""
        assert call.key is not None
        events = p.events(**ask)
        first = await anext(events)
        if not isinstance(first, Chunk):
            return first
        call.status, call.handed_off = 200, True
        headers["x-ttsflow-streamed"] = "true"
        gen = _stream(p, first, events, fmt, shape, call.t0, call.key, ask["rid"], timestamps)
        return StreamingResponse(gen, headers=headers, media_type=media_type)

    @app.post("/v1/audio/speech")
    async def speech(request: Request, body: SpeechBody) -> Response:
        async def answer(call: _Call) -> Response:
            assert call.key is not None
            key = call.key
            _validate(body, settings)
            voice = voices.resolve(body.voice)
            vmap = voices.resolve_map(body.voices)
            if vmap and reads_as_ssml(body.text_type, body.input):
                raise ApiError(400, "voices: an SSML input picks languages with xml:lang and takes no voice map.",
                               param="voices", code="invalid_value")
            idem = request.headers.get("idempotency-key")
            if idem is not None and not 1 <= len(idem) <= _MAX_KEY:
                raise ApiError(400, f"Idempotency-Key must be 1-{_MAX_KEY} characters.", param="Idempotency-Key",
                               code="invalid_value")
            p = _admit(call)
            rid = request_id_for(key.user, idem)
            ask: dict[str, Any] = {"rid": rid, "user": key.user, "text": body.input, "voice": voice, "speed": body.speed,
                   "idempotent": idem is not None, "timestamps": body.timestamps, "voices": vmap}
            headers = {"x-request-id": rid, "x-ttsflow-replica": _REPLICA}
            sse = body.stream_format == "sse"
            if "stream_format" in body.model_fields_set:  # asked to stream: audio as each segment commits
                got = await _streamed(call, p, {**ask, "text_type": body.text_type, "lexicons": body.lexicons},
                                      body.response_format, "sse" if sse else "audio", body.timestamps,
                                      headers, "text/event-stream" if sse else CONTENT_TYPES[call.fmt])
                if isinstance(got, Response):
                    return got
                c, found = got, "memory"
            else:
                c, found = await p.completion(**ask, text_type=body.text_type, lexicons=body.lexicons)
            data = await p.audio(c)
            out, duration = await p.run(transcode, data, body.response_format)
            headers.update({"x-ttsflow-found": found,
                            "x-ttsflow-cached": "true" if c.segments and c.cached_segments == c.segments else "false",
                            "x-ttsflow-segments": str(c.segments), "x-ttsflow-duration-s": f"{duration:.3f}",
                            "x-ttsflow-latency-ms": f"{(time.monotonic() - call.t0) * 1000:.0f}"})
            _log.info("event=speech request_id=%s user=%r voice=%s format=%s found=%s chars=%d ms=%.0f", rid,
                      key.user, voice, body.response_format, found, len(body.input), (time.monotonic() - call.t0) * 1000)
            words = await p.words(c) if body.timestamps else None
            call.status = 200
            metrics.first_byte(call.fmt, time.monotonic() - call.t0)
            if sse:
                extra = {**_words_fields(words, c.words_reason), **_marks_fields(c)} if body.timestamps else {}
                return StreamingResponse(_sse([out], extra), media_type="text/event-stream", headers=headers)
            if body.timestamps:  # one JSON answer: the audio in base64, its words and its SSML marks
                return JSONResponse({"request_id": rid, "format": body.response_format,
                                     "content_type": CONTENT_TYPES[body.response_format], "duration_s": duration,
                                     "audio": base64.b64encode(out).decode("ascii"),
                                     **_words_fields(words, c.words_reason), **_marks_fields(c)}, headers=headers)
            return Response(out, media_type=CONTENT_TYPES[body.response_format], headers=headers)

        return await _answer(request, body.response_format, answer)

    @app.post("/dev/captioned_speech")
    async def captioned_speech(request: Request, body: CaptionedBody) -> Response:
        """Kokoro-FastAPI's captioned speech: ``{"audio": base64, "audio_format", "timestamps": [{"word",
        "start_time", "end_time"}]}``; streamed (``stream``, the default): one such JSON object per line,
        each with the audio encoded since the previous one and the words it carries."""
        async def answer(call: _Call) -> Response:
            assert call.key is not None
            sb = SpeechBody(model=settings.engine.backend, input=body.input, voice=body.voice or voices.default,
                            response_format=body.response_format, speed=body.speed)
            _validate(sb, settings)
            voice = voices.resolve(sb.voice)
            p = _admit(call)
            rid = request_id_for(call.key.user, None)
            ask: dict[str, Any] = {"rid": rid, "user": call.key.user, "text": body.input, "voice": voice,
                                   "speed": body.speed, "idempotent": False, "timestamps": body.return_timestamps}
            headers = {"x-request-id": rid, "x-ttsflow-replica": _REPLICA}
            if body.stream:
                got = await _streamed(call, p, ask, body.response_format, "kokoro", True, headers, "application/json")
                if isinstance(got, Response):
                    return got
                c = got
            else:
                c, _found = await p.completion(**ask)
            data = await p.audio(c)
            out, _duration = await p.run(transcode, data, body.response_format)
            words = await p.words(c) if body.return_timestamps else None
            if body.return_timestamps and words is None and c.words_reason:
                headers["x-ttsflow-words-reason"] = c.words_reason
            call.status = 200
            metrics.first_byte(call.fmt, time.monotonic() - call.t0)
            line = _kokoro_line(out, body.response_format, words or [])
            return Response(line, media_type="application/json", headers=headers)

        return await _answer(request, body.response_format, answer)

    async def _stream(p: Pipeline, first: Chunk, events: AsyncIterator[Chunk | Completion], fmt: str, shape: str,
                      t0: float, key: ApiKey, rid: str, timestamps: bool = False) -> AsyncIterator[bytes]:
        """The body of a streamed answer: each chunk's part fetched, resampled and encoded as it comes;
        ``shape``: ``audio`` (bytes), ``sse`` (OpenAI's events, with each chunk's ``words`` when
        ``timestamps``) or ``kokoro`` (Kokoro-FastAPI's JSON lines with ``timestamps``). Words go out
        with the first piece of audio sent after their chunk (an encoder may hold audio back)."""
        enc = StreamEncoder(fmt)
        carry = Carry()
        sent = 0
        outcome = 200

        def wrap(piece: bytes) -> bytes:
            if shape == "sse":
                marks = carry.take_marks()
                return _sse_event(piece, {**_words_fields(carry.take(), carry.reason),
                                          **({"marks": marks} if marks else {})} if timestamps else None)
            if shape == "kokoro":
                return _kokoro_line(piece, fmt, carry.take())
            return piece

        try:
            ev: Chunk | Completion | None = first
            while ev is not None:
                if isinstance(ev, Chunk):
                    carry.add(ev)
                    samples = await p.run(to_rate, await p.part(ev))
                    piece = await p.run(enc.feed, samples)
                    if piece:
                        if sent == 0:
                            metrics.first_byte(fmt, time.monotonic() - t0)
                        sent += len(piece)
                        yield wrap(piece)
                ev = await anext(events, None)
            tail = await p.run(enc.close)
            if tail:
                yield wrap(tail)
            if shape == "sse":
                yield _sse_done()
        except ApiError as e:  # the status line is gone: end the body short and say why in the log
            outcome = e.status
            _log.warning("event=stream_cut request_id=%s status=%d message=%r", rid, e.status, e.message)
        finally:
            limiter.leave(key)
            metrics.finished(outcome, fmt, time.monotonic() - t0)
            _log.info("event=speech_streamed request_id=%s user=%r format=%s bytes=%d ms=%.0f", rid, key.user, fmt,
                      sent, (time.monotonic() - t0) * 1000)

    return app


def _words_fields(words: list[WordSpan] | None, reason: str | None) -> dict[str, Any]:
    """``words`` (ttsflow's shape) and, when there are none, ``words_reason``."""
    return {"words": ours(words)} if words is not None else {"words": None, "words_reason": reason}


def _marks_fields(c: Completion) -> dict[str, Any]:
    """``marks``: the SSML marks of the answer, ``name`` and ``time_s`` (seconds in the audio); none: absent."""
    return {"marks": [{"name": m.name, "time_s": m.time_s} for m in c.marks]} if c.marks else {}


def _sse_event(piece: bytes, extra: dict[str, Any] | None = None) -> bytes:
    ev = {"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode(), **(extra or {})}
    return f"data: {json.dumps(ev, ensure_ascii=False)}\n\n".encode()


def _kokoro_line(piece: bytes, fmt: str, words: list[WordSpan]) -> bytes:
    """One line of Kokoro-FastAPI's streamed captioned speech."""
    line = {"audio": base64.b64encode(piece).decode(), "audio_format": CONTENT_TYPES[fmt], "timestamps": kokoro(words)}
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _sse_done() -> bytes:
    done = {"type": "speech.audio.done", "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}
    return f"data: {json.dumps(done)}\n\n".encode()


async def _sse(pieces: list[bytes], extra: dict[str, Any] | None = None, chunk: int = 32_768) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE: ``speech.audio.delta`` events with base64 audio, then ``speech.audio.done``;
    ``extra`` (the words) rides on the first event."""
    for audio in pieces:
        for i in range(0, len(audio), chunk):
            yield _sse_event(audio[i:i + chunk], extra)
            extra = None
    yield _sse_done()
