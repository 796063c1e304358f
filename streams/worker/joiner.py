"""A request's audio object from its parts: streamed, bounded in memory, one failure one request.

Guarantees (docs/concepts/exactly-once.md; one huge request):

* Memory: the parts are read one at a time in order (from memory or S3, by the caller's
  ``part_samples``), faded, paused and resampled by :class:`engine.audio.JoinWriter` into a
  spool (RAM up to ``_SPOOL_RAM`` bytes, then a temporary file), which
  :meth:`storage.s3.AudioStore.put_file` sends in parts of 8 MiB. However long the
  request, a join holds one segment's audio and one upload part, never the whole audio.
* Content addressing: the object's key comes from the part hashes (the caller's); an object
  already stored there with its sha256 and duration in its metadata is answered without
  joining again (a request redone after a rewind or a restart costs one HEAD); one without
  them (an older worker's) keeps its bytes and sha256 (Ogg differs run to run). The HEAD is
  asked as soon as the request's last segment is read (:meth:`Joiner.ask`), so by its join the
  answer is there and the encode goes straight to the PUT; an answer older than a second, or one
  that failed, is asked again at the join. Asked there, it runs beside the encode when every part
  is in memory (``heads``), which it discards if the object is there; a join that reads parts
  from S3 asks first, so a redone long request reads nothing.
* Limits: a request whose audio passes ``max_audio_s`` fails with ``audio_too_long`` as soon
  as the join passes it.
* Word timings (a request that asked for timestamps): the parts' words (from memory, else from
  the part objects the join read: a part carries its words, so a restarted worker places every
  word without another call) are placed in the request and stored with its captions
  (:mod:`~streams.worker.timings`); a voice without durations, or a part whose words are gone,
  answers ok audio with the reason instead of words. When every part is in memory the audio's
  length is known before the join (:func:`engine.audio.joined_frames`), so the three caption
  objects are PUT beside the join rather than after it; the join still returns only once S3
  acknowledged all of them (a completion names only objects that exist), and a stored object of
  another length (an older worker's) has its words timed again after the join.
* Parts still on their way to S3 (:attr:`~streams.worker.ledger.Part.stored`: a part is handed
  over encoded, its PUT in flight): the join reads them from memory beside their PUTs, and returns
  only once every PUT ended (an answer names a request whose parts are all in S3; a PUT's error is
  raised, as the part maker's would have been). A part it must read back from S3 (beyond the
  request's join memory) is waited for first.
* Turns: at most ``joins`` joins run at once (the S3 pool is shared with the parts' uploads), and the
  waiting ones start one user at a time in rotation (:class:`~streams.worker.turns.UserTurns`): one
  user's flood of requests never keeps another user's answer waiting behind all of its joins.
* SSML marks (a request whose last segment lists ``marked`` parts): after the audio, each marked
  part's marks (memory, else its marks object in S3) placed in the joined audio
  (:mod:`~streams.worker.marks`); a marks object that is gone loses its marks (logged), not the answer.
* Failures of one object are that request's: an S3 call on it (a part's GET, the upload)
  that still fails after ``attempts`` tries fails the request with ``storage_failed`` if S3
  answers a ping, so the other partitions go on; only if the ping fails too is it an
  outage (:class:`~storage.errors.S3Unavailable` is raised: the worker commits nothing and
  waits for S3). Configuration errors (access denied, no bucket) are raised as they are. A
  local failure (the spool's disk full, the encoder) fails the request with ``join_failed``.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from engine import audio as audio_codec
from engine.errors import ItemError
from schemas import AudioRef, ErrorInfo, MarkTime, Segment, SegmentSource, TtsflowError
from storage.errors import ObjectMissing, S3Unavailable, StorageConfigError, StorageError
from storage.s3 import AudioStore
from streams.worker.keys import PART_FORMAT, part_id, request_digest
from streams.worker.ledger import Part, Request
from streams.worker.marks import PartMarks, decode_part_marks, part_marks_key, request_marks
from streams.worker.timings import (
    NO_SOURCE_REASON,
    PartWords,
    RequestTimings,
    decode_part_words,
    no_words_reason,
    part_words,
    part_words_key,
    start_timing_objects,
    store_request_timings,
    timing_objects,
    voice_times,
)
from streams.worker.turns import UserTurns

__all__ = ["JoinSpec", "Joiner", "join_upload"]

_log = logging.getLogger("ttsflow.joiner")

_SPOOL_RAM = 8 * 1024 * 1024  # encoded audio up to this stays in memory; longer goes to a temp file
_ATTEMPTS = 3
_BACKOFF_S = 0.5
# an early HEAD (Joiner.ask) answers for the join this long after it was asked; an older answer could miss
# an object another worker stored since (a request queued behind a long one), so the join asks again
_EARLY_HEAD_S = 1.0
_EARLY_HEADS_KEPT = 256

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """What to make: the object's key, its format and rate, the input rate, the limit."""

    key: str
    fmt: str
    sr_in: int
    sr_out: int
    max_audio_s: float
    request_id: str = ""


class _ObjectFailed(TtsflowError):
    """One object keeps failing while S3 answers: the request fails, nothing else stops."""


def join_upload(store: Any, spec: JoinSpec, n_parts: int, part_samples: Callable[[int], np.ndarray | None], *,
                attempts: int = _ATTEMPTS, sleep: Callable[[float], None] = time.sleep,
                heads: Executor | None = None, asked: Future[dict[str, Any] | None] | None = None
                ) -> AudioRef | ErrorInfo:
    """Join parts ``0..n_parts-1`` (``part_samples(seq)``: float mono at ``spec.sr_in``, None if the
    part is gone) into the object at ``spec.key``; its :class:`AudioRef`, or the request's error.
    ``heads``: ask whether the object exists on that pool beside the encode, not before it.
    ``asked``: that question asked already (a HEAD started when the request's last segment was read);
    if it failed, it is asked again here."""
    t0 = time.perf_counter()

    def retrying(what: str, fn: Callable[[], T]) -> T:
        last: StorageError | None = None
        for attempt in range(attempts):
            try:
                return fn()
            except (StorageConfigError, ObjectMissing):
                raise
            except S3Unavailable as e:
                last = e
                if attempt < attempts - 1:
                    sleep(_BACKOFF_S * 2 ** attempt)
            except StorageError as e:  # S3 said no (4xx): the same call gets the same answer
                last = e
                break
        store.ping()  # raises S3Unavailable if S3 is down as a whole: an outage, not this object
        raise _ObjectFailed(f"{what}: {last}")

    def stored(head: dict[str, Any] | None) -> AudioRef | None:
        """The object already there with its sha256 and duration: the answer without joining."""
        meta = (head or {}).get("metadata") or {}
        if head is not None and head.get("sha256") and meta.get("duration_s"):
            return _ref(store, spec, str(head["sha256"]), int(head["bytes"]), float(meta["duration_s"]))
        return None

    def ask() -> dict[str, Any] | None:
        return retrying("head", lambda: store.head(spec.key))

    def answer(fut: Future[dict[str, Any] | None]) -> dict[str, Any] | None:
        """A HEAD's answer; the early one (``asked``, no retries of its own) asked again if it failed."""
        try:
            return fut.result()
        except StorageError:
            if fut is not asked:  # its retries are spent
                raise
        return ask()

    try:
        head: dict[str, Any] | None = None
        beside: Future[dict[str, Any] | None] | None = None  # a HEAD answered after the encode
        if heads is None:  # parts read from S3: the answer first, so a stored object reads nothing
            head = answer(asked) if asked is not None else ask()
            if (done := stored(head)) is not None:
                return done
        else:
            beside = asked if asked is not None else heads.submit(ask)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_RAM, prefix="ttsflow-join-") as spool:
            try:
                writer = audio_codec.JoinWriter(spool, spec.sr_in, spec.sr_out, spec.fmt)  # type: ignore[arg-type]
            except ItemError as e:
                return ErrorInfo(code="unsupported_format", message=str(e))
            try:
                for seq in range(n_parts):
                    try:
                        samples = retrying(f"part {seq}", lambda seq=seq: part_samples(seq))  # type: ignore[misc]
                    except ObjectMissing:
                        samples = None
                    if samples is None:
                        return ErrorInfo(code="part_missing", message=f"audio of segment {seq} is not in the store")
                    writer.add(samples)
                    del samples
                    if writer.duration_s > spec.max_audio_s:
                        return ErrorInfo(code="audio_too_long", message=(
                            f"the audio passed {spec.max_audio_s:.0f} s (TTS_MAX_REQUEST_AUDIO_S) at segment {seq} "
                            f"of {n_parts}; split the text into several requests"))
            finally:
                writer.close()
            duration_s = round(writer.frames / spec.sr_out, 4)
            if beside is not None:
                head = answer(beside)
                if (done := stored(head)) is not None:
                    return done
            if head is not None and head.get("sha256"):  # stored by an older worker: keep its bytes
                return _ref(store, spec, str(head["sha256"]), int(head["bytes"]), duration_s)
            sha, size = retrying("upload", lambda: store.put_file(
                spec.key, spool, audio_codec.content_type(spec.fmt), metadata={"duration_s": f"{duration_s}"}))
    except _ObjectFailed as e:
        _log.warning("event=request_storage_failed request_id=%s key=%s error=%s", spec.request_id, spec.key, e)
        return ErrorInfo(code="storage_failed", message=f"s3 keeps failing on this request's audio ({e})")
    except (OSError, RuntimeError) as e:  # the spool's disk, libsndfile: this request's join, not S3's
        _log.warning("event=request_join_failed request_id=%s error=%s", spec.request_id, e)
        return ErrorInfo(code="join_failed", message=f"{type(e).__name__}: {e}")
    _log.info("event=request_joined request_id=%s segments=%d duration_s=%.1f bytes=%d seconds=%.2f",
              spec.request_id, n_parts, duration_s, size, time.perf_counter() - t0)
    return _ref(store, spec, sha, size, duration_s)


def _sources(last: Segment, n: int) -> list[SegmentSource | None] | None:
    """Where each of a request's ``n`` segments came from in its text (the last segment lists them; a
    one-segment request's is its own), None when the stage did not say."""
    if last.sources is not None and len(last.sources) == n:
        return list(last.sources)
    return [last.source] if n == 1 else None


def _ref(store: Any, spec: JoinSpec, sha: str, size: int, duration_s: float) -> AudioRef:
    url = store.presigned_url(spec.key) if getattr(store, "presign_ttl_s", 0) else None  # TTS_S3_PRESIGN_TTL_S
    return AudioRef(uri=store.uri(spec.key), bucket=store.bucket, key=spec.key, format=spec.fmt,
                    sample_rate=spec.sr_out, duration_s=duration_s, bytes=size, sha256=sha, url=url)


class Joiner:
    """Finished requests joined on the S3 pool, one join per request at a time
    (the core marks :attr:`Request.finalizing`, and drops a join finished for a revoked or rewound partition)."""

    def __init__(self, store: AudioStore, io: ThreadPoolExecutor, *, sample_rate: int, max_audio_s: float,
                 engine_times: bool = True, joins: int = 2) -> None:
        self.store = store
        self._io = io
        self.joins = joins  # at once; the rest wait their user's turn
        self._waiting: UserTurns[tuple[Request, JoinSpec, list[str], dict[int, Part], list[str], Segment]] = UserTurns()
        self.sample_rate = sample_rate
        self.max_audio_s = max_audio_s
        self.engine_times = engine_times  # the engine's word on timing voices the registry does not know
        self._futs: list[tuple[Request, Future[tuple[AudioRef | ErrorInfo, RequestTimings | None]]]] = []
        # HEADs of joins from memory, beside their encode (a pool of their own: a join waits for its HEAD)
        self._heads = ThreadPoolExecutor(max(1, joins), thread_name_prefix="s3-head")
        # HEADs asked when a request's last segment was read, by object key: (when, its answer to come)
        self._early: OrderedDict[str, tuple[float, Future[dict[str, Any] | None]]] = OrderedDict()

    def _spec(self, req: Request, hashes: list[str], identities: list[str]) -> JoinSpec:
        last = req.last
        assert last is not None
        out_sr = last.sample_rate or self.sample_rate
        key = self.store.key("req", request_digest(hashes, last.format, identities[0], out_sr), last.format)
        return JoinSpec(key=key, fmt=last.format, sr_in=self.sample_rate, sr_out=out_sr,
                        max_audio_s=self.max_audio_s, request_id=req.request_id)

    def ask(self, req: Request, hashes: list[str], identities: list[str]) -> None:
        """Ask S3 now whether ``req``'s object exists (its last segment was just read, so its key is
        known): its join, tens of milliseconds later, then goes straight from the encode to the PUT.
        Skipped while ``joins`` such HEADs are in flight (a flood's would queue ahead of the joins' own);
        an answer older than :data:`_EARLY_HEAD_S` at the join is asked again there."""
        key = self._spec(req, hashes, identities).key
        if key in self._early or sum(1 for _, f in self._early.values() if not f.done()) >= self.joins:
            return
        self._early[key] = (time.monotonic(), self._heads.submit(self.store.head, key))
        while len(self._early) > _EARLY_HEADS_KEPT:  # requests that failed or were dropped before their join
            self._early.popitem(last=False)

    def _asked(self, key: str) -> Future[dict[str, Any] | None] | None:
        got = self._early.pop(key, None)
        if got is None or time.monotonic() - got[0] > _EARLY_HEAD_S:
            return None
        return got[1]

    def submit(self, req: Request, hashes: list[str], identities: list[str]) -> None:
        """Join ``req``'s parts (in memory, else from S3) into its object; ``identities``: the serving
        model's first, then the ones served before a hot reload (where older parts are stored)."""
        parts = {seq: req.parts[seq] for seq in req.parts}
        last = req.last
        assert last is not None
        self._waiting.add(req.user_id, (req, self._spec(req, hashes, identities), hashes, parts, identities, last))
        self._start()

    def _start(self) -> None:
        """Start waiting joins, one user at a time in rotation, while fewer than ``joins`` run."""
        while len(self._futs) < self.joins and len(self._waiting):
            job = self._waiting.pop()
            assert job is not None
            req, spec, hashes, parts, identities, last = job
            self._futs.append((req, self._io.submit(self._join_all, spec, hashes, parts, identities, last,
                                                    self._asked(spec.key))))

    def _join_all(self, spec: JoinSpec, hashes: list[str], parts: dict[int, Part], identities: list[str],
                  last: Segment, asked: Future[dict[str, Any] | None] | None = None
                  ) -> tuple[AudioRef | ErrorInfo, RequestTimings | None]:
        """Pool thread: the request's audio, then (if it asked for them) its word timings, and its marks;
        returned once every part's PUT ended."""
        for part in parts.values():
            if part.stored is not None and part.audio is None:  # read back from S3 below: there first
                part.stored.result()
        try:
            return self._join_parts(spec, hashes, parts, identities, last, asked)
        finally:
            for part in parts.values():  # a PUT's error is raised (S3Unavailable: the loop's outage)
                if part.stored is not None:
                    part.stored.result()

    def _join_parts(self, spec: JoinSpec, hashes: list[str], parts: dict[int, Part], identities: list[str],
                    last: Segment, asked: Future[dict[str, Any] | None] | None = None
                    ) -> tuple[AudioRef | ErrorInfo, RequestTimings | None]:
        found: dict[int, PartWords] = {}  # words of the part objects the join read from S3
        wants = last.timestamps and voice_times(last.voice, self.engine_times)
        early = self._early_timings(spec, hashes, parts, last) if wants else None
        try:
            audio = self._join(spec, hashes, parts, identities, last.timestamps, found if wants else None, asked)
        except BaseException:
            if early is not None:  # its PUTs' answers read, their connections ended; the join's error is raised
                with contextlib.suppress(Exception):
                    early[1]()
            raise
        timings: RequestTimings | None = None
        if early is not None:  # the caption objects' PUTs ran beside the join: their answers now (S3 errors raise)
            duration_s, wait = early
            if isinstance(audio, ErrorInfo):  # the request fails as it would have: its captions are moot
                try:
                    wait()
                except Exception:  # orphaned content-addressed objects, like a failed request's parts
                    pass
                return audio, None
            got = wait()
            if audio.duration_s == duration_s:
                timings = got
            else:  # the stored object says another length: time them again
                _log.warning("event=timings_redone request_id=%s predicted_s=%s duration_s=%s",
                             spec.request_id, duration_s, audio.duration_s)
        if isinstance(audio, ErrorInfo):
            return audio, None
        if timings is None and last.timestamps:
            timings = self._timings(hashes, parts, identities, last, audio.duration_s, found)
        if last.marked:
            timings = replace(timings or RequestTimings(),
                              marks=self._marks(hashes, parts, identities, last.marked, last.timestamps))
        return audio, timings

    def _early_timings(self, spec: JoinSpec, hashes: list[str], parts: dict[int, Part],
                       last: Segment) -> tuple[float, Callable[[], RequestTimings]] | None:
        """A timed request whose every part (audio and words) is in memory: its length known before
        the join (:func:`engine.audio.joined_frames`), its word-timing object and captions built now
        and their PUTs sent from this thread (read after the join), so S3 stores them while the join
        runs and its audio's PUT waits (one round trip to S3 per request, not two; no hand-off to
        another thread). None where that is not
        known here (a part only in S3, no sources, past the limit): the join times them after."""
        sources = _sources(last, len(hashes))
        if sources is None or any(x is None for x in sources):
            return None
        words: list[PartWords] = []
        lengths: list[int] = []
        for seq in range(len(hashes)):
            part = parts.get(seq)
            if part is None or part.audio is None or part.words is None:
                return None
            words.append(part.words)
            lengths.append(len(part.audio))
        frames = audio_codec.joined_frames(lengths, spec.sr_in, spec.sr_out, spec.fmt)
        duration_s = round(frames / spec.sr_out, 4)
        if frames / spec.sr_out > spec.max_audio_s:
            return None
        objects, count = timing_objects(self.store, words, sources, duration_s)
        return duration_s, start_timing_objects(self.store, objects, count)

    def _marks(self, hashes: list[str], parts: dict[int, Part], identities: list[str], marked: list[int],
               timed: bool = False) -> list[MarkTime]:
        """The marks of the parts ``marked`` (memory, else S3) placed in the joined audio; the lengths of
        the parts before them from memory, else their objects' sizes (16-bit mono WAV, 44-byte header)."""
        sr = self.sample_rate
        lengths: list[int] = []
        found: dict[int, PartMarks] = {}
        wanted = set(marked)
        for seq in range(min(max(wanted), len(hashes) - 1) + 1):
            part = parts.get(seq)
            pm = part.marks if part is not None else None
            if pm is None and seq in wanted:
                pm = self._fetch_beside(part.key if part is not None else None, hashes[seq], identities,
                                        part_marks_key, decode_part_marks, timed)
                if pm is None:
                    _log.warning("event=marks_missing segment=%d part=%s", seq, hashes[seq])
            if pm is not None and seq in wanted:
                found[seq] = pm
                lengths.append(round(pm.samples * sr / pm.sample_rate))
            elif part is not None:
                lengths.append(len(part.audio) if part.audio is not None else round(part.duration_s * sr))
            else:
                lengths.append(self._stored_length(hashes[seq], identities, timed))
        return request_marks(lengths, sr, found)

    def _stored_length(self, segment_hash: str, identities: list[str], timed: bool = False) -> int:
        """A part's samples from its object (a part not in this worker's memory): its size (16-bit mono
        WAV, 44-byte header), or, for a part that carries its words, their ``samples``."""
        for w in ((True, False) if timed else (False,)):
            for i in identities:
                key = self.store.key("part", part_id(segment_hash, i, w), PART_FORMAT)
                head = self.store.head(key)
                if head is None:
                    continue
                if w:  # its size counts its words too: read them
                    got = self._fetch_part(key, segment_hash, identities, True)
                    pw = part_words(got[1]) if got is not None else None
                    if pw is not None:
                        return round(pw.samples * self.sample_rate / pw.sample_rate)
                return max(0, int(head["bytes"]) - 44) // 2
        return 0

    def _fetch_beside(self, key: str | None, segment_hash: str, identities: list[str], where: Callable[[str], str],
                      decode: Callable[[bytes], T | None], timed: bool = False) -> T | None:
        """An object beside a part's audio (its marks): by the part's stored key, else by its content
        address under the serving model and those served before it."""
        kinds = (True, False) if timed else (False,)
        keys = [key] if key is not None else \
            [self.store.key("part", part_id(segment_hash, i, w), PART_FORMAT) for w in kinds for i in identities]
        for k in keys:
            try:
                return decode(self.store.get(where(k)))
            except ObjectMissing:
                continue
        return None

    def _timings(self, hashes: list[str], parts: dict[int, Part], identities: list[str], last: Segment,
                 duration_s: float, found: dict[int, PartWords] | None = None) -> RequestTimings:
        """Every part's words (memory, else the part object from S3) placed in the request and stored
        with its captions."""
        if not voice_times(last.voice, self.engine_times):
            return RequestTimings(reason=no_words_reason(last.voice, self.engine_times))
        sources = _sources(last, len(hashes))
        if sources is None or any(x is None for x in sources):
            return RequestTimings(reason=NO_SOURCE_REASON)
        found = {} if found is None else found
        words: list[PartWords] = []
        for seq, h in enumerate(hashes):
            part = parts.get(seq)
            pw = (part.words if part is not None else None) or found.get(seq)
            if pw is None:  # not read by the join (its audio was in memory, or the request's object existed)
                got = self._fetch_part(part.key if part is not None else None, h, identities, True)
                pw = self._words_in(*got) if got is not None else None
            if pw is None:
                return RequestTimings(reason=f"the word timings of segment {seq} are not in the store")
            words.append(pw)
        return store_request_timings(self.store, words, sources, duration_s)

    def _words_in(self, key: str, data: bytes) -> PartWords | None:
        """The words a part object carries, else (a part an older worker made) its words object beside it."""
        pw = part_words(data)
        if pw is not None:
            return pw
        try:
            return decode_part_words(self.store.get(part_words_key(key)))
        except ObjectMissing:
            return None

    def _join(self, spec: JoinSpec, hashes: list[str], parts: dict[int, Part], identities: list[str],
              timed: bool = False, found: dict[int, PartWords] | None = None,
              asked: Future[dict[str, Any] | None] | None = None) -> AudioRef | ErrorInfo:
        """Pool thread: stream the parts in order (memory, else S3) into the request's object; the
        words of a timed request's parts read from S3 go to ``found`` (words only: the bytes are
        let go part by part)."""
        sr = self.sample_rate

        def samples(seq: int) -> np.ndarray | None:
            part = parts.get(seq)
            if part is not None and part.audio is not None:
                return part.audio
            got = self._fetch_part(part.key if part is not None else None, hashes[seq], identities, timed)
            if got is None:
                return None
            if found is not None and (part is None or part.words is None):
                pw = self._words_in(*got)
                if pw is not None:
                    found[seq] = pw
            x, psr = audio_codec.decode(got[1])
            return x if psr == sr else audio_codec.resample(x, psr, sr)

        in_memory = all(seq in parts and parts[seq].audio is not None for seq in range(len(hashes)))
        return join_upload(self.store, spec, len(hashes), samples, heads=self._heads if in_memory else None,
                           asked=asked)

    def _fetch_part(self, key: str | None, segment_hash: str, identities: list[str],
                    timed: bool = False) -> tuple[str, bytes] | None:
        """A part's key and bytes: by its stored key, else by its content address under the serving
        model or, after a hot reload, the models served before it (a part made before the swap); a
        timed request's part with its words first, then one without (made by an older worker)."""
        kinds = (True, False) if timed else (False,)
        keys = [key] if key is not None else \
            [self.store.key("part", part_id(segment_hash, i, w), PART_FORMAT) for w in kinds for i in identities]
        for k in keys:
            try:
                return k, self.store.get(k)
            except ObjectMissing:
                continue
        return None

    def collect(self) -> list[tuple[Request, AudioRef | ErrorInfo, RequestTimings | None]]:
        """Every request whose join finished, with its audio (and word timings) or why it failed (S3
        unreachable: raised)."""
        keep, out = [], []
        for req, fut in self._futs:
            if not fut.done():
                keep.append((req, fut))
                continue
            try:
                out.append((req, *fut.result()))
            except S3Unavailable:
                self._futs = []
                self._waiting.clear()
                raise
        self._futs = keep
        self._start()
        return out

    def busy(self) -> bool:
        return bool(self._futs) or bool(len(self._waiting))

    def futures(self) -> list[Future[Any]]:
        return [f for _, f in self._futs]

    def drop(self) -> None:
        self._futs = []
        self._waiting.clear()
        self._early.clear()

