"""The gateway's side of the pipeline: publish a request, wait for its one completion, fetch its audio.

Guarantees:

* One :class:`~streams.client.TTSClient` per gateway process: one idempotent murmur2
  producer keyed by the caller's user id, and one ``read_committed`` reader of every
  partition of ``tts.completed`` that dispatches completions to waiting requests by id.
  Every replica reads every partition, so the completion of a request reaches whichever
  replica waits for it.
* :func:`request_id_for`: an ``Idempotency-Key`` becomes ``idem-<sha256(user, key)>``, scoped
  to the caller (two users' equal keys are two requests) and never the caller's raw text.
  Without a key each call gets a fresh id.
* A retry with a key finds its completion, in this order: this replica's bounded map of
  recent completions (``TTS_GATEWAY_RECENT_MAX``); the client's reader (it keeps completions
  nobody waited for, e.g. ones another replica served); the republished request, which the
  stage drops as a repeat within its dedup window and the worker's done set never answers
  twice; and, for a completion that committed before this replica started (or fell out of
  its map), a scan of the caller's one partition of ``tts.completed`` over the last
  ``TTS_GATEWAY_LOOKUP_S`` seconds, run beside the wait. A retry therefore costs one
  synthesis at most, and returns the same audio.
* After ``TTS_GATEWAY_PROBE_S`` without a completion, the stage and worker groups are
  checked once; what is missing is logged and named in the 504 that follows if the wait
  runs out.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass

from schemas import Chunk, Completion, WordSpan
from streams.client import TTSClient
from streams.client.errors import ClientError, StackUnavailable
from streams.client.history import find_completion, pipeline_problems
from streams.gateway.audio import RATE
from streams.gateway.errors import ApiError
from streams.settings import Settings

__all__ = ["Pipeline", "Spoken", "request_id_for"]

_log = logging.getLogger("ttsflow.gateway")
_CHUNK_GRACE_S = 5.0  # after a streaming request's completion, how long its missing chunks are waited for

# failed completions' codes (schemas ErrorCode) -> HTTP status and OpenAI error type
_FAILED: dict[str, tuple[int, str]] = {
    "invalid_json": (400, "invalid_request_error"),
    "invalid_field": (400, "invalid_request_error"),
    "empty_text": (400, "invalid_request_error"),
    "unknown_voice": (400, "invalid_request_error"),
    "unsupported_format": (400, "invalid_request_error"),
    "unsupported_language": (400, "invalid_request_error"),
    "invalid_ssml": (400, "invalid_request_error"),
    "unknown_lexicon": (400, "invalid_request_error"),
    "text_too_long": (413, "invalid_request_error"),
    "audio_too_long": (413, "invalid_request_error"),
    "rate_limited": (429, "rate_limit_error"),  # the stage's per-user admission (TTS_USER_REQUESTS_PER_S)
    "storage_failed": (502, "server_error"),
    "part_missing": (502, "server_error"),
}
_PARAM = {"empty_text": "input", "text_too_long": "input", "unsupported_language": "input", "unknown_voice": "voice",
          "audio_too_long": "input"}


def request_id_for(user: str, idempotency_key: str | None) -> str:
    """The request id of a call: derived from (user, key) with a key, fresh without one."""
    if idempotency_key is None:
        return f"gw-{uuid.uuid4().hex}"
    return "idem-" + hashlib.sha256(f"ttsflow-idem-v1\0{user}\0{idempotency_key}".encode()).hexdigest()[:48]


@dataclass(frozen=True, slots=True)
class Spoken:
    completion: Completion
    audio: bytes  # the pipeline's audio (wav at RATE), sha256-checked
    found: str  # "new", "memory", "reader" or "topic": where the completion came from


def failed_error(c: Completion) -> ApiError:
    code = c.error.code if c.error else "unknown"
    msg = c.error.message if c.error else "the pipeline gave no reason"
    status, typ = _FAILED.get(code, (500, "server_error"))
    param = "voices" if msg.startswith("voices") else _PARAM.get(code)  # a voice map's language or voice
    headers = {"x-request-id": c.request_id}
    if status == 429:  # the stage's bucket refills continuously: a token is back within a second at >= 1/s
        headers["Retry-After"] = "1"
    return ApiError(status, msg, type=typ, param=param, code=code, headers=headers)


class Pipeline:
    """Publish, wait, fetch. Create it in the running event loop; ``close`` when done."""

    def __init__(self, settings: Settings, client: TTSClient) -> None:
        self.settings = settings
        self.gw = settings.gateway
        self.client = client
        self._recent: OrderedDict[str, Completion] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="ttsflow-gateway")

    @classmethod
    async def connect(cls, settings: Settings) -> Pipeline:
        loop = asyncio.get_running_loop()
        client = await loop.run_in_executor(
            None, lambda: TTSClient(settings, lookback_s=settings.gateway.gateway_reader_lookback_s, chunks=True, recent_max=settings.gateway.gateway_recent_max))
        # the S3 client now, not on the first chunk (seconds on a busy host: a voice agent's first audio)
        await loop.run_in_executor(None, lambda: client._store(settings.s3.s3_bucket))
        return cls(settings, client)

    def close(self) -> None:
        self.client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def healthy(self) -> bool:
        return self.client._failure is None and self.client._thread.is_alive()

    async def run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _remember(self, c: Completion) -> None:
        with self._lock:
            self._recent[c.request_id] = c
            self._recent.move_to_end(c.request_id)
            while len(self._recent) > self.gw.gateway_recent_max:
                self._recent.popitem(last=False)

    def _recalled(self, rid: str) -> Completion | None:
        with self._lock:
            return self._recent.get(rid)

    async def completion(self, *, rid: str, user: str, text: str, voice: str | None, speed: float,
                         idempotent: bool, stream: bool = False, timestamps: bool = False, text_type: str | None = None,
                         lexicons: list[str] | None = None, voices: dict[str, str] | None = None
                         ) -> tuple[Completion, str]:
        """The request's completion (ok or failed) and where it was found; raises :class:`ApiError`."""
        c = self._recalled(rid)
        if c is not None:
            return c, "memory"
        fut = self.client.wait_future(rid)
        if fut.done():
            return fut.result(), "reader"
        t0 = time.monotonic()
        try:
            await self.run(lambda: self.client.submit(text, user, voice=voice, format="wav", request_id=rid,
                                                      speed=speed, sample_rate=RATE, timeout=10.0, stream=stream,
                                                      timestamps=timestamps, text_type=text_type, lexicons=lexicons,
                                                      voices=voices))
        except StackUnavailable as e:
            self.client._forget(rid, fut)
            raise ApiError(503, f"The pipeline is unreachable: {e}", type="server_error", code="unavailable",
                           headers={"Retry-After": "5", "x-request-id": rid}) from None
        live: asyncio.Future[Completion] = asyncio.wrap_future(fut)
        waits: set[asyncio.Future[object]] = {live}  # type: ignore[arg-type]
        if idempotent and self.gw.gateway_lookup_s > 0:
            waits.add(asyncio.ensure_future(self.run(lambda: find_completion(
                self.settings.kafka, rid, user_id=user, since_s=self.gw.gateway_lookup_s, timeout=30.0))))
        problems: list[str] = []
        deadline = t0 + self.gw.gateway_wait_s
        probed = False
        try:
            while (left := deadline - time.monotonic()) > 0:
                step = left if probed else min(left, max(self.gw.gateway_probe_s - (time.monotonic() - t0), 0.01))
                done, _ = await asyncio.wait(waits, timeout=step, return_when=asyncio.FIRST_COMPLETED)
                if live in done:
                    try:
                        c = live.result()
                    except ClientError as e:  # the reader died: every waiter hears it
                        raise ApiError(503, f"The completions reader failed: {e}", type="server_error",
                                       code="unavailable", headers={"x-request-id": rid}) from None
                    self._remember(c)
                    return c, "new"
                for scan in done:
                    waits.discard(scan)
                    try:
                        found = scan.result()
                    except ClientError as e:
                        _log.warning("event=lookup_failed request_id=%s error=%r", rid, str(e))
                        continue
                    if isinstance(found, Completion):
                        self._remember(found)
                        return found, "topic"
                if not probed and time.monotonic() - t0 >= self.gw.gateway_probe_s:
                    probed = True
                    problems = await self.run(pipeline_problems, self.settings, 3.0)
                    for p in problems:
                        _log.warning("event=pipeline_not_running request_id=%s problem=%r", rid, p)
        finally:
            for w in waits:
                if w is not live:
                    w.cancel()
            self.client._forget(rid, fut)
        why = f" {' '.join(p[0].upper() + p[1:] + '.' for p in problems)}" if problems else ""
        raise ApiError(504, f"No completion for request {rid} within {self.gw.gateway_wait_s:g} s.{why} "
                            "Retry with the same Idempotency-Key to collect it when it is done.",
                       type="server_error", code="timeout", headers={"x-request-id": rid})

    async def events(self, *, rid: str, user: str, text: str, voice: str | None, speed: float,
                     idempotent: bool, timestamps: bool = False, text_type: str | None = None,
                     lexicons: list[str] | None = None, voices: dict[str, str] | None = None
                     ) -> AsyncIterator[Chunk | Completion]:
        """A streaming request: its chunks as each segment commits (in ``seq`` order), ending with
        the last chunk, or with its completion when that comes first (a failed request, or one
        answered before: from memory, the reader or the topic). Raises :class:`ApiError` 504 when
        nothing arrives within the wait."""
        c = self._recalled(rid)
        if c is not None:
            yield c
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Chunk | Completion] = asyncio.Queue()

        def on_chunk(ch: Chunk) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, ch)

        self.client.listen_chunks(rid, on_chunk)
        try:
            task = asyncio.ensure_future(self.completion(rid=rid, user=user, text=text, voice=voice, speed=speed,
                                                         idempotent=idempotent, stream=True, timestamps=timestamps,
                                                         text_type=text_type, lexicons=lexicons, voices=voices))
            task.add_done_callback(lambda t: None if t.cancelled() or t.exception() else queue.put_nowait(t.result()[0]))
            seen = 0
            pending: set[asyncio.Future[object]] = {task}  # type: ignore[arg-type]
            while True:
                get = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({get, *pending}, return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
                if task in done and task in pending:
                    pending.discard(task)  # (it runs on after the stream ends, to remember the completion)
                    task.result()  # raises the ApiError (504, 503) that ended the wait
                if get not in done:
                    get.cancel()
                    continue  # the completion is queued by the task's callback
                ev = get.result()
                if isinstance(ev, Completion):
                    # the last chunks commit with the completion, but reach this replica on another reader:
                    # wait a little for the ones not seen yet, so a streamed answer is never cut short
                    grace = loop.time() + _CHUNK_GRACE_S
                    while ev.status == "ok" and seen < ev.segments and (left := grace - loop.time()) > 0:
                        try:
                            late = await asyncio.wait_for(queue.get(), left)
                        except TimeoutError:
                            break
                        if isinstance(late, Chunk) and late.seq >= seen:
                            seen = late.seq + 1
                            yield late
                    yield ev
                    return
                if ev.seq < seen:  # each chunk is read once (read_committed); a repeat would be harmless
                    continue
                seen = ev.seq + 1
                yield ev
                if ev.last:
                    return
        finally:
            self.client.stop_listening(rid, on_chunk)

    async def part(self, ch: Chunk) -> bytes:
        try:
            data: bytes = await self.run(self.client.fetch_ref, ch.audio)
        except ClientError as e:
            raise ApiError(502, f"A part of request {ch.request_id} could not be fetched: {e}", type="server_error",
                           code="storage_failed", headers={"x-request-id": ch.request_id}) from None
        return data

    async def words(self, c: Completion) -> list[WordSpan] | None:
        """The completion's words (None when it has none: ``c.words_reason`` says why)."""
        if c.status != "ok":
            raise failed_error(c)
        if c.words is None:
            return None
        try:
            words: list[WordSpan] = await self.run(self.client.words, c)
        except ClientError as e:
            raise ApiError(502, f"The word timings of request {c.request_id} could not be fetched: {e}",
                           type="server_error", code="storage_failed", headers={"x-request-id": c.request_id}) from None
        return words

    async def audio(self, c: Completion) -> bytes:
        """The completion's audio bytes (sha256-checked); raises :class:`ApiError` for a failed one."""
        if c.status != "ok":
            raise failed_error(c)
        try:
            data: bytes = await self.run(self.client.fetch, c)
        except ClientError as e:
            raise ApiError(502, f"The audio of request {c.request_id} could not be fetched: {e}", type="server_error",
                           code="storage_failed", headers={"x-request-id": c.request_id}) from None
        return data
