"""The worker loop: segments in, audio in S3, one completion per request, exactly once.

The loop (:meth:`Worker.step`) reads like the protocol: 0) between batches, apply a
pending model reload (SIGHUP), 1) poll, 2) decode and drop what
is already done, 3) look up the Redis cache, 4) batch the misses, 5) synthesize ready
batches, 6) collect encoded and uploaded parts, 7) join finished requests and upload
their audio, 8) produce completions, done records and offsets in one transaction.

Guarantees (DESIGN.md "Exactly-once, end to end"):

* Offsets follow durability. Per partition the committed offset is the first segment
  not yet done (:class:`~streams.worker.offsets.OffsetTracker`). A segment is done when its
  audio is in S3; a last segment (and every segment of a failed request) when its
  request's completion is produced in the transaction that commits the offset.
* One transaction per commit: completions (``tts.completed``, key = user id), a record
  per answered request in the compacted done topic (key = request id, partition = the
  segment's partition) and the consumer offsets (``send_offsets_to_transaction`` with
  the group metadata, so a zombie is fenced) commit together or not at all.
* No second completion: on assignment of partition p the worker reads partition p of
  the done topic (read_committed) and drops every segment of a request found there, so a
  restarted worker, a new owner after a rebalance or a re-emitted segment never answers
  twice. Redis is only a cache. The record counts for the stage's dedup window
  (``dedup_window_s``): after it the stage lets a reused request id through, and so does
  the worker.
* Errors as librdkafka means them: retriable -> capped backoff and retry; abortable ->
  abort, rewind every assigned partition to its committed offset, drop in-memory work;
  fatal (fenced) -> exit non-zero. A commit that times out is retried, never aborted.
  A transactional call still running 30 s past its own timeout (librdkafka's
  ``send_offsets_to_transaction`` after a broker restart, librdkafka#5456) is left behind
  with its producer: a new producer with the same ``transactional.id`` fences it (its
  transaction is completed or aborted before ``init_transactions`` returns), and the work
  is redone from the committed offsets, as after an abort.
  S3 unreachable -> nothing is committed; in-memory work is dropped and the partitions
  rewound and paused while the consumer keeps polling (it stays in the group) until S3
  answers again. Redis unreachable -> cache bypass, counted.
* An engine failure on one item fails that request (failed completion with the code),
  not the batch's other requests and not the process.
* Audio is checked before it is called ok (:func:`engine.quality.check_audio`, about
  10 microseconds a part): a near-silent part, or one far shorter than its text implies at
  its voice's measured speaking rate, fails its request with ``synthesis_failed`` and the
  reason. A completion's ``model.voice`` names the voice that spoke.
* Hot reload (hibari, piper: the engine is an ``engine.reload.ModelManager``): SIGHUP only
  sets a flag; the swap happens at the top of a loop turn when nothing is in flight (no
  batched, synthesizing, joining or unfinished request), so every part of a request is made
  by one model and keyed with its identity. If work never drains within
  ``reload_max_wait_s`` the worker synthesizes what is batched with the old model, waits
  for its uploads and joins, then swaps: a request whose parts span the swap is joined from
  memory (its old parts keep the keys they were stored under) and its completion names the
  new model. A refused candidate leaves the old model serving.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from engine import audio as audio_codec
from engine import voices as engine_voices
from engine.base import Audio, Failure, Prepared, SynthItem
from engine.engine import Engine
from engine.errors import EngineError
from engine.quality import check_audio
from schemas import (
    AudioRef,
    Completion,
    ErrorInfo,
    ModelInfo,
    Rejection,
    SchemaError,
    Segment,
    Timings,
    decode_segment_event,
    encode,
    peek_request_id,
    request_hash,
)
from storage.cache import AudioCache
from storage.errors import ObjectMissing, S3Unavailable
from storage.s3 import AudioStore
from streams.errors import AbortableError, FatalError, ProducerWedged, RetriableError, classify
from streams.settings import Settings
from streams.worker.batcher import MicroBatcher
from streams.worker.joiner import JoinSpec, join_upload
from streams.worker.offsets import OffsetTracker

if TYPE_CHECKING:
    from engine.reload import ModelManager

__all__ = ["Worker"]

_log = logging.getLogger("ttsflow.worker")

_COMMIT_INTERVAL_S = 0.25   # offsets-only transactions at most this often
_BACKOFF_BASE_S = 0.2
_BACKOFF_CAP_S = 10.0
_PART_FORMAT = "wav"        # parts are kept lossless at the engine's rate; requests get their format
_OP_TIMEOUT_S = 30.0
# a transactional call still running this long past its own timeout is wedged (librdkafka#5456)
_WEDGE_GRACE_S = 30.0
_REWIND_TIMEOUT_S = 10.0  # one attempt at reading committed offsets; a failed rewind is retried by the loop
_RELOAD_MAX_WAIT_S = 30.0  # a pending reload waits this long for the work in flight to drain
# librdkafka prefetches up to 1 MB per partition into one queue that consume() reads in order: a
# long request's segments (one partition) fetched at once would be served before every other
# partition's. Small per-partition fetches keep the queue interleaved, so other users' short
# requests wait for a few batches, not for the long request (bench bigrequest measures it).
_FAIR_FETCH = {"max.partition.fetch.bytes": 16 * 1024, "queued.min.messages": 16,
               "queued.max.messages.kbytes": 1024}


def _backoff(attempt: int) -> float:
    return min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** attempt) * random.uniform(0.5, 1.0)


def _now_utc() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True, eq=False)
class _Seg:
    """One consumed segment event and where it came from."""

    partition: int
    gen: int  # the partition's generation when consumed; stale after a revoke or rewind
    offset: int
    seg: Segment
    part_id: str
    received: float
    prepared: Prepared | None = None


@dataclass(slots=True)
class _Part:
    key: str
    audio: np.ndarray | None  # None: fetch from S3 at join time (always beyond the request's join_memory_mb)
    cached: bool


@dataclass(slots=True, eq=False)
class _Request:
    partition: int
    gen: int
    request_id: str
    user_id: str
    total: int
    first: Segment | None
    offsets: list[int] = field(default_factory=list)
    seqs: set[int] = field(default_factory=set)          # consumed in this process
    parts: dict[int, _Part] = field(default_factory=dict)  # ready (in S3)
    last: Segment | None = None
    failure: ErrorInfo | None = None
    start: datetime | None = None  # when the request was made (e2e latency), if known
    finalizing: bool = False
    synth_s: float = 0.0
    queue_s: float = 0.0
    held_bytes: int = 0    # part samples kept in memory for the join (bounded by join_memory_mb)
    audio_s: float = 0.0   # audio of the parts synthesized here so far (max_request_audio_s stops it early)

    @property
    def key(self) -> tuple[int, str]:
        return (self.partition, self.request_id)


@dataclass(slots=True)
class _Answer:
    """A completion ready to be produced, and the request it answers."""

    partition: int
    request_id: str
    user_id: str
    completion: Completion
    offsets: list[int]
    e2e_s: float | None


class Worker:
    """One worker process's state and loop. Used from one thread (the loop's)."""

    def __init__(self, settings: Settings, engine: Engine | ModelManager, store: AudioStore, cache: AudioCache, metrics: Any,
                 *, consumer: Any = None, producer: Any = None, reader: Any = None, overlap: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, reload_max_wait_s: float = _RELOAD_MAX_WAIT_S,
                 producer_factory: Callable[[], Any] | None = None, wedge_grace_s: float = _WEDGE_GRACE_S) -> None:
        from confluent_kafka import Consumer, Producer

        from streams.kafka import consumer_config, reader_config, transactional_config

        self.settings = settings
        self.engine = engine
        self.store = store
        self.cache = cache
        self.metrics = metrics
        self.clock = clock
        info = engine.info
        self.identity = ""
        self.model_info: ModelInfo
        self._old_identities: list[str] = []  # identities served before a hot reload, newest first
        self._set_identity()
        self.reload_max_wait_s = reload_max_wait_s
        self._reload_since: float | None = None
        self.batcher: MicroBatcher[_Seg] = MicroBatcher(settings.max_batch, settings.max_wait_ms / 1000,
                                                        settings.buckets, clock)
        self.tracker = OffsetTracker()
        self._stop = threading.Event()
        self._closing = False
        self._consumer = consumer or Consumer(consumer_config(
            settings, settings.worker_group, **{"client.id": settings.effective_transactional_id}, **_FAIR_FETCH))
        self._new_producer = producer_factory or (lambda: Producer(transactional_config(settings)))
        self._producer = producer or self._new_producer()
        # transactional calls run here, bounded (see _txn); a wedged one is abandoned with its thread
        self.wedge_grace_s = wedge_grace_s
        self._txn_pool = ThreadPoolExecutor(1, thread_name_prefix="txn")
        self.abandoned: list[Any] = []  # producers replaced while a call of theirs was wedged
        self._reader = reader or Consumer(reader_config(settings, **{"enable.partition.eof": True}))
        # DSP/encode on a second thread while the model runs pays off when the model runs on a device;
        # on 2 CPU cores it measured within noise (the model already uses both), so auto = device only
        if overlap is None:
            overlap = info.provider != "CPUExecutionProvider"
        self.overlap = overlap
        self._post = ThreadPoolExecutor(1, thread_name_prefix="post") if overlap else None
        self._io = ThreadPoolExecutor(4, thread_name_prefix="s3")
        self._assigned: set[int] = set()
        self._paused: set[int] = set()
        self._rewind_pending: set[int] = set()               # dropped work: seek back before admitting more
        self._done: dict[int, dict[str, float]] = {}         # durable: request id -> answered at (epoch s)
        self._requests: dict[tuple[int, str], _Request] = {}
        self._seen: set[tuple[int, str, int]] = set()        # (partition, request_id, seq) in flight here
        self._waiting: dict[str, list[_Seg]] = {}            # part_id -> segments waiting for its audio
        self._post_futs: list[tuple[int, Future[list[tuple[_Seg, Audio | Failure, str, float]]]]] = []
        self._final_futs: list[tuple[_Request, Future[AudioRef | ErrorInfo]]] = []
        self._answers: list[_Answer] = []
        self._gen: dict[int, int] = {}                       # partition -> generation of its in-memory work
        self._last_commit = clock()
        self._in_txn = False
        self._last_consumer_error = -1e9
        self._cap = 4 * settings.max_batch
        self._done_partitions = 1 << 30  # known after start(); tests that skip start() have no limit
        self.cache.on_error = metrics.redis_error

    def _set_identity(self) -> None:
        """Cache the serving model's identity (part keys, request keys, completions' model info)."""
        info = self.engine.info
        identity = f"{info.name}:{info.version}:{info.precision}"
        if self.identity and identity != self.identity:
            self._old_identities = [self.identity, *[i for i in self._old_identities if i != identity][:7]]
        self.identity = identity
        self.model_info = ModelInfo(name=info.name, version=info.version, precision=info.precision,
                                    provider=info.provider)

    # -- keys ----------------------------------------------------------------------
    def part_id(self, segment_hash: str, identity: str | None = None) -> str:
        """The content address of a part: the stage's segment hash and this model's identity."""
        ident = self.identity if identity is None else identity
        return hashlib.sha256(f"ttsflow-part-v1\0{segment_hash}\0{ident}".encode()).hexdigest()

    def part_key(self, segment_hash: str, identity: str | None = None) -> str:
        return self.store.key("part", self.part_id(segment_hash, identity), _PART_FORMAT)

    def request_key(self, parts: list[str], fmt: str, sample_rate: int) -> str:
        digest = hashlib.sha256(
            f"ttsflow-req-v1\0{request_hash(parts, format=fmt)}\0{self.identity}\0{sample_rate}".encode()).hexdigest()
        return self.store.key("req", digest, fmt)

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Create the done topic, initialise transactions (fencing older instances), subscribe."""
        from streams.kafka import ensure_done_topic

        self._done_partitions = self._retry("ensure_done_topic", lambda: ensure_done_topic(self.settings))
        self._init_transactions()
        self._consumer.subscribe([self.settings.topic_segments], on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost)
        self.metrics.ready(True)
        _log.info("event=worker_started transactional_id=%s group=%s model=%s provider=%s overlap=%s",
                  self.settings.effective_transactional_id, self.settings.worker_group, self.identity,
                  self.model_info.provider, self.overlap)

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> int:
        """Loop until stopped; 0 after a clean shutdown, raises ``FatalError`` otherwise."""
        self.start()
        try:
            while not self._stop.is_set():
                self.run_once()
            self._drain()
        finally:
            self.close()
        return 0

    def run_once(self) -> None:
        """One pass of the loop, with the reactions to retriable, abortable and S3 errors."""
        try:
            self.step()
        except S3Unavailable as e:
            self._s3_outage(e)
        except ProducerWedged as e:
            self._replace_producer(e)
        except AbortableError as e:
            self._abort_and_rewind(e)
        except RetriableError as e:
            _log.warning("event=retry error=%s", e)
            time.sleep(_backoff(1))

    def close(self) -> None:
        self.metrics.ready(False)
        self._closing = True
        if self._in_txn:
            self._abort_quietly()
        try:
            self._consumer.close()
        finally:
            self._producer.flush(10)
            self._reader.close()
            if self._post is not None:
                self._post.shutdown(wait=True, cancel_futures=True)
            self._io.shutdown(wait=True, cancel_futures=True)
            self._txn_pool.shutdown(wait=False, cancel_futures=True)  # a call wedged at close is left behind

    # -- the loop ------------------------------------------------------------------
    def step(self) -> None:
        """One turn of the protocol; each numbered step maps to DESIGN.md."""
        self.metrics.heartbeat()

        # 0) between batches: apply a pending model reload (SIGHUP)
        self._maybe_reload()
        now = self.clock()

        # 1) poll: no longer than the batcher's next deadline, briefly while work is in flight
        #    (a rewind that could not finish is retried first; its partitions admit nothing until it does)
        if self._rewind_pending & self._assigned:
            self._rewind(self._rewind_pending & self._assigned)
        self._apply_backpressure()
        timeout = 0.2
        deadline = self.batcher.next_deadline()
        if deadline is not None:
            timeout = min(timeout, max(0.0, deadline - now))
        if self._post_futs or self._final_futs:
            timeout = min(timeout, 0.005)
        want = max(1, min(500, self._cap - self._backlog()), self._cap // max(1, len(self._assigned)))
        msgs = self._consumer.consume(want, timeout)

        # 2) decode, drop what is done; 3) cache lookup; 4) batch the misses
        fresh: list[_Seg] = []
        for msg in msgs:
            if msg.error() is not None:
                self._consumer_error(msg.error())
                continue
            s = self._admit(msg)
            if s is not None:
                fresh.append(s)
        self._lookup_and_batch(fresh)

        # 5) synthesize ready batches (model on this thread; DSP, encode, upload on the pools)
        now = self.clock()
        while self.batcher.ready(now) and len(self._post_futs) < 2:
            self._synthesize(self.batcher.take_with_wait(now))
            now = self.clock()

        # 6) collect encoded and uploaded parts, update the cache, mark their offsets done
        self._collect_parts()

        # 7) finished requests: join in order, resample, encode, upload; failed ones: answer
        self._finalize_ready()
        self._collect_finals()

        # 8) one transaction: completions + done records + offsets, then commit
        self._commit()
        self.metrics.inflight(self.tracker.pending())

    # -- 0) hot reload -----------------------------------------------------------------
    def _idle(self) -> bool:
        """Nothing batched, synthesizing, joining or waiting for more segments: a swap splits nothing."""
        return not (len(self.batcher) or self._post_futs or self._final_futs or self._requests or self._waiting)

    def _maybe_reload(self) -> None:
        """Apply a reload asked for by SIGHUP, only when the work in flight allows it (module docstring)."""
        manager = self.engine
        if isinstance(manager, Engine) or not getattr(manager, "reload_pending", False):  # an Engine: no reload
            self._reload_since = None
            return
        now = self.clock()
        if self._reload_since is None:
            self._reload_since = now
            _log.info("event=model_reload_pending model=%s waiting_for_drain=%s", self.identity, not self._idle())
        if not self._idle():
            if now - self._reload_since < self.reload_max_wait_s:
                return
            _log.warning("event=model_reload_forced model=%s waited_s=%.1f batched=%d unfinished_requests=%d",
                         self.identity, now - self._reload_since, len(self.batcher), len(self._requests))
            self._settle()
        self._reload_since = None
        result = manager.maybe_reload()
        if result is None:
            return
        self.metrics.model_reload(result.swapped)
        if result.swapped:
            old = self.identity
            self._set_identity()
            _log.info("event=worker_model_reloaded old=%s new=%s load_s=%.3f cold_start_s=%.3f", old, self.identity,
                      result.load_s, result.cold_start_s)
        else:
            _log.warning("event=worker_model_reload_refused serving=%s candidate=%s reason=%r", result.serving,
                         result.candidate, result.reason)

    def _settle(self) -> None:
        """Finish, with the serving model, everything batched, synthesizing or joining (before a forced swap)."""
        from concurrent.futures import wait

        while len(self.batcher):
            self._synthesize(self.batcher.take_with_wait(self.clock(), force=True))
        wait([f for _, f in self._post_futs], _OP_TIMEOUT_S)
        self._collect_parts()
        self._finalize_ready()
        wait([f for _, f in self._final_futs], _OP_TIMEOUT_S)
        self._collect_finals()

    def _backlog(self) -> int:
        """Segments consumed and not yet synthesized: what bounds prefetching."""
        return len(self.batcher) + sum(n for n, _ in self._post_futs)

    def _current(self, partition: int, gen: int) -> bool:
        return partition in self._assigned and self._gen.get(partition) == gen

    def _apply_backpressure(self) -> None:
        """Past the prefetch cap pause only the partitions holding their share of it: one
        partition's long request must not keep the others' segments out (they wait for a
        few batches, not for the whole request). Each unpaused partition adds at most about
        two shares, so the backlog stays within about three times the cap (segments, not audio)."""
        if self._backlog() < self._cap:
            self._set_paused(set())
            return
        share = max(1, self._cap // max(1, len(self._assigned)))
        held: dict[int, int] = {}
        for s in self.batcher.items():
            held[s.partition] = held.get(s.partition, 0) + 1
        self._set_paused({p for p in self._assigned if held.get(p, 0) >= share})

    def _set_paused(self, want: set[int]) -> None:
        from confluent_kafka import TopicPartition

        topic = self.settings.topic_segments
        pause = [TopicPartition(topic, p) for p in want - self._paused if p in self._assigned]
        resume = [TopicPartition(topic, p) for p in self._paused - want if p in self._assigned]
        if pause:
            self._consumer.pause(pause)
        if resume:
            self._consumer.resume(resume)
        self._paused = set(want) & self._assigned

    def _consumer_error(self, err: Any) -> None:
        """Errors delivered by poll are informational (the client retries) unless librdkafka says fatal."""
        if err.fatal():
            raise classify(err)
        now = self.clock()
        if now - self._last_consumer_error >= 5.0:  # e.g. the topic does not exist yet: say so, not 50 times a second
            self._last_consumer_error = now
            _log.warning("event=consumer_error code=%s error=%s", err.name(), err.str())

    # -- 2) decode and drop ----------------------------------------------------------
    def _admit(self, msg: Any) -> _Seg | None:
        p, off = msg.partition(), msg.offset()
        if p not in self._assigned or p in self._rewind_pending:  # just revoked, or to be re-read from committed
            return None
        try:
            self.tracker.add(p, off)
        except ValueError as e:  # the consumer's position went back without a rebalance (librdkafka
            # reset it, seen right after a broker restart): redo from the committed offsets
            raise AbortableError(f"partition {p} went back to offset {off}: {e}") from e
        self.metrics.consumed()
        raw = msg.value()
        try:
            seg = decode_segment_event(raw if raw is not None else b"")
        except SchemaError as e:
            self._bad_segment(p, off, msg, e)
            return None
        if isinstance(seg, Rejection):
            self._admit_rejection(p, off, seg)
            return None
        if self._is_done(p, seg.request_id):
            self.metrics.skipped("request_done")
            self.tracker.mark_done(p, off)
            return None
        if (p, seg.request_id, seg.seq) in self._seen or seg.seq >= seg.total:
            # a re-emitted copy: its original has a lower offset and holds the commit back
            self.metrics.skipped("duplicate" if seg.seq < seg.total else "bad_seq")
            self.tracker.mark_done(p, off)
            return None
        self._seen.add((p, seg.request_id, seg.seq))
        gen = self._gen.get(p, 0)
        req = self._requests.get((p, seg.request_id))
        if req is None:
            req = self._requests[(p, seg.request_id)] = _Request(p, gen, seg.request_id, seg.user_id, seg.total, seg)
        req.offsets.append(off)
        req.seqs.add(seg.seq)
        if seg.last:
            req.last = seg
        if req.failure is not None:  # answered soon; nothing more to synthesize for it
            return None
        return _Seg(p, gen, off, seg, self.part_id(seg.hash), self.clock())

    def _admit_rejection(self, p: int, off: int, rej: Rejection) -> None:
        """The stage refused the request: answer it, failed with the stage's code, in the next
        transaction. A rejection repeated by a restarted stage finds the request done (or
        already being answered here) and produces nothing."""
        if self._is_done(p, rej.request_id):
            self.metrics.skipped("request_done")
            self.tracker.mark_done(p, off)
            return
        req = self._requests.get((p, rej.request_id))
        if req is not None:  # a copy while the first is in flight here: answered with it
            self.metrics.skipped("duplicate")
            req.offsets.append(off)
            req.failure = req.failure or rej.error
            return
        req = self._requests[(p, rej.request_id)] = _Request(p, self._gen.get(p, 0), rej.request_id, rej.user_id,
                                                               0, None, start=rej.enqueued_at)
        req.offsets.append(off)
        req.failure = rej.error

    def _bad_segment(self, p: int, off: int, msg: Any, err: SchemaError) -> None:
        self.metrics.bad_segment()
        rid = peek_request_id(msg.value())
        _log.error("event=bad_segment partition=%d offset=%d request_id=%s code=%s error=%s",
                   p, off, rid, err.code, err.message)
        if rid is None or self._is_done(p, rid):
            self.tracker.mark_done(p, off)
            return
        req = self._requests.get((p, rid))
        if req is None:
            key = msg.key()
            user = key.decode("utf-8", "replace") if key else ""
            req = self._requests[(p, rid)] = _Request(p, self._gen.get(p, 0), rid, user or "unknown", 1, None)
        req.offsets.append(off)
        req.failure = req.failure or ErrorInfo(code=f"bad_segment_{err.code}", message=err.message)

    # -- 3) cache, 4) batch ----------------------------------------------------------
    def _lookup_and_batch(self, fresh: list[_Seg]) -> None:
        misses: list[_Seg] = []
        for s in fresh:
            if s.part_id in self._waiting:  # the same audio is being made: wait for it
                self._waiting[s.part_id].append(s)
                continue
            key = self.cache.get(s.part_id)
            if key is not None and self.store.head(key) is not None:
                self.metrics.cache(True)
                self._part_ready(s, _Part(key, None, cached=True))
                continue
            if key is not None:
                self.cache.delete(s.part_id)  # the object expired: the pointer is stale
            self.metrics.cache(False)
            self._waiting[s.part_id] = [s]
            misses.append(s)
        if not misses:
            return
        # CPU front end as segments arrive; its length picks the padding bucket
        prepared = self.engine.prepare_many([SynthItem(s.seg.text, s.seg.voice, s.seg.speed) for s in misses])
        for s, p in zip(misses, prepared, strict=True):
            if isinstance(p, Failure):
                self._part_failed(s.part_id, p)
                continue
            s.prepared = p
            group: tuple[Any, ...] = (p.item.voice, round(p.item.speed, 4))
            if self.engine.native_batching:
                group += self.engine.batch_key(p)
            self.batcher.add(s, len(s.seg.text), group=group)

    # -- 5) synthesize ---------------------------------------------------------------
    def _synthesize(self, batch: list[tuple[_Seg, float]]) -> None:
        segs = [s for s, _ in batch]
        waits = [w for _, w in batch]
        prepared: list[Prepared] = [s.prepared for s in segs]  # type: ignore[misc]
        for group in self.engine.plan(prepared):
            gsegs = [segs[i] for i in group]
            gprep = [prepared[i] for i in group]
            t0 = time.perf_counter()
            try:
                raw = self.engine.infer_batch(gprep)
            except EngineError as e:  # the model failed on the batch: every item of it fails
                _log.warning("event=batch_failed size=%d error=%s", len(gsegs), e)
                for s in gsegs:
                    self._part_failed(s.part_id, Failure.of(e))
                continue
            infer_s = time.perf_counter() - t0
            gwaits = [waits[i] for i in group]
            for s, w in zip(gsegs, gwaits, strict=True):
                req = self._requests.get((s.partition, s.seg.request_id))
                if req is not None:
                    req.queue_s = max(req.queue_s, w)
            job = self._post.submit(self._postprocess_upload, gsegs, gprep, raw, infer_s, gwaits) \
                if self._post is not None else _done_future(self._postprocess_upload, gsegs, gprep, raw, infer_s,
                                                             gwaits)
            self._post_futs.append((len(gsegs), job))

    def _postprocess_upload(self, segs: list[_Seg], prepared: list[Prepared], raw: list[Any], infer_s: float,
                            waits: list[float]) -> list[tuple[_Seg, Audio | Failure, str, float]]:
        """Pool thread: DSP, encode, upload every part of one model call (uploads in parallel)."""
        t0 = time.perf_counter()
        results = self.engine.postprocess_many(raw, prepared)
        results = [self._checked(s, r) for s, r in zip(segs, results, strict=True)]
        synth_s = infer_s + (time.perf_counter() - t0)
        audio_s = sum(r.duration_s for r in results if isinstance(r, Audio))
        self.metrics.batch(len(segs), self.settings.max_batch, synth_s, audio_s, waits)
        uploads: list[Future[str] | None] = []
        for i, (s, r) in enumerate(zip(segs, results, strict=True)):
            if isinstance(r, Audio):
                data = audio_codec.encode(r.samples, r.sample_rate, _PART_FORMAT)
                # keep what S3 keeps (16-bit), so a join from memory equals a join from S3
                results[i] = Audio(audio_codec.decode(data)[0], r.sample_rate)
                uploads.append(self._io.submit(self.store.put, self.store.key("part", s.part_id, _PART_FORMAT),
                                               data, audio_codec.content_type(_PART_FORMAT)))
            else:
                uploads.append(None)
        out: list[tuple[_Seg, Audio | Failure, str, float]] = []
        share = synth_s / max(1, len(segs))
        for s, r, up in zip(segs, results, uploads, strict=True):
            key = self.store.key("part", s.part_id, _PART_FORMAT)
            if up is not None:
                up.result()  # raises S3Unavailable into the loop
            out.append((s, r, key, share))
        return out

    def _checked(self, s: _Seg, r: Audio | Failure) -> Audio | Failure:
        """A part is an answer only if it sounds like its text (:func:`engine.quality.check_audio`):
        near-silent or far too short audio becomes a ``synthesis_failed`` of its request."""
        if not isinstance(r, Audio):
            return r
        info = engine_voices.voice_info(s.seg.voice)
        limit = info.max_chars_per_s if info is not None else engine_voices.DEFAULT_MAX_CHARS_PER_S
        refused = check_audio(r.samples, r.sample_rate, s.seg.text, speed=s.seg.speed, max_chars_per_s=limit)
        if refused is None:
            return r
        self.metrics.audio_refused(refused.reason)
        return Failure("synthesis_failed", f"voice {s.seg.voice!r}: {refused.message}")

    # -- 6) collect parts ------------------------------------------------------------
    def _collect_parts(self) -> None:
        keep = []
        for n, fut in self._post_futs:
            if not fut.done():
                keep.append((n, fut))
                continue
            try:
                results = fut.result()
            except S3Unavailable:
                self._post_futs = []
                raise
            for s, r, key, share in results:
                if isinstance(r, Failure):
                    self._part_failed(s.part_id, r)
                    continue
                self.cache.set(s.part_id, key)  # the audio is in S3 whoever waits for it now
                self._part_synthesized(s.part_id, _Part(key, r.samples, cached=False), share)
        self._post_futs = keep

    def _part_synthesized(self, part_id: str, part: _Part, synth_s: float) -> None:
        for i, s in enumerate(self._waiting.pop(part_id, [])):
            if i == 0:
                req = self._requests.get((s.partition, s.seg.request_id))
                if req is not None:
                    req.synth_s += synth_s
                self._part_ready(s, part)
            else:  # same audio asked for again while it was being made
                self._part_ready(s, _Part(part.key, part.audio, cached=True))

    def _part_ready(self, s: _Seg, part: _Part) -> None:
        if not self._current(s.partition, s.gen):
            return  # its partition was revoked or rewound meanwhile
        req = self._requests.get((s.partition, s.seg.request_id))
        if req is None:  # answered already (failed), or its partition was dropped
            self.tracker.mark_done(s.partition, s.offset)
            return
        req.parts[s.seg.seq] = self._hold(req, part)
        if not s.seg.last:  # a last segment is done only with its completion
            self.tracker.mark_done(s.partition, s.offset)

    def _part_failed(self, part_id: str, failure: Failure) -> None:
        for s in self._waiting.pop(part_id, []):
            req = self._requests.get((s.partition, s.seg.request_id))
            if req is not None and req.failure is None:
                req.failure = ErrorInfo(code=failure.code, message=failure.message)
                _log.warning("event=request_failed request_id=%s user_id=%s seq=%d code=%s error=%s",
                             req.request_id, req.user_id, s.seg.seq, failure.code, failure.message)

    # -- 7) finalize -----------------------------------------------------------------
    def _finalize_ready(self) -> None:
        for req in list(self._requests.values()):
            if req.finalizing:
                continue
            if req.failure is not None:
                self._answer(req, status="failed", error=req.failure)
                continue
            if req.last is None or any(seq not in req.parts for seq in req.seqs):
                continue
            hashes = self._part_hashes(req)
            if hashes is None:
                self._answer(req, status="failed", error=ErrorInfo(
                    code="parts_unknown", message="the last segment carries no part list and earlier parts are gone"))
                continue
            req.finalizing = True
            parts = {seq: req.parts[seq] for seq in req.parts}
            self._final_futs.append((req, self._io.submit(self._join_upload, req, hashes, parts)))

    def _part_hashes(self, req: _Request) -> list[str] | None:
        last = req.last
        assert last is not None
        if last.parts is not None and len(last.parts) == req.total:
            return list(last.parts)
        if req.total == 1:
            return [last.hash]
        return None  # without the list only parts seen here could be joined: not all of them

    def _hold(self, req: _Request, part: _Part) -> _Part:
        """The part as the request keeps it: its samples only while the request's share stays within
        ``join_memory_mb`` (beyond it the join reads the part back from S3, so a long request's
        audio never piles up here). A request whose audio passes ``max_request_audio_s`` fails now,
        before the rest of it is synthesized."""
        if part.audio is None:
            return part
        if not part.cached:
            req.audio_s += len(part.audio) / self.engine.sample_rate
            if req.audio_s > self.settings.max_request_audio_s and req.failure is None:
                req.failure = ErrorInfo(code="audio_too_long", message=(
                    f"the audio passed {self.settings.max_request_audio_s} s (TTS_MAX_REQUEST_AUDIO_S) after "
                    f"{len(req.parts) + 1} of {req.total} segments; split the text into several requests"))
        n = part.audio.nbytes
        if req.held_bytes + n > self.settings.join_memory_mb * 1024 * 1024:
            return _Part(part.key, None, part.cached)
        req.held_bytes += n
        return part

    def _join_upload(self, req: _Request, hashes: list[str], parts: dict[int, _Part]) -> AudioRef | ErrorInfo:
        """Pool thread: stream the parts in order (memory, else S3) into the request's object
        (streams/worker/joiner.py: bounded memory, multipart upload, one failing object fails this request)."""
        sr = self.engine.sample_rate
        last = req.last
        assert last is not None
        out_sr = last.sample_rate or sr
        spec = JoinSpec(key=self.request_key(hashes, last.format, out_sr), fmt=last.format, sr_in=sr, sr_out=out_sr,
                        max_audio_s=self.settings.max_request_audio_s, request_id=req.request_id)

        def samples(seq: int) -> np.ndarray | None:
            part = parts.get(seq)
            if part is not None and part.audio is not None:
                return part.audio
            data = self._fetch_part(part.key if part is not None else None, hashes[seq])
            if data is None:
                return None
            x, psr = audio_codec.decode(data)
            return x if psr == sr else audio_codec.resample(x, psr, sr)

        return join_upload(self.store, spec, len(hashes), samples)

    def _fetch_part(self, key: str | None, segment_hash: str) -> bytes | None:
        """A part's bytes: by its stored key, else by its content address under the serving model or,
        after a hot reload, the models served before it (a part made before the swap)."""
        keys = [key] if key is not None else \
            [self.part_key(segment_hash, i) for i in [self.identity, *self._old_identities]]
        for k in keys:
            try:
                return self.store.get(k)
            except ObjectMissing:
                continue
        return None

    def _collect_finals(self) -> None:
        keep = []
        for req, fut in self._final_futs:
            if not fut.done():
                keep.append((req, fut))
                continue
            if not self._current(req.partition, req.gen):
                continue
            try:
                res = fut.result()
            except S3Unavailable:
                self._final_futs = []
                raise
            if isinstance(res, ErrorInfo):
                self._answer(req, status="failed", error=res)
            else:
                self._answer(req, status="ok", audio=res)
        self._final_futs = keep

    def _answer(self, req: _Request, *, status: str, audio: AudioRef | None = None,
                error: ErrorInfo | None = None) -> None:
        """Build the completion; it is produced and its offsets committed in step 8."""
        now = _now_utc()
        start = (req.first.created_at or req.first.enqueued_at) if req.first is not None else req.start
        e2e_s = (now - start).total_seconds() if start is not None else None
        cached = sum(1 for p in req.parts.values() if p.cached)
        c = Completion(
            request_id=req.request_id, user_id=req.user_id, status=status,  # type: ignore[arg-type]
            audio=audio, segments=req.total, cached_segments=cached, model=self._spoken_by(req),
            timings=Timings(e2e_ms=round(max(0.0, e2e_s or 0.0) * 1000, 3), synth_ms=round(req.synth_s * 1000, 3),
                            queue_ms=round(req.queue_s * 1000, 3)),
            error=error, completed_at=now)
        self._answers.append(_Answer(req.partition, req.request_id, req.user_id, c, list(req.offsets), e2e_s))
        self._requests.pop(req.key, None)
        self._seen.difference_update({(req.partition, req.request_id, s) for s in req.seqs})
        log = _log.warning if status == "failed" else _log.info
        log("event=completion request_id=%s user_id=%s status=%s segments=%d cached=%d code=%s",
            req.request_id, req.user_id, status, req.total, cached, error.code if error else "-")

    def _spoken_by(self, req: _Request) -> ModelInfo:
        """The serving model's info, naming the voice that spoke the request."""
        seg = req.last or req.first
        if seg is None:
            return self.model_info
        return msgspec.structs.replace(self.model_info, voice=seg.voice)

    # -- 8) transaction --------------------------------------------------------------
    def _commit(self, *, force: bool = False) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        now = self.clock()
        if not self._answers and not (self.tracker.advanced() and (force or now - self._last_commit
                                                                    >= _COMMIT_INTERVAL_S)):
            return
        answers, self._answers = self._answers, []
        for a in answers:  # answered requests: every segment of theirs is done
            for off in a.offsets:
                self.tracker.mark_done(a.partition, off)
        offsets = {p: o for p, o in self.tracker.to_commit().items() if p in self._assigned}
        topic = self.settings.topic_segments
        t0 = time.perf_counter()
        try:
            self._producer.begin_transaction()
            self._in_txn = True
            for a in answers:
                self._produce(self.settings.topic_completed, a.user_id.encode(), encode(a.completion), None)
                done = json.dumps({"request_id": a.request_id, "status": a.completion.status,
                                   "completed_at": a.completion.completed_at.isoformat()
                                   if a.completion.completed_at else None}).encode()
                self._produce(self.settings.topic_done, a.request_id.encode(), done, a.partition)
            if offsets:
                tps = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
                meta = self._consumer.consumer_group_metadata()
                self._txn_retry("send_offsets_to_transaction",
                                lambda: self._producer.send_offsets_to_transaction(tps, meta, _OP_TIMEOUT_S),
                                in_txn=True)
            self._txn_retry("commit_transaction", lambda: self._producer.commit_transaction(_OP_TIMEOUT_S), in_txn=True)
            self._in_txn = False
        except KafkaException as e:
            exc = classify(e, during="transaction")
            if type(exc) is RetriableError:  # the open transaction cannot be resumed: abort and redo
                exc = AbortableError(str(exc))
            raise exc from e
        self._last_commit = self.clock()
        self.tracker.committed(offsets)
        self.metrics.transaction(True, time.perf_counter() - t0)
        for a in answers:
            self._done.setdefault(a.partition, {})[a.request_id] = time.time()
            self.metrics.completion(a.completion.status, a.e2e_s)

    def _produce(self, topic: str, key: bytes, value: bytes, partition: int | None) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:  # local queue full: let deliveries drain
                self._producer.poll(0.1)

    def _txn(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run a transactional producer call on the txn thread and wait for it, beating /healthz,
        at most ``_OP_TIMEOUT_S + wedge_grace_s``; longer raises :class:`ProducerWedged`."""
        from concurrent.futures import TimeoutError as FutureTimeout

        fut = self._txn_pool.submit(fn)
        deadline = time.monotonic() + _OP_TIMEOUT_S + self.wedge_grace_s
        while True:
            try:
                return fut.result(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                self.metrics.heartbeat()
                if time.monotonic() >= deadline:
                    raise ProducerWedged(f"{what} still running {self.wedge_grace_s:.0f} s past its "
                                         f"{_OP_TIMEOUT_S:.0f} s timeout") from None

    def _txn_retry(self, what: str, fn: Callable[[], Any], *, in_txn: bool = False) -> Any:
        """:meth:`_txn` (bounded, on the txn thread) under :meth:`_retry` (retriable errors backed off)."""
        return self._retry(what, lambda: self._txn(what, fn), in_txn=in_txn)

    def _init_transactions(self) -> None:
        """init_transactions on the current producer (fences older instances of this transactional.id
        and aborts their open transaction); a wedged one is replaced by a fresh producer."""
        while True:
            try:
                self._txn_retry("init_transactions", lambda: self._producer.init_transactions(_OP_TIMEOUT_S))
                return
            except ProducerWedged as e:
                if self._stop.is_set():
                    raise FatalError(f"stopping with a wedged producer: {e}") from e
                _log.error("event=producer_wedged op=init_transactions error=%s", e)
                self._abandon_producer()

    def _abandon_producer(self) -> None:
        """Leave the current producer (and the thread stuck in it) behind; start a new one."""
        self.abandoned.append(self._producer)
        self._txn_pool.shutdown(wait=False, cancel_futures=True)
        self._txn_pool = ThreadPoolExecutor(1, thread_name_prefix="txn")
        self._producer = self._new_producer()
        self.metrics.producer_replaced()

    def _replace_producer(self, err: BaseException) -> None:
        """A transactional call is wedged: a new producer with the same transactional.id takes over
        (its init_transactions fences the old one and completes or aborts the open transaction,
        so the committed offsets read next are final), then redo from them, like an abort."""
        _log.error("event=producer_wedged error=%s; replacing the producer", err)
        self.metrics.transaction(False)
        self._abandon_producer()
        self._in_txn = False
        self._init_transactions()
        self._drop_all()
        self._rewind(self._assigned)
        _log.info("event=producer_replaced transactional_id=%s", self.settings.effective_transactional_id)

    def _retry(self, what: str, fn: Callable[[], Any], *, in_txn: bool = False) -> Any:
        """Call ``fn``, retrying librdkafka-retriable errors with capped backoff; others raise classified."""
        from confluent_kafka import KafkaException

        attempt = 0
        while True:
            try:
                return fn()
            except KafkaException as e:
                exc = classify(e, during=what if in_txn else "")
                if type(exc) is not RetriableError or (self._stop.is_set() and attempt >= 3):
                    raise exc from e
                _log.warning("event=retry op=%s attempt=%d error=%s", what, attempt, e.args[0].str())
                time.sleep(_backoff(attempt))
                attempt += 1

    # -- failure reactions -------------------------------------------------------------
    def _abort_quietly(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self._txn("abort_transaction", lambda: self._producer.abort_transaction(_OP_TIMEOUT_S))
        except KafkaException as e:
            exc = classify(e, during="abort")
            if isinstance(exc, FatalError):
                raise exc from e
            _log.warning("event=abort_failed error=%s", e)
        except ProducerWedged as e:
            _log.warning("event=abort_failed error=%s", e)
        self._in_txn = False

    def _abort_and_rewind(self, err: BaseException) -> None:
        _log.warning("event=transaction_abort error=%s", err)
        self.metrics.transaction(False)
        if self._in_txn:
            try:
                self._txn_retry("abort_transaction", lambda: self._producer.abort_transaction(_OP_TIMEOUT_S))
            except ProducerWedged as e:
                self._replace_producer(e)
                return
            self._in_txn = False
        self._drop_all()
        self._rewind(self._assigned)

    def _s3_outage(self, err: BaseException) -> None:
        """S3 is down: commit nothing, forget in-memory work, keep polling (paused) until it answers."""
        self.metrics.s3_error()
        _log.error("event=s3_unavailable error=%s", err)
        attempt = 0
        while not self._stop.is_set():
            self._drop_all()
            self._set_paused(set(self._assigned))
            until = self.clock() + _backoff(attempt)
            while self.clock() < until and not self._stop.is_set():
                self.metrics.heartbeat()
                for m in self._consumer.consume(100, 0.1):  # paused: keeps the membership alive
                    _ = m  # records of a partition assigned meanwhile: rewound below
                self._set_paused(set(self._assigned))
            try:
                self.store.ping()
                break
            except S3Unavailable as e:
                self.metrics.s3_error()
                attempt += 1
                _log.warning("event=s3_still_unavailable attempt=%d error=%s", attempt, e)
        self._drop_all()
        self._rewind(self._assigned)
        self._set_paused(set())
        _log.info("event=s3_recovered")

    def _rewind(self, partitions: set[int]) -> None:
        """Seek each partition back to its committed offset (the start if none).

        One attempt, not a retry loop: right after a broker restart the group's offsets can
        be unreadable until the consumer has polled (a lost session is served by poll), so
        a partition whose rewind fails stays pending: :meth:`step` polls, admits nothing
        from it, and tries again."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        if not partitions:
            return
        self._rewind_pending |= partitions
        topic = self.settings.topic_segments
        try:
            committed = self._consumer.committed([TopicPartition(topic, p) for p in sorted(partitions)],
                                                 _REWIND_TIMEOUT_S)
            for tp in committed:
                if tp.error is not None:
                    raise KafkaException(tp.error)
                target = TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                self._consumer.seek(target)
        except KafkaException as e:
            exc = classify(e, during="")
            if isinstance(exc, FatalError):
                raise exc from e
            _log.warning("event=rewind_pending partitions=%s error=%s", sorted(partitions), e)
            return
        self._rewind_pending -= partitions
        _log.info("event=rewound partitions=%s", sorted(partitions))

    def _drop_all(self) -> None:
        """Forget all in-memory work (nothing of it was committed); the done set is kept."""
        for p in set(self._gen) | self._assigned:
            self._gen[p] = self._gen.get(p, 0) + 1  # results of tasks still running are ignored
        self._post_futs = []
        self._final_futs = []
        self._answers = []
        self.tracker.drop(self.tracker.partitions())
        self.batcher.remove_if(lambda s: True)
        self._waiting.clear()
        self._requests.clear()
        self._seen.clear()

    def _drain(self) -> None:
        """Graceful stop: finish the work in flight (bounded), commit what is done."""
        deadline = self.clock() + 10.0
        while (self._post_futs or self._final_futs) and self.clock() < deadline:
            try:
                self._collect_parts()
                self._finalize_ready()
                self._collect_finals()
            except S3Unavailable:
                return
            time.sleep(0.01)
        try:
            self._finalize_ready()
            self._commit(force=True)
        except (AbortableError, S3Unavailable) as e:
            _log.warning("event=final_commit_failed error=%s", e)
            if self._in_txn:
                self._abort_quietly()

    # -- rebalance callbacks (run inside consume(), between loop steps) --------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        new = {tp.partition for tp in partitions}
        too_high = sorted(p for p in new if p >= self._done_partitions)
        if too_high:  # a segment of partition p records its request in done partition p
            raise FatalError(f"{self.settings.topic_segments} partitions {too_high} have no partition in "
                             f"{self.settings.topic_done} ({self._done_partitions} partitions); add partitions to it")
        for p in new:
            self._gen[p] = self._gen.get(p, 0) + 1
        self._load_done(new)
        self._assigned |= new
        self.metrics.assigned(len(self._assigned))
        _log.info("event=assigned partitions=%s now=%s", sorted(new), sorted(self._assigned))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {tp.partition for tp in partitions}
        if not self._closing:
            # commit what is durable before giving the partitions away; the rest is redone by the new owner
            try:
                self._collect_parts()
                self._finalize_ready()
                self._collect_finals()
                self._commit(force=True)
            except (AbortableError, S3Unavailable) as e:
                _log.warning("event=commit_on_revoke_failed error=%s", e)
                if self._in_txn:
                    self._abort_quietly()
                    self.metrics.transaction(False)
                self._drop_all()
                self._rewind(self._assigned - gone)
        self._forget(gone)
        _log.info("event=revoked partitions=%s now=%s", sorted(gone), sorted(self._assigned))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {tp.partition for tp in partitions}
        _log.warning("event=partitions_lost partitions=%s", sorted(gone))
        self._forget(gone)

    def _forget(self, gone: set[int]) -> None:
        for p in gone:
            self._gen[p] = self._gen.get(p, 0) + 1
        self._assigned -= gone
        self._paused -= gone
        self._rewind_pending -= gone  # the next owner (maybe this worker again) starts from the committed offset
        for p in gone:
            self._done.pop(p, None)
        self.tracker.drop(gone)
        self.batcher.remove_if(lambda s: s.partition in gone)
        for pid in list(self._waiting):
            rest = [s for s in self._waiting[pid] if s.partition not in gone]
            if rest:
                self._waiting[pid] = rest
            else:
                del self._waiting[pid]
        self._answers = [a for a in self._answers if a.partition not in gone]
        for key in [k for k in self._requests if k[0] in gone]:
            del self._requests[key]
        self._seen = {k for k in self._seen if k[0] not in gone}
        self.metrics.assigned(len(self._assigned))

    def _is_done(self, partition: int, request_id: str) -> bool:
        """Answered within the stage's dedup window. Older ids may be reused: the stage lets them through."""
        at = self._done.get(partition, {}).get(request_id)
        if at is None:
            return False
        if time.time() - at < self.settings.dedup_window_s:
            return True
        del self._done[partition][request_id]
        return False

    def _load_done(self, partitions: set[int]) -> None:
        """Read partitions of the done topic (read_committed) into the durable done set."""
        from confluent_kafka import KafkaError, TopicPartition

        if not partitions:
            return
        topic = self.settings.topic_done
        since_ms = int((time.time() - self.settings.dedup_window_s) * 1000)
        starts = self._retry("offsets_for_times", lambda: self._reader.offsets_for_times(
            [TopicPartition(topic, p, since_ms) for p in sorted(partitions)], _OP_TIMEOUT_S))
        todo = [TopicPartition(topic, tp.partition, tp.offset) for tp in starts if tp.offset >= 0]
        for p in partitions:
            self._done[p] = {}
        if not todo:
            return
        t0 = time.monotonic()
        self._reader.assign(todo)
        open_parts = {tp.partition for tp in todo}
        n = 0
        deadline = time.monotonic() + 120
        while open_parts:
            if time.monotonic() > deadline:
                raise RetriableError(f"reading {topic} partitions {sorted(open_parts)} did not reach the end")
            for m in self._reader.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(m.partition())
                        continue
                    exc = classify(err)
                    if isinstance(exc, FatalError):
                        raise exc
                    continue
                key, part = m.key(), m.partition()
                if key and part is not None:
                    _, ts_ms = m.timestamp()
                    self._done[part][key.decode("utf-8", "replace")] = ts_ms / 1000 if ts_ms > 0 else time.time()
                    n += 1
        self._reader.unassign()
        _log.info("event=done_set_loaded partitions=%s records=%d seconds=%.2f", sorted(partitions), n,
                  time.monotonic() - t0)


def _done_future(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run ``fn`` now and wrap its outcome in a finished future (no-overlap mode)."""
    fut: Future[Any] = Future()
    try:
        fut.set_result(fn(*args))
    except S3Unavailable as e:
        fut.set_exception(e)
    return fut
