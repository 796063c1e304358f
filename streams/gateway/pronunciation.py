"""The gateway's pronunciation routes: lexicons and Kokoro-FastAPI's phoneme routes.

=====================================  ==========================================================
``GET /v1/lexicons``                   the caller's lexicons and the global ones (key, version, entries)
``PUT /v1/lexicons/{name}``            store or replace the caller's lexicon (body: the PLS document)
``GET /v1/lexicons/{name}``            its PLS document (``global/<name>``: a global one)
``DELETE /v1/lexicons/{name}``         delete it
``POST /dev/phonemize``                Kokoro-FastAPI's shape: ``{"text", "language"}`` -> ``{"phonemes", "tokens"}``
``POST /dev/generate_from_phonemes``   Kokoro-FastAPI's shape: ``{"phonemes", "voice"}`` -> WAV audio
=====================================  ==========================================================

Guarantees: the owner of a lexicon is the caller's user (its API key), never a field of the body;
global lexicons are not written here (operators write them with ``ttsflow lexicon put global/NAME``
under the ops principal): 403. ``/dev/phonemize`` runs the stage's own logic and the voice's front end
in this process (loaded on first use; no model call). ``/dev/generate_from_phonemes`` goes through the
pipeline as an SSML request whose one ``phoneme`` element holds the phonemes in the voice's own set
(``alphabet="x-voice"``), so it is keyed, cached and answered like any request.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from xml.sax.saxutils import quoteattr

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from streams.gateway.errors import ApiError
from streams.settings import Settings

__all__ = ["add_routes"]

# Kokoro-FastAPI's language codes (its KPipeline's): a/b English, z Mandarin, j Japanese
_LANG_VOICE = {"a": "heart", "b": "heart", "e": "heart", "z": "zm_yunjian", "j": "jf_alpha"}


class PhonemeBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str
    language: str = "a"
    voice: str | None = None


class FromPhonemesBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    phonemes: str
    voice: str


class _FrontEnds:
    """One engine per backend for ``/dev/phonemize``, loaded on first use (front end only is used)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._engines: dict[str, Any] = {}
        self._lock = threading.Lock()

    def engine_for(self, voice: str) -> Any:
        from engine import voices as engine_voices
        from engine.registry import load_engine

        info = engine_voices.voice_info(voice)
        backend = info.backend if info is not None else self.settings.engine.backend
        with self._lock:
            eng = self._engines.get(backend)
            if eng is None:
                if backend == "kokoro":
                    from engine.reload import open_engine
                    from engine.store import ModelStore

                    eng = open_engine(ModelStore(self.settings.effective_model_dir).current("kokoro"), threads=1)
                else:
                    eng = load_engine(backend, threads=1, warm_up=False)
                self._engines[backend] = eng
            return eng


def add_routes(app: FastAPI, settings: Settings, *, caller: Any, state: dict[str, Any], voices: Any) -> None:
    """Register the routes above on ``app``; ``caller(request)`` is the gateway's key lookup."""
    from streams.client import lexicons as lex

    fronts = _FrontEnds(settings)

    async def run(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _owned(name: str) -> str:
        if name.startswith("global/") or name == "global":
            raise ApiError(403, "Global lexicons are written by operators (ttsflow lexicon put global/NAME with the "
                                "ops principal), not through the gateway.", param="name", code="forbidden")
        return name

    @app.get("/v1/lexicons")
    async def list_lexicons(request: Request) -> dict[str, Any]:
        key = caller(request)
        return {"lexicons": await run(lex.list_lexicons, settings, key.user)}

    @app.put("/v1/lexicons/{name}")
    async def put_lexicon(request: Request, name: str) -> dict[str, Any]:
        key = caller(request)
        body = (await request.body()).decode("utf-8", "replace")
        if len(body) > settings.stage.lexicon_max_bytes:
            raise ApiError(413, f"The lexicon is {len(body)} bytes; the limit is {settings.stage.lexicon_max_bytes}.",
                           param="body", code="lexicon_too_large")
        try:
            ref = await run(lex.put_lexicon, settings, key.user, _owned(name), body)
        except lex.LexiconError as e:
            raise ApiError(400, f"{e}.", param="body", code="invalid_lexicon") from None
        return {"lexicon": ref}

    @app.get("/v1/lexicons/{name:path}")
    async def get_lexicon(request: Request, name: str) -> Response:
        key = caller(request)
        try:
            doc = await run(lex.get_lexicon, settings, key.user, name)
        except lex.LexiconError as e:
            raise ApiError(400, f"{e}.", param="name", code="invalid_value") from None
        if doc is None:
            raise ApiError(404, f"No lexicon {name[:64]!r}.", param="name", code="not_found")
        return Response(doc, media_type="application/pls+xml")

    @app.delete("/v1/lexicons/{name}")
    async def delete_lexicon(request: Request, name: str) -> dict[str, Any]:
        key = caller(request)
        try:
            gone = await run(lex.delete_lexicon, settings, key.user, _owned(name))
        except lex.LexiconError as e:
            raise ApiError(400, f"{e}.", param="name", code="invalid_value") from None
        if not gone:
            raise ApiError(404, f"No lexicon {name[:64]!r}.", param="name", code="not_found")
        return {"deleted": name}

    @app.post("/dev/phonemize")
    async def phonemize(request: Request, body: PhonemeBody) -> dict[str, Any]:
        caller(request)
        from streams.stage.core import StageCore
        from streams.stage.explain import explain

        voice = voices.resolve(body.voice) if body.voice else _LANG_VOICE.get(body.language, "heart")
        if not body.text.strip():
            raise ApiError(400, "text must not be empty.", param="text", code="empty_input")

        def work() -> dict[str, Any]:
            engine = fronts.engine_for(voice)
            core = StageCore(settings.stage, settings.kafka, settings.engine, voices=(voice,))
            res = explain(core, engine, body.text, voice=voice)
            if "error" in res:
                raise ApiError(400, f"{res['error']['message']}.", param="text", code=res["error"]["code"])
            phonemes = " ".join(ph for row in res["segments"] for ph in row.get("phonemes", []))
            vocab = getattr(getattr(engine, "backend", None), "_vocab", {}) or {}
            return {"phonemes": phonemes, "tokens": [int(vocab[c]) for c in phonemes if c in vocab]}

        return await run(work)  # type: ignore[no-any-return]

    @app.post("/dev/generate_from_phonemes")
    async def from_phonemes(request: Request, body: FromPhonemesBody) -> Response:
        key = caller(request)
        voice = voices.resolve(body.voice)
        ph = " ".join(body.phonemes.split())
        if not ph:
            raise ApiError(400, "phonemes must not be empty.", param="phonemes", code="empty_input")
        if len(ph) > 2048:
            raise ApiError(413, f"phonemes are {len(ph)} characters; the limit is 2048.", param="phonemes",
                           code="input_too_long")
        p = state["pipeline"]
        if p is None:
            raise ApiError(503, "The gateway is starting.", type="server_error", code="unavailable",
                           headers={"Retry-After": "1"})
        from streams.gateway.pipeline import failed_error, request_id_for

        rid = request_id_for(key.user, None)
        doc = f'<speak><phoneme alphabet="x-voice" ph={quoteattr(ph)}></phoneme></speak>'
        c, _ = await p.completion(rid=rid, user=key.user, text=doc, voice=voice, speed=1.0, idempotent=False,
                                  text_type="ssml")
        if c.status != "ok":
            raise failed_error(c)
        data = await p.audio(c)
        return Response(data, media_type="audio/wav", headers={"x-request-id": rid})
