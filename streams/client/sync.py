"""The ttsflow client: publish requests, wait for their completions, fetch the audio.

Guarantees:

* ``submit`` publishes with an idempotent producer (``enable.idempotence``, ``acks=all``)
  keyed by user id with ``partitioner=murmur2_random``, the mapping every ttsflow
  producer uses, so one user's requests keep their order. A blocking ``submit`` returns
  only once the broker acknowledged the request.
* One client reads ``tts.completed`` once: a single ``read_committed`` consumer (no
  group, every partition assigned) on one background thread dispatches completions to
  waiters by request id, however many requests are waited on. It starts ``lookback_s``
  before the client started, so a completion that committed just before is not missed.
* A completion that arrives before ``wait`` is called is kept: for ids this client
  submitted until ``wait`` takes them, for any other id in a bounded map of recent
  results (``recent_max`` entries, oldest dropped first).
* ``fetch`` returns the bytes only if their SHA-256 matches the completion's (``fetch_chunk``:
  the chunk's); so do ``words`` and ``captions`` (the word-timing object and caption files of a
  request submitted with ``timestamps=True``).
* ``stream`` publishes with ``stream: true`` and yields the request's :class:`~schemas.Chunk`
  events as they commit (a ``read_committed`` reader of ``tts.chunks``, one per client,
  started at the first ``stream`` before anything is published, so no chunk is missed), each
  once and in ``seq`` order, then its :class:`~schemas.Completion`. The worker commits a
  request's last chunk with or before its completion; a worker that produces no chunks
  still ends the stream: the completion comes after ``chunk_grace_s``.
* Errors are typed (``streams.errors``): :class:`StackUnavailable`,
  :class:`CompletionTimeout`, :class:`RequestFailed` (with the completion's error code
  and message), :class:`AudioFetchError`.

The asyncio form is :mod:`streams.client.aio`.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import Any

import msgspec

from schemas import (
    AudioRef,
    Chunk,
    Completion,
    ObjectRef,
    Request,
    SchemaError,
    WordSpan,
    decode_completion,
    decode_word_timings,
    encode,
)
from streams.client.audio import audio_ref, fetch_audio, fetch_chunk, raise_if_failed, write_atomic
from streams.client.chunks import ChunkReader
from streams.client.errors import AudioFetchError, CompletionTimeout, NoWords, StackUnavailable
from streams.client.history import probe_kafka
from streams.client.readers import librdkafka_logger, partitions, reader, start_offsets
from streams.kafka.consumer import consume_ready
from streams.settings import Settings, load_settings

__all__ = ["TTSClient"]

_CHUNK_GRACE_S = 5.0  # after the completion, how long stream() waits for chunks not yet seen

_log = logging.getLogger("ttsflow.client")


class TTSClient:
    """Submit requests, wait for completions, fetch audio. Thread-safe; close it when done."""

    def __init__(self, settings: Settings | None = None, *, lookback_s: float = 30.0, recent_max: int = 10_000,
                 connect_timeout: float = 5.0, chunks: bool = False) -> None:
        """``chunks``: start the ``tts.chunks`` reader now (else at the first :meth:`stream` or
        :meth:`listen_chunks`); it hands each chunk to the listeners registered for its request,
        so a streaming caller registers before it submits."""
        from confluent_kafka import Producer

        from streams.kafka import producer_config

        self.settings = settings or load_settings()
        self.kafka, self.s3 = self.settings.kafka, self.settings.s3  # all a client uses
        self.connect_timeout = connect_timeout
        probe_kafka(self.kafka, connect_timeout)
        # linger 0: a caller waits for this answer, so its request goes out at once (5 ms of librdkafka's
        # linger was part of every gateway answer); a burst still shares produce requests while one is in flight
        self._producer = Producer(producer_config(self.kafka, logger=librdkafka_logger(), **{"linger.ms": 0}))
        self._lock = threading.Lock()
        self._waiters: dict[str, list[concurrent.futures.Future[Completion]]] = {}
        self._expected: set[str] = set()  # submitted here and not yet taken by wait()
        self._held: dict[str, Completion] = {}  # completions of expected ids
        self._recent: OrderedDict[str, Completion] = OrderedDict()
        self._recent_max = recent_max
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._consumer = reader(self.kafka)
        try:
            since = int((time.time() - lookback_s) * 1000)
            parts = partitions(self._consumer, self.kafka.topic_completed, connect_timeout)
            self._consumer.assign(start_offsets(self._consumer, self.kafka.topic_completed, parts, since,
                                                 connect_timeout))
        except Exception:
            self._consumer.close()
            raise
        self._thread = threading.Thread(target=self._run, name="ttsflow-client-completions", daemon=True)
        self._thread.start()
        self._s3: Any = None
        self._chunk_reader: ChunkReader | None = None
        if chunks:
            self._chunks()

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        if self._chunk_reader is not None:
            self._chunk_reader.close()
        self._producer.flush(10)
        if self._s3 is not None:
            self._s3.close()

    def __enter__(self) -> TTSClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one completions reader --------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for m in consume_ready(self._consumer, 500, 0.2):
                    if m.error() is not None:
                        from confluent_kafka import KafkaError

                        if m.error().code() == KafkaError._PARTITION_EOF:
                            continue
                        if m.error().fatal():
                            raise StackUnavailable(f"completions reader: {m.error().str()}")
                        continue  # transient: librdkafka retries by itself
                    try:
                        c = decode_completion(m.value())
                    except SchemaError as e:
                        _log.warning("event=bad_completion partition=%s offset=%s error=%s",
                                     m.partition(), m.offset(), e)
                        continue
                    self._dispatch(c)
        except BaseException as e:  # surfaced to every waiter and every later wait()
            self._failure = e
            with self._lock:
                waiters, self._waiters = self._waiters, {}
            for futs in waiters.values():
                for f in futs:
                    f.set_exception(e)
        finally:
            self._consumer.close()

    def listen_chunks(self, request_id: str, listener: Callable[[Chunk], None]) -> None:
        """Call ``listener(chunk)`` on the chunks reader's thread for each chunk of ``request_id``."""
        self._chunks().add(request_id, listener)

    def stop_listening(self, request_id: str, listener: Callable[[Chunk], None]) -> None:
        self._chunks().remove(request_id, listener)

    def _dispatch(self, c: Completion) -> None:
        with self._lock:
            futs = [f for f in self._waiters.pop(c.request_id, ()) if not f.done()]
            if futs:
                self._expected.discard(c.request_id)
            elif c.request_id in self._expected:
                self._held[c.request_id] = c
            else:
                self._recent[c.request_id] = c
                self._recent.move_to_end(c.request_id)
                while len(self._recent) > self._recent_max:
                    self._recent.popitem(last=False)
        for f in futs:
            if f.set_running_or_notify_cancel():
                f.set_result(c)

    # -- submit ----------------------------------------------------------------------------
    def submit(self, text: str, user_id: str, voice: str | None = None, format: str = "wav",
               request_id: str | None = None, *, speed: float = 1.0, sample_rate: int | None = None,
               block: bool = True, timeout: float = 30.0, stream: bool = False, priority: str = "interactive",
               text_type: str | None = None, lexicons: list[str] | None = None, timestamps: bool = False,
               voices: dict[str, str] | None = None) -> str:
        """Publish one request; returns its id. ``block`` waits for the broker's ack. ``stream`` asks
        the worker for a chunk per segment on ``tts.chunks`` (see :meth:`stream`); ``priority`` is
        ``interactive`` or ``bulk`` (audiobooks, backfills: yields to interactive work for a while);
        ``text_type`` ``ssml`` reads ``text`` as SSML, ``text`` as it is, None (the default) as SSML when
        it is one ``<speak>`` document; ``lexicons`` names up to 5 lexicons to apply;
        ``timestamps`` asks for every word's time (:meth:`words`, :meth:`captions`; chunks carry theirs);
        ``voices`` picks the voice of each language of a mixed-language text (``{"ja": "jf_alpha", "en":
        "heart"}``; the rest is spoken by ``voice``; docs/using/voices.md#per-language-voices)."""
        rid = request_id or uuid.uuid4().hex
        from datetime import UTC, datetime

        req = Request(request_id=rid, user_id=user_id, text=text, voice=voice, format=format, speed=speed,
                      sample_rate=sample_rate, created_at=datetime.now(UTC), stream=stream, priority=priority,  # type: ignore[arg-type]
                      text_type=msgspec.UNSET if text_type is None else text_type,  # type: ignore[arg-type]
                      lexicons=lexicons, timestamps=timestamps, voices=voices or None)
        with self._lock:
            self._expected.add(rid)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                done.set_exception(StackUnavailable(f"request {rid} not delivered: {err.str()}"))
            else:
                done.set_result(None)

        while True:
            try:
                self._producer.produce(self.kafka.topic_requests, key=user_id.encode(), value=encode(req),
                                       on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain, then retry
                self._producer.poll(0.1)
        if not block:
            self._producer.poll(0)
            return rid
        deadline = time.monotonic() + timeout
        while not done.done():
            if time.monotonic() > deadline:
                raise StackUnavailable(f"request {rid} not acknowledged within {timeout:g} s; is Kafka up?")
            self._producer.poll(0.05)
        done.result()
        return rid

    # -- pronunciation lexicons (streams.client.lexicons) ---------------------------------
    def put_lexicon(self, user_id: str, name: str, pls: str) -> str:
        """Store (or replace) ``user_id``'s lexicon ``name`` (a W3C PLS document); returns
        ``owner/name@version``. Raises ``LexiconError`` with the reason for a bad one."""
        from streams.client import lexicons

        return lexicons.put_lexicon(self.settings, user_id, name, pls)

    def get_lexicon(self, user_id: str, name: str) -> str | None:
        """The PLS document of ``user_id``'s lexicon ``name`` (``global/<name>`` for a global one), or None."""
        from streams.client import lexicons

        return lexicons.get_lexicon(self.settings, user_id, name)

    def list_lexicons(self, user_id: str) -> list[dict[str, Any]]:
        """``user_id``'s lexicons and the global ones: key, version, entries."""
        from streams.client import lexicons

        return lexicons.list_lexicons(self.settings, user_id)

    def delete_lexicon(self, user_id: str, name: str) -> bool:
        """Delete ``user_id``'s lexicon ``name`` (a tombstone); False if there was none."""
        from streams.client import lexicons

        return lexicons.delete_lexicon(self.settings, user_id, name)

    def _produce(self, user_id: str, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(self.kafka.topic_requests, key=user_id.encode(), value=value)
                break
            except BufferError:  # local queue full: let deliveries drain, then retry
                self._producer.poll(0.1)
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for every non-blocking submit's ack; returns how many are still unacknowledged."""
        return int(self._producer.flush(timeout))

    # -- wait ------------------------------------------------------------------------------
    def wait_future(self, request_id: str) -> concurrent.futures.Future[Completion]:
        """A future resolved with the request's completion (ok or failed) by the reader thread."""
        f: concurrent.futures.Future[Completion] = concurrent.futures.Future()
        with self._lock:
            c = self._held.pop(request_id, None) or self._recent.pop(request_id, None)
            if c is not None:
                self._expected.discard(request_id)
                f.set_result(c)
                return f
            if self._failure is not None:
                f.set_exception(self._failure)
                return f
            self._waiters.setdefault(request_id, []).append(f)
        return f

    def _forget(self, request_id: str, f: concurrent.futures.Future[Completion]) -> None:
        with self._lock:
            futs = self._waiters.get(request_id)
            if futs and f in futs:
                futs.remove(f)
                if not futs:
                    del self._waiters[request_id]

    def wait(self, request_id: str, timeout: float = 60.0, *, raise_on_failure: bool = True) -> Completion:
        """The request's completion. Raises :class:`CompletionTimeout`, or
        :class:`RequestFailed` for a failed completion unless ``raise_on_failure`` is false."""
        f = self.wait_future(request_id)
        try:
            c = f.result(timeout)
        except concurrent.futures.TimeoutError:
            self._forget(request_id, f)
            raise CompletionTimeout(request_id, timeout) from None
        if raise_on_failure:
            raise_if_failed(c)
        return c

    # -- streaming ------------------------------------------------------------------------
    def _chunks(self) -> ChunkReader:
        with self._lock:
            if self._chunk_reader is None:
                self._chunk_reader = ChunkReader(self.kafka, self.connect_timeout)
            return self._chunk_reader

    def stream(self, text: str, user_id: str, voice: str | None = None, format: str = "wav",
               request_id: str | None = None, *, speed: float = 1.0, sample_rate: int | None = None,
               priority: str = "interactive", timeout: float = 120.0, raise_on_failure: bool = True,
               chunk_grace_s: float = _CHUNK_GRACE_S, timestamps: bool = False, text_type: str | None = None,
               lexicons: list[str] | None = None, voices: dict[str, str] | None = None
               ) -> Generator[Chunk | Completion, None, None]:
        """Publish a streaming request (when iteration starts) and yield its chunks as they commit,
        once each and in ``seq`` order, then its completion (last). A chunk's ``audio`` is one
        segment's audio (a WAV part at the engine's rate; :meth:`fetch_chunk` downloads it); the
        completion's is the whole request in ``format``. Raises :class:`CompletionTimeout` when
        no completion comes within ``timeout``, :class:`RequestFailed` for a failed one (after the
        chunks that came) unless ``raise_on_failure`` is false. With ``timestamps`` each chunk carries
        its ``words`` (times in the chunk's audio; ``chunk.offset_s`` is where it starts in the request).
        ``text_type`` and ``lexicons`` as for :meth:`submit`; an SSML document's marks come on
        ``chunk.marks`` (times in the chunk's audio) and the completion's ``marks`` (in the joined audio)."""
        rid = request_id or uuid.uuid4().hex

        def publish() -> float:
            self.submit(text, user_id, voice=voice, format=format, request_id=rid, speed=speed,
                        sample_rate=sample_rate, stream=True, priority=priority, timestamps=timestamps,
                        text_type=text_type, lexicons=lexicons, voices=voices)
            return time.monotonic() + timeout

        yield from self._follow(rid, publish, timeout, raise_on_failure, chunk_grace_s)

    def open_text(self, user_id: str, voice: str | None = None, format: str = "wav", request_id: str | None = None,
                  *, speed: float = 1.0, sample_rate: int | None = None, stream: bool = True,
                  priority: str = "interactive", timestamps: bool = False) -> TextPieces:
        """A request whose text is still being written: :meth:`TextPieces.write` each piece as it comes,
        :meth:`TextPieces.close` after the last (docs/using/streaming-input.md)."""
        return TextPieces(self, user_id, request_id or uuid.uuid4().hex, voice=voice, format=format, speed=speed,
                          sample_rate=sample_rate, stream=stream, priority=priority, timestamps=timestamps)

    def stream_text(self, pieces: Iterable[str], user_id: str, voice: str | None = None, format: str = "wav",
                    request_id: str | None = None, *, speed: float = 1.0, sample_rate: int | None = None,
                    priority: str = "interactive", timeout: float = 120.0, raise_on_failure: bool = True,
                    chunk_grace_s: float = _CHUNK_GRACE_S) -> Generator[Chunk | Completion, None, None]:
        """Speak text while it is being written: ``pieces`` (a language model's tokens, lines typed) are
        sent as they come, from a thread, and the request's chunks are yielded as they commit, once
        each and in order, then its completion. ``timeout`` counts from the last piece."""
        text = self.open_text(user_id, voice, format, request_id, speed=speed, sample_rate=sample_rate,
                              priority=priority)
        sent: concurrent.futures.Future[float] = concurrent.futures.Future()

        def feed() -> None:
            try:
                for piece in pieces:
                    text.write(piece)
                text.close()
                sent.set_result(time.monotonic() + timeout)
            except BaseException as e:  # the iterator or the broker: the caller hears it
                sent.set_exception(e)

        def publish() -> float:
            threading.Thread(target=feed, name=f"ttsflow-pieces-{text.request_id[:8]}", daemon=True).start()
            return float("inf")

        yield from self._follow(text.request_id, publish, timeout, raise_on_failure, chunk_grace_s, sent=sent)

    def _follow(self, rid: str, publish: Callable[[], float], timeout: float, raise_on_failure: bool,
                chunk_grace_s: float, *, sent: concurrent.futures.Future[float] | None = None,
                ) -> Generator[Chunk | Completion, None, None]:
        """Listen for ``rid``'s chunks, ``publish`` (it returns the deadline), yield the chunks in order, then
        the completion. ``sent``: the deadline once the last piece went out (a request sent in pieces)."""
        reader = self._chunks()
        q: queue.Queue[Chunk] = queue.Queue()
        reader.add(rid, q.put)  # before publishing: no chunk of it can come earlier
        f: concurrent.futures.Future[Completion] | None = None
        try:
            f = self.wait_future(rid)
            deadline = publish()
            pending: dict[int, Chunk] = {}
            next_seq = 0
            completion: Completion | None = None
            grace_end = 0.0
            while True:
                try:
                    item = q.get(timeout=0.02)
                except queue.Empty:
                    item = None
                if item is None and reader.failure is not None:
                    raise reader.failure
                if item is not None and item.seq >= next_seq:
                    pending[item.seq] = item  # a repeat of a seq already yielded is dropped
                while next_seq in pending:
                    yield pending.pop(next_seq)
                    next_seq += 1
                if completion is None and f.done():
                    completion = f.result()
                    grace_end = time.monotonic() + chunk_grace_s
                if completion is not None and (completion.status == "failed" or next_seq >= completion.segments
                                               or time.monotonic() > grace_end):
                    break
                if sent is not None and sent.done():
                    deadline = sent.result()  # raises what stopped the pieces
                    sent = None
                if completion is None and time.monotonic() > deadline:
                    raise CompletionTimeout(rid, timeout)
            if raise_on_failure:
                raise_if_failed(completion)
            yield completion
        finally:
            reader.remove(rid, q.put)
            if f is not None and not f.done():
                self._forget(rid, f)

    def fetch_chunk(self, chunk: Chunk) -> bytes:
        """A chunk's audio (one segment), checked against its sha256."""
        return fetch_chunk(self.s3, chunk, store=self._store(chunk.audio.bucket))

    # -- audio -----------------------------------------------------------------------------
    def _store(self, bucket: str) -> Any:
        from storage import AudioStore

        if self._s3 is None or self._s3.bucket != bucket:
            if self._s3 is not None:
                self._s3.close()
            self._s3 = AudioStore.from_section(self.s3, bucket=bucket, prefix="")
        return self._s3

    def fetch(self, completion: Completion) -> bytes:
        """The completion's audio, checked against its sha256."""
        return fetch_audio(self.s3, completion, store=self._store(audio_ref(completion).bucket))

    def fetch_ref(self, ref: AudioRef | ObjectRef) -> bytes:
        """The bytes of one stored object (a chunk's part), checked against its sha256."""
        from storage import StorageError

        try:
            data: bytes = self._store(ref.bucket).get(ref.key)
        except StorageError as e:
            raise AudioFetchError(f"audio at s3://{ref.bucket}/{ref.key}: {e}") from e
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise AudioFetchError(f"audio at s3://{ref.bucket}/{ref.key} does not match its sha256")
        return data

    def fetch_object(self, ref: ObjectRef) -> bytes:
        """The bytes of an object a completion points at (word timings, captions), checked against its sha256."""
        return self.fetch_ref(ref)

    def words(self, completion: Completion) -> list[WordSpan]:
        """Every word of a request submitted with ``timestamps=True``: ``start``/``end`` offsets into
        its text as sent, ``start_s``/``end_s`` in its audio. Raises :class:`RequestFailed` for a
        failed request, :class:`NoWords` (with the completion's ``words_reason``) when it has none."""
        raise_if_failed(completion)
        if completion.words is None:
            raise NoWords(completion.request_id, completion.words_reason)
        return decode_word_timings(self.fetch_object(completion.words)).words

    def captions(self, completion: Completion, fmt: str = "vtt") -> str:
        """The request's captions as a ``vtt`` (WebVTT) or ``srt`` file's text (see :meth:`words`)."""
        raise_if_failed(completion)
        ref = (completion.captions or {}).get(fmt)
        if fmt not in ("vtt", "srt"):
            raise ValueError(f"captions come as vtt or srt, not {fmt!r}")
        if ref is None:
            raise NoWords(completion.request_id, completion.words_reason)
        return self.fetch_object(ref).decode("utf-8")

    def save(self, completion: Completion, path: str | os.PathLike[str]) -> Path:
        """Write the completion's audio to ``path`` (atomically) and return the path."""
        return write_atomic(Path(path), self.fetch(completion))

    def say(self, text: str, user_id: str, path: str | os.PathLike[str], *, voice: str | None = None,
            format: str = "wav", timeout: float = 120.0, timestamps: bool = False,
            voices: dict[str, str] | None = None) -> Completion:
        """Submit, wait and save in one call."""
        rid = self.submit(text, user_id, voice=voice, format=format, timestamps=timestamps, voices=voices)
        c = self.wait(rid, timeout)
        self.save(c, path)
        return c


class TextPieces:
    """A request sent in pieces (:meth:`TTSClient.open_text`): numbered pieces of one request id and key;
    piece 0 carries the settings. Not thread-safe: write from one thread."""

    def __init__(self, client: TTSClient, user_id: str, request_id: str, *, voice: str | None, format: str,
                 speed: float, sample_rate: int | None, stream: bool, priority: str, timestamps: bool = False) -> None:
        from datetime import UTC, datetime

        self.client, self.user_id, self.request_id = client, user_id, request_id
        self._first = Request(request_id=request_id, user_id=user_id, text="", voice=voice, format=format,
                              speed=speed, sample_rate=sample_rate, created_at=datetime.now(UTC), stream=stream,
                              priority=priority, seq=0, timestamps=timestamps)  # type: ignore[arg-type]
        self.seq = 0
        self.closed = False
        with client._lock:
            client._expected.add(request_id)

    def write(self, text: str, *, flush: bool = False, final: bool = False) -> None:
        """Send one piece (``flush``: speak what is held now; ``final``: the last piece)."""
        if self.closed:
            raise ValueError(f"request {self.request_id} was closed")
        if self.seq == 0:
            req = msgspec.structs.replace(self._first, text=text, flush=flush, final=final)
        else:
            req = Request(request_id=self.request_id, user_id=self.user_id, text=text, seq=self.seq, flush=flush,
                          final=final)
        self.seq += 1
        self.closed = final
        self.client._produce(self.user_id, encode(req))

    def flush(self) -> None:
        self.write("", flush=True)

    def close(self, timeout: float = 30.0) -> str:
        """Send the final piece and wait for every piece's ack; the request id."""
        if not self.closed:
            self.write("", final=True)
        if self.client.flush(timeout):
            raise StackUnavailable(f"pieces of request {self.request_id} not acknowledged within {timeout:g} s")
        return self.request_id
