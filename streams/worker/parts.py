"""The part maker: a segment's audio, made once per content address and stored in S3.

Invariants:

* A part is *made* only when its audio passed the audio check
  (:func:`engine.quality.check_audio`: a near-silent part, or one far shorter than its
  text implies at its voice's measured speaking rate, fails its request with
  ``synthesis_failed``) and its bytes are on their way to S3 under its content address
  (:func:`streams.worker.keys.part_id`: segment hash + model identity): it is handed over
  encoded, with its PUT in flight (:attr:`~streams.worker.ledger.Part.stored`), so the request's
  join starts from memory beside the PUT and the model lane is free for the next call. What needs
  the object in S3 waits for that future: the join before it answers, the ledger before a segment
  counts as done or its chunk is due, the Redis cache before it points at the object.
* A Redis cache hit counts only when S3 still has the object; a stale pointer is deleted.
  Redis down means a cache bypass (counted), never an error. A segment whose part's PUT is still
  in flight here is served that part (as a cache hit), not made again.
* A part for a segment that asked for timestamps is made with its words, in the same object as
  its audio (one PUT; :func:`~streams.worker.timings.part_object`), under an address of its
  own; a cache hit serves such a segment only if its object's words read back (one GET, which
  also brings its samples for the join), else it is made again.
* A part for a segment that holds SSML marks is made only once its marks object is in S3 beside
  its audio (:mod:`~streams.worker.marks`); a cache hit serves it only with that object.
* An engine failure on one item fails that item; a failure of the model call fails every
  item of that call (and nothing else).
* S3 unreachable during an upload raises :class:`~storage.errors.S3Unavailable` into the
  loop (from the ledger, or the join that waits for the PUT), which commits nothing (its
  reaction is the loop's).
* At most ``lanes + 1`` model calls are in flight. The model runs on threads of its own
  (``lanes`` calls at once, most urgent first; one queued behind them so a lane never
  waits for the loop), so the loop keeps polling, answering and committing while it runs: a
  finished request is answered while the next item is synthesized, not after it.
  DSP and encode follow the model as a task of their own on the same lanes
  (:class:`~streams.worker.lanes.Lanes`, most urgent first: the fair order's due, then, within a
  request, its model calls before its parts' DSP, and in a stream each part's DSP before the next
  segment's call), so a request's later segment starts on the first free lane instead of after an
  earlier part's DSP; on a second thread when ``overlap`` (a model on a device works on the next
  call meanwhile). Uploads run on the S3 pool, and nobody on a lane waits for them.
* **A stream's first segment on an idle worker has the machine to itself.** When a streaming
  request's first segment (``seq`` 0) is submitted while no call is in flight and the engine runs
  a call that starts alone on every core (:mod:`engine.solo`), the calls submitted after it wait
  until its model call ends (its DSP and upload overlap them): its later segments would otherwise
  start beside it on the other lane and take a core from the chunk the user waits for. Under
  load a call is always in flight, so nothing is held.
* A call's results (made parts, failed items, each item's wait until the model started on it)
  are returned by :meth:`PartMaker.collect` on the loop's thread, for the core to apply.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from engine import audio as audio_codec
from engine import solo
from engine import voices as engine_voices
from engine.base import Audio, Failure, Prepared, SynthItem
from engine.engine import Engine
from engine.errors import EngineError
from engine.quality import check_audio
from storage.cache import AudioCache
from storage.s3 import AudioStore
from streams.worker.batcher import MicroBatcher
from streams.worker.keys import PART_FORMAT
from streams.worker.lanes import Lanes
from streams.worker.ledger import Part, PartResult, Seg
from streams.worker.marks import PartMarks, decode_part_marks, has_marks, part_marks, part_marks_key
from streams.worker.timings import PartWords, encode_part_words, part_object, part_words, voice_times

if TYPE_CHECKING:
    from engine.reload import ModelManager

__all__ = ["PartMaker"]

_log = logging.getLogger("ttsflow.worker")
T = TypeVar("T")

# segment, result, key, synth share, sha256, bytes, wait, words, marks, its PUT (and its marks') in flight
_Made = tuple[Seg, Audio | Failure, str, float, str, int, float, PartWords | None, PartMarks | None,
              Future[str] | None]


class PartMaker:
    """Cache lookup, batching, the engine, audio check, encode and upload of parts."""

    def __init__(self, engine: Engine | ModelManager, store: AudioStore, cache: AudioCache, metrics: Any,
                 batcher: MicroBatcher[Seg], *, max_batch: int, overlap: bool, io: ThreadPoolExecutor,
                 lanes: int = 1, eager: bool = True) -> None:
        self.engine = engine
        self.store = store
        self.cache = cache
        self.metrics = metrics
        self.batcher = batcher
        self.max_batch = max_batch
        self._lanes = max(1, lanes)
        self._model = Lanes(self._lanes, thread_name_prefix="model")  # model calls and, on a CPU, the DSP after them
        # voice -> model seconds per character of this worker (EWMA over its calls, all lanes
        # counted): a segment's expected cost, which paces its request in the fair order. Until a
        # voice's first call here, what the engine measured as it loaded: an unknown cost counts one
        # fair slot, which paced a restarted worker's whole backlog 0.5 s a segment (issue 32)
        self._cost_per_char: dict[str, float] = {
            v: c / self._lanes for v, c in dict(getattr(engine, "seconds_per_char", None) or {}).items() if c > 0}
        self._max_calls = self._lanes + 1
        self._eager = eager  # an idle lane starts what is batched now (TTS_EAGER_BATCHES)
        self._post = ThreadPoolExecutor(1, thread_name_prefix="post") if overlap else None
        self._io = io
        self._futs: list[tuple[int, Future[list[_Made]], Future[None]]] = []  # size, results, the model job
        self._dropped: list[Future[Any]] = []  # jobs of dropped calls still running (busy until they end)
        # set when the model call of a stream's first segment that started alone ends; later calls wait on it
        self._alone: threading.Event | None = None
        self._putting: dict[str, Part] = {}  # part id -> a part made here whose PUT is in flight

    # -- 3) cache, 4) batch ---------------------------------------------------------------
    def cached(self, s: Seg) -> Part | None:
        """The part of ``s`` from the cache, if its object is still in S3 (and, when ``s`` asked for
        timestamps from a voice that times words, its words read back from that object; when it
        holds SSML marks, its marks object beside it). A part made here whose PUT is in flight is
        that part (it counts as a hit)."""
        putting = self._putting.get(s.part_id)
        if putting is not None and (putting.marks is not None or not has_marks(s.seg)) and \
                (putting.words is not None or not s.seg.timestamps):
            self.metrics.cache(True)
            return dataclasses.replace(putting, cached=True)
        key = self.cache.get(s.part_id)
        part = None
        if key is not None and s.seg.timestamps and \
                voice_times(s.seg.voice, bool(getattr(self.engine, "timestamps", False))):
            part = self._cached_with_words(s, key)
        elif key is not None:
            head = self.store.head(key)
            if head is None:
                self.cache.delete(s.part_id)  # the object expired: the pointer is stale
            else:
                size = int(head["bytes"])  # a part is 16-bit mono WAV: its duration from its size (44-byte header)
                part = Part(key, None, cached=True, sha256=str(head.get("sha256") or ""), bytes=size,
                            duration_s=round(max(0, size - 44) / (2 * self.engine.sample_rate), 4))
        if part is not None and key is not None and has_marks(s.seg):
            marks = self._stored(key, part_marks_key, decode_part_marks)
            part = dataclasses.replace(part, marks=marks) if marks is not None else None  # gone: made again
        self.metrics.cache(part is not None)
        return part

    def _stored(self, audio_key: str, where: Callable[[str], str], decode: Callable[[bytes], T | None]) -> T | None:
        """The object beside a part's audio (its marks), None if it is not there."""
        from storage.errors import ObjectMissing

        try:
            return decode(self.store.get(where(audio_key)))
        except ObjectMissing:
            return None

    def _cached_with_words(self, s: Seg, key: str) -> Part | None:
        """A timed segment's cached part: one GET gives its words and its samples (kept for the join,
        within the request's join memory), where a HEAD and a later GET would have taken two calls."""
        from storage.errors import ObjectMissing

        try:
            data = self.store.get(key)
        except ObjectMissing:
            self.cache.delete(s.part_id)
            return None
        words = part_words(data)
        if words is None:  # an object without its words (unreadable): made again, with them
            return None
        samples, sr = audio_codec.decode(data)
        return Part(key, samples if sr == self.engine.sample_rate else None, cached=True,
                    sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                    duration_s=round(len(samples) / sr, 4), words=words)

    def batch(self, misses: list[Seg]) -> list[tuple[str, Failure]]:
        """The CPU front end as segments arrive; its length picks the padding bucket. Returns the
        parts that cannot be made (part id, why)."""
        failed: list[tuple[str, Failure]] = []
        if not misses:
            return failed
        prepared = self.engine.prepare_many([SynthItem(s.seg.text, s.seg.voice, s.seg.speed, s.seg.timestamps,
                                                       spans=tuple(s.seg.spans) if s.seg.spans else None,
                                                       lang=s.seg.lang)
                                             for s in misses])
        for s, p in zip(misses, prepared, strict=True):
            if isinstance(p, Failure):
                failed.append((s.work_id, p))
                continue
            s.prepared = p
            group: tuple[Any, ...] = (p.item.voice, round(p.item.speed, 4))
            if self.engine.native_batching:
                group += self.engine.batch_key(p)
            cost = len(s.seg.text) * self._cost_per_char.get(p.item.voice, 0.0)
            self.batcher.add(s, len(s.seg.text), group=group, flow=(s.partition, s.seg.request_id),
                             priority=s.seg.priority, cost_s=cost, owed_s=s.owed_s,
                             size_s=cost * self._lanes * max(1, s.seg.total))  # one lane's time: the model's
        return failed

    # -- 5) synthesize ---------------------------------------------------------------------
    def lane_idle(self) -> bool:
        """Whether a model lane has nothing to run (a dropped call still running holds its lane): then
        waiting for a batch to fill only delays it, so what is batched starts now."""
        if not self._eager:
            return False
        running = sum(1 for _, _, job in self._futs if not job.done()) + sum(1 for j in self._dropped if not j.done())
        return running < self._lanes

    def ready(self, now: float) -> bool:
        return len(self._futs) < self._max_calls and self.batcher.ready(now, eager=self.lane_idle())

    def take(self, now: float, *, force: bool = False) -> list[tuple[Seg, float]]:
        """The next batch :meth:`ready` said there is, with each segment's wait (``force``: whatever is
        batched first, ready or not); each segment keeps its due, the lanes' order."""
        out = []
        for s, wait, due in self.batcher.take_with_due(now, force=force, eager=self.lane_idle()):
            s.due = due
            out.append((s, wait))
        return out

    def next_deadline(self) -> float | None:
        """When the next batch can start: the batcher's deadline, or None while the lanes (and the one
        queued call) are all taken (the loop then waits on its polling interval, never spins on a
        deadline it cannot act on)."""
        return self.batcher.next_deadline(eager=self.lane_idle()) if len(self._futs) < self._max_calls else None

    def synthesize(self, batch: list[tuple[Seg, float]]) -> None:
        """Queue one batch for the model thread (in order); its results come back through :meth:`collect`."""
        segs = [s for s, _ in batch]
        waits = [w for _, w in batch]
        prepared: list[Prepared] = [s.prepared for s in segs]  # type: ignore[misc]
        for group in self.engine.plan(prepared):
            done: Future[list[_Made]] = Future()
            alone = threading.Event() if self._runs_alone([segs[i] for i in group]) else None
            # the call others are held for goes first, whatever its due: a lane holding a held call waits for it
            key = _FIRST if alone is not None else _urgency([segs[i] for i in group], post=False)
            job = self._model.submit(key, self._call,
                                     [segs[i] for i in group], [prepared[i] for i in group],
                                     [waits[i] for i in group], time.perf_counter(), done, alone, self._alone)
            if alone is not None:
                self._alone = alone
            self._futs.append((len(group), done, job))

    def _runs_alone(self, segs: list[Seg]) -> bool:
        """A stream's first segment, submitted with no call in flight, to an engine whose lone call uses
        every core: the calls after it wait for its model call."""
        return (self._lanes > 1 and not self._futs and all(j.done() for j in self._dropped)
                and any(s.seg.stream and s.seg.seq == 0 for s in segs)
                and bool(getattr(self.engine, "solo_capable", False)))

    def synthesize_all(self, now: Callable[[], float]) -> None:
        """Everything batched, now, whatever its deadline (before a forced model swap)."""
        while len(self.batcher):
            self.synthesize(self.take(now(), force=True))

    def _call(self, segs: list[Seg], prepared: list[Prepared], waits: list[float], submitted: float,
              done: Future[list[_Made]], alone: threading.Event | None = None,
              hold: threading.Event | None = None) -> None:
        """Model thread: one model call, then its post-processing (here, or on the post thread).
        ``alone``: set when this call's model part ends; ``hold``: wait for that of a call running alone."""
        if hold is not None and alone is None:
            hold.wait()
        t0 = time.perf_counter()
        waits = [w + (t0 - submitted) for w in waits]  # behind the call before it, too
        started = time.time()
        for s in segs:
            s.started_at = started
        try:
            try:
                with solo.said(alone is not None):  # only the held call may take every core
                    raw = self.engine.infer_batch(prepared)
            finally:
                if alone is not None:
                    alone.set()
        except EngineError as e:  # the model failed on the batch: every item of it fails
            _log.warning("event=batch_failed size=%d error=%s", len(segs), e)
            done.set_result([(s, Failure.of(e), "", 0.0, "", 0, w, None, None, None)
                             for s, w in zip(segs, waits, strict=True)])
            return
        except BaseException as e:  # not an engine's failure: raised into the loop at collect
            done.set_exception(e)
            return
        args = (segs, prepared, raw, time.perf_counter() - t0, waits)
        if self._post is None:  # next on a lane, after whatever is more urgent (streams.worker.lanes)
            self._model.submit(_urgency(segs, post=True), _run_into, done, self._postprocess_upload, *args)
        else:
            self._post.submit(_run_into, done, self._postprocess_upload, *args)

    def _postprocess_upload(self, segs: list[Seg], prepared: list[Prepared], raw: list[Any], infer_s: float,
                            waits: list[float]) -> list[_Made]:
        """Pool thread: DSP and encode every part of one model call, their PUTs started on the S3 pool
        (in parallel; returned in flight)."""
        t0 = time.perf_counter()
        results = self.engine.postprocess_many(raw, prepared)
        results = [self._checked(s, r) for s, r in zip(segs, results, strict=True)]
        synth_s = infer_s + (time.perf_counter() - t0)
        self._learn_cost(prepared, synth_s)
        audio_s = sum(r.duration_s for r in results if isinstance(r, Audio))
        self.metrics.batch(len(segs), self.max_batch, synth_s, audio_s, waits)
        out: list[_Made] = []
        share = synth_s / max(1, len(segs))
        for i, (s, r, w) in enumerate(zip(segs, results, waits, strict=True)):
            key = self.store.key("part", s.part_id, PART_FORMAT)
            sha, size, pw, pm, stored = "", 0, None, None, None
            if isinstance(r, Audio):
                marks = None
                if has_marks(s.seg):  # its marks beside it (an empty list from a voice that times none)
                    pm = part_marks(r.marks, len(r.samples), r.sample_rate)
                    marks = (part_marks_key(key), msgspec.json.encode(pm))
                data = audio_codec.encode(r.samples, r.sample_rate, PART_FORMAT)
                # keep what S3 keeps (16-bit), so a join from memory equals a join from S3
                results[i] = Audio(audio_codec.decode(data)[0], r.sample_rate)
                if s.seg.timestamps and r.words is not None:  # its words in the same object: one PUT
                    pw = encode_part_words(s.seg.text, r.words, len(r.samples), r.sample_rate)
                    data = part_object(data, pw)
                sha, size = hashlib.sha256(data).hexdigest(), len(data)
                stored = self._io.submit(_store_part, self.store, key, data, sha, marks)
            s.model_s, s.uploaded_at = share, time.time()  # handed to S3
            if s.seg.stream and s.seg.seq == 0:  # a stream's first chunk: where its time went (bench streaming-input)
                enq = s.seg.enqueued_at.timestamp() if s.seg.enqueued_at is not None else s.written_at
                _log.info("event=first_part request_id=%s stage_ms=%.0f read_ms=%.0f wait_ms=%.0f model_ms=%.0f "
                          "upload_ms=%.0f chars=%d audio_s=%.2f", s.seg.request_id, (s.written_at - enq) * 1e3,
                          (s.read_at - s.written_at) * 1e3, (s.started_at - s.read_at) * 1e3, share * 1e3,
                          (s.uploaded_at - s.started_at - share) * 1e3, len(s.seg.text),
                          r.duration_s if isinstance(r, Audio) else 0.0)
            out.append((s, results[i], key, share, sha, size, w, pw, pm, stored))
        return out

    def _learn_cost(self, prepared: list[Prepared], synth_s: float) -> None:
        """Fold one call's seconds per character (its voice; lanes run side by side) into the estimate."""
        chars = sum(len(p.item.text) for p in prepared)
        if not prepared or chars == 0:
            return
        voice = prepared[0].item.voice
        rate = synth_s / chars / self._lanes
        old = self._cost_per_char.get(voice)
        self._cost_per_char[voice] = rate if old is None else 0.8 * old + 0.2 * rate

    def _checked(self, s: Seg, r: Audio | Failure) -> Audio | Failure:
        """A part is an answer only if it sounds like its text: near-silent or far too short audio
        becomes a ``synthesis_failed`` of its request."""
        if not isinstance(r, Audio):
            return r
        info = engine_voices.voice_info(s.seg.voice)
        limit = info.max_chars_per_s if info is not None else engine_voices.DEFAULT_MAX_CHARS_PER_S
        refused = check_audio(r.samples, r.sample_rate, s.seg.text, speed=s.seg.speed, max_chars_per_s=limit)
        if refused is None:
            return r
        self.metrics.audio_refused(refused.reason)
        return Failure("synthesis_failed", f"voice {s.seg.voice!r}: {refused.message}")

    # -- 6) collect -------------------------------------------------------------------------
    def collect(self) -> list[PartResult]:
        """The results of every finished model call, in order (their PUTs may be in flight); the parts
        whose PUT ended are cached."""
        for pid, part in list(self._putting.items()):
            if part.stored is not None and part.stored.done():
                del self._putting[pid]
                if part.stored.exception() is None:  # a failed one raises where the object is needed
                    self.cache.set(pid, part.key)  # the audio is in S3 whoever waits for it now
        keep, out = [], list[PartResult]()
        for entry in self._futs:
            fut = entry[1]
            if not fut.done():
                keep.append(entry)
                continue
            try:
                results = fut.result()
            except BaseException:
                self._futs = []
                raise
            for s, r, key, share, sha, size, w, pw, pm, stored in results:
                if isinstance(r, Failure):
                    out.append((s, r, share, w))
                    continue
                part = Part(key, r.samples, cached=False, sha256=sha, bytes=size,
                            duration_s=round(len(r.samples) / r.sample_rate, 4), words=pw, marks=pm, stored=stored)
                self._putting[s.part_id] = part
                out.append((s, part, share, w))
        self._futs = keep
        return out

    # -- in flight ---------------------------------------------------------------------------
    def busy(self) -> bool:
        self._dropped = [j for j in self._dropped if not j.done()]
        return bool(self._futs) or bool(self._dropped) or bool(self._putting)

    def futures(self) -> list[Future[Any]]:
        return [f for _, f, _ in self._futs] + [j for j in self._dropped if not j.done()] + \
            [p.stored for p in self._putting.values() if p.stored is not None and not p.stored.done()]

    def backlog(self) -> int:
        """Segments consumed and not yet synthesized: what bounds prefetching."""
        return len(self.batcher) + sum(n for n, _, _ in self._futs)

    def held_by_partition(self) -> dict[int, int]:
        """Bytes of the segment records batched per partition (what the read-ahead is bounded by)."""
        held: dict[int, int] = {}
        for s in self.batcher.items():
            held[s.partition] = held.get(s.partition, 0) + s.size
        return held

    def drop(self) -> None:
        """Forget everything batched and in flight: calls not started are cancelled, the results of
        one still running are ignored (it counts as busy until it ends: no model swap under it)."""
        for _, done, job in self._futs:
            if not job.cancel():  # its model call ran or runs: busy until its DSP (queued after it) ends too
                self._dropped += [f for f in (job, done) if not f.done()]
        if self._alone is not None:  # a lone call cancelled before it ran must not hold the lanes for ever
            self._alone.set()
        self._futs = []
        self._putting.clear()  # PUTs in flight end on their own; nothing here waits for them
        self.batcher.remove_if(lambda s: True)

    def forget(self, gone: set[int]) -> None:
        self.batcher.remove_if(lambda s: s.partition in gone)

    def close(self) -> None:
        if self._alone is not None:
            self._alone.set()
        self._model.shutdown(wait=True, cancel_futures=True)
        if self._post is not None:
            self._post.shutdown(wait=True, cancel_futures=True)


_FIRST = (float("-inf"), -1)  # before every _urgency: the lone call of a stream's first segment


def _urgency(segs: list[Seg], *, post: bool) -> tuple[float, int]:
    """Which lane work goes first: the earliest due (the fair order's), then, within a request, its
    model calls before its parts' DSP (a request's later segment starts on a free lane while its earlier
    parts' DSP waits), except in a stream, whose chunks are wanted in order: there a part's DSP goes
    before the next segment's model call."""
    s = min(segs, key=lambda x: (x.due, x.seg.seq))
    return s.due, (2 * s.seg.seq + post) if s.seg.stream else int(post)


def _store_part(store: AudioStore, key: str, data: bytes, sha: str, marks: tuple[str, bytes] | None) -> str:
    """S3 pool: a part's object (and its marks object beside it); its sha256 once S3 has them."""
    if marks is not None:
        store.put(marks[0], marks[1], "application/json")
    return store.put(key, data, audio_codec.content_type(PART_FORMAT), sha256=sha)


def _run_into(fut: Future[Any], fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn`` and put its outcome (result or exception, raised into the loop at collect) in ``fut``."""
    try:
        fut.set_result(fn(*args))
    except BaseException as e:
        fut.set_exception(e)
