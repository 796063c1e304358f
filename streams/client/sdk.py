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
  the chunk's).
* ``stream`` publishes with ``stream: true`` and yields the request's :class:`~schemas.Chunk`
  events as they commit (a ``read_committed`` reader of ``tts.chunks``, one per client,
  started at the first ``stream`` before anything is published, so no chunk is missed), each
  once and in ``seq`` order, then its :class:`~schemas.Completion`. The worker commits a
  request's last chunk with or before its completion; a worker that produces no chunks
  still ends the stream: the completion comes after ``chunk_grace_s``.
* Errors are typed (``streams.errors``): :class:`StackUnavailable`,
  :class:`CompletionTimeout`, :class:`RequestFailed` (with the completion's error code
  and message), :class:`AudioFetchError`.

``AsyncTTSClient`` is the same machinery for asyncio: its awaits bridge the background
thread's futures into the event loop and run blocking calls in the default executor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import os
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from schemas import AudioRef, Chunk, Completion, Request, SchemaError, decode_chunk, decode_completion, encode
from streams.client.errors import AccessDenied, AudioFetchError, CompletionTimeout, RequestFailed, StackUnavailable
from streams.kafka.consumer import consume_ready
from streams.settings import KafkaSettings, S3Settings, Settings, load_settings

__all__ = ["AsyncTTSClient", "TTSClient", "fetch_audio", "fetch_chunk", "find_completion", "pipeline_problems",
           "probe_kafka", "tail_completions"]

_CHUNK_GRACE_S = 5.0  # after the completion, how long stream() waits for chunks not yet seen

_log = logging.getLogger("ttsflow.client")


def probe_kafka(kafka: KafkaSettings, timeout: float = 3.0) -> None:
    """Raise :class:`StackUnavailable` unless the broker answers a metadata request in time, and
    :class:`~streams.errors.KafkaAccessError` at once when it refuses this client (login, TLS)."""
    from streams.errors import KafkaAccessError, RetriableError
    from streams.kafka.access import connect

    try:
        connect(kafka, timeout_s=timeout)
    except KafkaAccessError as e:
        raise AccessDenied(str(e)) from None
    except RetriableError as e:
        raise StackUnavailable(f"{e}; is the stack up? (ttsflow stack up)") from None


def _logger_sink() -> logging.Logger:
    lg = logging.getLogger("ttsflow.client.librdkafka")
    lg.propagate = False
    lg.addHandler(logging.NullHandler())
    return lg


def _reader(kafka: KafkaSettings, **extra: Any) -> Any:
    from confluent_kafka import Consumer

    from streams.kafka.config import reader_config

    return Consumer(reader_config(kafka, **{"group.id": f"ttsflow-client-{uuid.uuid4().hex[:12]}",  # never joins
                                            "logger": _logger_sink(), **extra}))


def _partitions(consumer: Any, topic: str, timeout: float) -> list[int]:
    md = consumer.list_topics(topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise StackUnavailable(f"topic {topic} does not exist on the broker (ttsflow stack up creates it)")
    return sorted(t.partitions)


def _start_offsets(consumer: Any, topic: str, parts: list[int], since_ms: int, timeout: float) -> list[Any]:
    from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

    want = [TopicPartition(topic, p, since_ms) for p in parts]
    deadline = time.monotonic() + timeout
    while True:  # a topic created a moment ago may not have a leader yet
        try:
            got = consumer.offsets_for_times(want, timeout=max(deadline - time.monotonic(), 0.1))
            break
        except KafkaException as e:
            if time.monotonic() >= deadline:
                raise StackUnavailable(f"could not look up offsets of {topic}: {e.args[0].str()}") from None
            time.sleep(0.1)  # back-off between retries of a retriable broker answer
    # -1: nothing at or after the timestamp in that partition: start at its end as of now, a concrete
    # offset (the last stable one: read_committed). A logical OFFSET_END would be resolved only when
    # the fetcher starts, after the caller may have published, and an answer landing in between
    # would never be seen (a fast pipeline on a fresh topic, a loaded machine).
    out = []
    for tp in got:
        offset = tp.offset
        if offset < 0:
            try:
                marks = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                       timeout=max(deadline - time.monotonic(), 1.0), cached=False)
            except KafkaException:
                marks = None
            offset = marks[1] if marks is not None else OFFSET_END  # None: timed out
        out.append(TopicPartition(topic, tp.partition, offset))
    return out


def pipeline_problems(settings: Settings, timeout: float = 3.0) -> list[str]:
    """What stops a request from being answered now, one sentence each: no active member in the
    stage's group or the worker group (empty: both have members). Costs two admin requests."""
    from streams.kafka.admin import group_members

    out = []
    for group, what, start in ((settings.stage.stage_app_id, "stage", "ttsflow stage"),
                               (settings.kafka.worker_group, "worker", "ttsflow worker")):
        if group_members(settings.kafka, group, timeout) == 0:
            out.append(f"no {what} is running (consumer group {group!r} has no active members; start one: {start}, "
                       f"or everything at once: ttsflow run)")
    return out


class _ChunkReader:
    """One ``read_committed`` reader of ``tts.chunks`` on a thread of its own: each chunk of a
    request id with listeners goes to them (on this thread); chunks nobody listens for are
    dropped, so a streaming caller registers before it publishes. A failure of the reader is
    kept in :attr:`failure` for the callers to raise."""

    def __init__(self, kafka: KafkaSettings, connect_timeout: float, lookback_s: float = 5.0) -> None:
        self._consumer = _reader(kafka)
        try:
            parts = _partitions(self._consumer, kafka.topic_chunks, connect_timeout)
            since = int((time.time() - lookback_s) * 1000)
            self._consumer.assign(_start_offsets(self._consumer, kafka.topic_chunks, parts, since, connect_timeout))
        except Exception:
            self._consumer.close()
            raise
        self._lock = threading.Lock()
        self._listeners: dict[str, list[Callable[[Chunk], None]]] = {}
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ttsflow-client-chunks", daemon=True)
        self._thread.start()

    def add(self, request_id: str, listener: Callable[[Chunk], None]) -> None:
        with self._lock:
            self._listeners.setdefault(request_id, []).append(listener)

    def remove(self, request_id: str, listener: Callable[[Chunk], None]) -> None:
        with self._lock:
            ls = self._listeners.get(request_id, [])
            if listener in ls:
                ls.remove(listener)
            if not ls:
                self._listeners.pop(request_id, None)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for m in consume_ready(self._consumer, 500, 0.1):
                    if m.error() is not None:
                        if m.error().fatal():
                            raise StackUnavailable(f"chunks reader: {m.error().str()}")
                        continue  # transient (or end of partition): librdkafka retries by itself
                    try:
                        ch = decode_chunk(m.value())
                    except SchemaError as e:
                        _log.warning("event=bad_chunk partition=%s offset=%s error=%s", m.partition(), m.offset(), e)
                        continue
                    with self._lock:
                        listeners = list(self._listeners.get(ch.request_id, ()))
                    for listener in listeners:
                        listener(ch)
        except BaseException as e:
            self.failure = e
        finally:
            self._consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


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
        self._producer = Producer(producer_config(self.kafka, logger=_logger_sink()))
        self._lock = threading.Lock()
        self._waiters: dict[str, list[concurrent.futures.Future[Completion]]] = {}
        self._expected: set[str] = set()  # submitted here and not yet taken by wait()
        self._held: dict[str, Completion] = {}  # completions of expected ids
        self._recent: OrderedDict[str, Completion] = OrderedDict()
        self._recent_max = recent_max
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._consumer = _reader(self.kafka)
        try:
            since = int((time.time() - lookback_s) * 1000)
            parts = _partitions(self._consumer, self.kafka.topic_completed, connect_timeout)
            self._consumer.assign(_start_offsets(self._consumer, self.kafka.topic_completed, parts, since,
                                                 connect_timeout))
        except Exception:
            self._consumer.close()
            raise
        self._thread = threading.Thread(target=self._run, name="ttsflow-client-completions", daemon=True)
        self._thread.start()
        self._s3: Any = None
        self._chunk_reader: _ChunkReader | None = None
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
               block: bool = True, timeout: float = 30.0, stream: bool = False, priority: str = "interactive") -> str:
        """Publish one request; returns its id. ``block`` waits for the broker's ack. ``stream`` asks
        the worker for a chunk per segment on ``tts.chunks`` (see :meth:`stream`); ``priority`` is
        ``interactive`` or ``bulk`` (audiobooks, backfills: yields to interactive work for a while)."""
        rid = request_id or uuid.uuid4().hex
        from datetime import UTC, datetime

        req = Request(request_id=rid, user_id=user_id, text=text, voice=voice, format=format, speed=speed,
                      sample_rate=sample_rate, created_at=datetime.now(UTC), stream=stream,
                      priority=priority)  # type: ignore[arg-type]
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
            _raise_if_failed(c)
        return c

    # -- streaming ------------------------------------------------------------------------
    def _chunks(self) -> _ChunkReader:
        with self._lock:
            if self._chunk_reader is None:
                self._chunk_reader = _ChunkReader(self.kafka, self.connect_timeout)
            return self._chunk_reader

    def stream(self, text: str, user_id: str, voice: str | None = None, format: str = "wav",
               request_id: str | None = None, *, speed: float = 1.0, sample_rate: int | None = None,
               priority: str = "interactive", timeout: float = 120.0, raise_on_failure: bool = True,
               chunk_grace_s: float = _CHUNK_GRACE_S) -> Generator[Chunk | Completion, None, None]:
        """Publish a streaming request (when iteration starts) and yield its chunks as they commit,
        once each and in ``seq`` order, then its completion (last). A chunk's ``audio`` is one
        segment's audio (a WAV part at the engine's rate; :meth:`fetch_chunk` downloads it); the
        completion's is the whole request in ``format``. Raises :class:`CompletionTimeout` when
        no completion comes within ``timeout``, :class:`RequestFailed` for a failed one (after the
        chunks that came) unless ``raise_on_failure`` is false."""
        rid = request_id or uuid.uuid4().hex
        reader = self._chunks()
        q: queue.Queue[Chunk] = queue.Queue()
        reader.add(rid, q.put)  # before publishing: no chunk of it can come earlier
        f: concurrent.futures.Future[Completion] | None = None
        try:
            self.submit(text, user_id, voice=voice, format=format, request_id=rid, speed=speed,
                        sample_rate=sample_rate, stream=True, priority=priority)
            f = self.wait_future(rid)
            deadline = time.monotonic() + timeout
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
                if completion is None and time.monotonic() > deadline:
                    raise CompletionTimeout(rid, timeout)
            if raise_on_failure:
                _raise_if_failed(completion)
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
        return fetch_audio(self.s3, completion, store=self._store(_audio(completion).bucket))

    def fetch_ref(self, ref: AudioRef) -> bytes:
        """The bytes of one stored object (a chunk's part), checked against its sha256."""
        from storage import StorageError

        try:
            data: bytes = self._store(ref.bucket).get(ref.key)
        except StorageError as e:
            raise AudioFetchError(f"audio at s3://{ref.bucket}/{ref.key}: {e}") from e
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise AudioFetchError(f"audio at s3://{ref.bucket}/{ref.key} does not match its sha256")
        return data

    def save(self, completion: Completion, path: str | os.PathLike[str]) -> Path:
        """Write the completion's audio to ``path`` (atomically) and return the path."""
        return _write_atomic(Path(path), self.fetch(completion))

    def say(self, text: str, user_id: str, path: str | os.PathLike[str], *, voice: str | None = None,
            format: str = "wav", timeout: float = 120.0) -> Completion:
        """Submit, wait and save in one call."""
        rid = self.submit(text, user_id, voice=voice, format=format)
        c = self.wait(rid, timeout)
        self.save(c, path)
        return c


def _raise_if_failed(c: Completion) -> None:
    if c.status == "failed":
        code = c.error.code if c.error else "unknown"
        msg = c.error.message if c.error else "no error detail in the completion"
        raise RequestFailed(c.request_id, code, msg, completion=c)


def _audio(c: Completion) -> Any:
    _raise_if_failed(c)
    if c.audio is None:
        raise AudioFetchError(f"completion of {c.request_id!r} carries no audio reference")
    return c.audio


def fetch_audio(s3: S3Settings, completion: Completion, *, store: Any = None) -> bytes:
    """Download a completion's audio and verify its SHA-256; :class:`AudioFetchError` otherwise."""
    return _fetch_ref(s3, _audio(completion), repr(completion.request_id), store)


def fetch_chunk(s3: S3Settings, chunk: Chunk, *, store: Any = None) -> bytes:
    """Download one chunk's audio and verify its SHA-256; :class:`AudioFetchError` otherwise."""
    return _fetch_ref(s3, chunk.audio, f"{chunk.request_id!r} chunk {chunk.seq}", store)


def _fetch_ref(s3: S3Settings, a: AudioRef, what: str, store: Any) -> bytes:
    from storage import AudioStore, StorageError

    own = store is None
    if own:
        store = AudioStore.from_section(s3, bucket=a.bucket, prefix="")
    try:
        data: bytes = store.get(a.key)
    except StorageError as e:
        raise AudioFetchError(f"audio of {what} at s3://{a.bucket}/{a.key}: {e}") from e
    finally:
        if own:
            store.close()
    digest = hashlib.sha256(data).hexdigest()
    if digest != a.sha256:
        raise AudioFetchError(f"audio of {what} at s3://{a.bucket}/{a.key} has sha256 "
                              f"{digest}, its event says {a.sha256}")
    return data


def _write_atomic(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


# --- reading tts.completed without a client ---------------------------------------------------

def tail_completions(kafka: KafkaSettings, *, from_beginning: bool = False, lookback_s: float = 0.0,
                     stop: threading.Event | None = None, poll_s: float = 0.5) -> Iterator[tuple[Completion, Any]]:
    """Yield (completion, message) as they commit, from the end of every partition (or the
    beginning, or ``lookback_s`` back) until ``stop`` is set. Undecodable records are skipped."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    probe_kafka(kafka)
    c = _reader(kafka)
    try:
        parts = _partitions(c, kafka.topic_completed, 10)
        if from_beginning:
            c.assign([TopicPartition(kafka.topic_completed, p, OFFSET_BEGINNING) for p in parts])
        else:
            since = int((time.time() - lookback_s) * 1000)
            c.assign(_start_offsets(c, kafka.topic_completed, parts, since, 10))
        while stop is None or not stop.is_set():
            for m in consume_ready(c, 500, poll_s):
                if m.error() is not None:
                    continue
                try:
                    yield decode_completion(m.value()), m
                except SchemaError:
                    continue
    finally:
        c.close()


def find_completion(kafka: KafkaSettings, request_id: str, *, timeout: float = 60.0, user_id: str | None = None,
                    since_s: float | None = None) -> Completion | None:
    """Scan every partition of ``tts.completed`` (it is keyed by user, not request) from the
    beginning to its current end; the completion of ``request_id`` or None.

    ``user_id`` narrows the scan to that user's partition (murmur2, as every ttsflow producer
    maps it), ``since_s`` to the records of the last ``since_s`` seconds: what the gateway reads
    for a retry whose completion it no longer holds in memory."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    from streams.kafka.partitioner import partition_for

    probe_kafka(kafka)
    c = _reader(kafka, **{"enable.partition.eof": True})
    try:
        parts = _partitions(c, kafka.topic_completed, 10)
        if user_id is not None:
            parts = [partition_for(user_id.encode(), len(parts))]
        ends = {}
        for p in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(kafka.topic_completed, p), timeout=10, cached=False)
            if hi > lo:
                ends[p] = hi
        if not ends:
            return None
        if since_s is None:
            c.assign([TopicPartition(kafka.topic_completed, p, OFFSET_BEGINNING) for p in ends])
        else:
            since = int((time.time() - since_s) * 1000)
            starts = _start_offsets(c, kafka.topic_completed, sorted(ends), since, 10)
            from confluent_kafka import OFFSET_END

            starts = [tp for tp in starts if tp.offset != OFFSET_END and tp.offset < ends[tp.partition]]  # else nothing newer
            if not starts:
                return None
            ends = {tp.partition: ends[tp.partition] for tp in starts}
            c.assign(starts)
        found: Completion | None = None
        pending = set(ends)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in consume_ready(c, 1000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    continue
                if m.offset() + 1 >= ends.get(m.partition(), 0):
                    pending.discard(m.partition())
                if request_id.encode() not in (m.value() or b""):
                    continue
                try:
                    comp = decode_completion(m.value())
                except SchemaError:
                    continue
                if comp.request_id == request_id:
                    found = comp
        if pending and found is None:
            raise CompletionTimeout(request_id, timeout)
        return found
    finally:
        c.close()


# --- asyncio ---------------------------------------------------------------------------------

class AsyncTTSClient:
    """asyncio forms of :class:`TTSClient` over the same reader thread and producer."""

    def __init__(self, client: TTSClient) -> None:
        self.sync = client

    @classmethod
    async def connect(cls, settings: Settings | None = None, **kw: Any) -> AsyncTTSClient:
        loop = asyncio.get_running_loop()
        return cls(await loop.run_in_executor(None, lambda: TTSClient(settings, **kw)))

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.sync.close)

    async def __aenter__(self) -> AsyncTTSClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def submit(self, text: str, user_id: str, voice: str | None = None, format: str = "wav",
                     request_id: str | None = None, **kw: Any) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, lambda: self.sync.submit(text, user_id, voice=voice, format=format, request_id=request_id, **kw))

    async def wait(self, request_id: str, timeout: float = 60.0, *, raise_on_failure: bool = True) -> Completion:
        f = self.sync.wait_future(request_id)
        try:
            c = await asyncio.wait_for(asyncio.wrap_future(f), timeout)
        except TimeoutError:
            self.sync._forget(request_id, f)
            raise CompletionTimeout(request_id, timeout) from None
        if raise_on_failure:
            _raise_if_failed(c)
        return c

    async def fetch(self, completion: Completion) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.fetch, completion)

    async def fetch_chunk(self, chunk: Chunk) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.fetch_chunk, chunk)

    async def stream(self, text: str, user_id: str, voice: str | None = None, format: str = "wav",
                     request_id: str | None = None, **kw: Any) -> AsyncIterator[Chunk | Completion]:
        """:meth:`TTSClient.stream` as an async iterator (each step waits in the default executor)."""
        loop = asyncio.get_running_loop()
        it = self.sync.stream(text, user_id, voice=voice, format=format, request_id=request_id, **kw)
        done = object()
        try:
            while True:
                item = await loop.run_in_executor(None, next, it, done)
                if item is done:
                    return
                yield item  # type: ignore[misc]
        finally:
            await loop.run_in_executor(None, it.close)

    async def save(self, completion: Completion, path: str | os.PathLike[str]) -> Path:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.save, completion, path)
