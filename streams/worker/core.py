"""The worker's decisions, without clients, threads or clocks of their own: the core of the loop.

vLLM splits ``EngineCore`` (the decisions) from ``EngineCoreProc`` (its sockets); here
:class:`WorkerCore` decides and :class:`~streams.worker.loop.Worker` is the shell that polls,
runs the model, uploads, joins and commits, handing what they returned to the core. Tested
directly, without fakes of Kafka or S3 (tests/unit/test_worker_core.py). Invariants, with the
ledger's own (:mod:`~streams.worker.ledger`):

* **One answer per request, built here** (:meth:`WorkerCore.answer`): a failed part, a
  rejection or an unreadable record fails its request with its code; a request whose parts
  are all made (their PUTs perhaps in flight: the join waits for them) is handed out to be joined once (:meth:`WorkerCore.to_join` marks it), and
  answered from its join's result only while its partition's generation is current.
* **What a transaction carries** (:meth:`WorkerCore.take_commit`): the answers taken (from
  then on their segments count as done), the offsets the committed-offset rule allows at that
  moment, the chunks those offsets pass and those of the answered requests (chunks first, in
  offset order), and a done record per answer; the ledger learns they are durable only from
  :meth:`WorkerCore.committed`, once the transaction committed.
* **When one is due** (:meth:`WorkerCore.commit_due`): at once for answers or chunks, for
  offsets alone once ``interval_s`` passed (or when forced).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from engine.base import Failure
from schemas import AudioRef, Chunk, ErrorInfo, ModelInfo, encode
from streams.kafka.producer import Record
from streams.worker.answers import build_completion
from streams.worker.done_log import done_record, piece_done_record
from streams.worker.intake import admit_record
from streams.worker.keys import PART_FORMAT
from streams.worker.ledger import Answer, ChunkDue, Ledger, PartResult, Request, Seg
from streams.worker.timings import NO_SOURCE_REASON, RequestTimings, chunk_offset, chunk_words, no_words_reason

__all__ = ["JoinJob", "Models", "Topics", "TxnPlan", "WorkerCore"]

_log = logging.getLogger("ttsflow.worker")


class Models(Protocol):
    """The serving model's names (:class:`~streams.worker.reload_gate.ReloadGate`)."""

    identity: str
    old_identities: list[str]
    model_info: ModelInfo

    def model_info_for(self, voice: str | None) -> ModelInfo: ...


@dataclass(frozen=True, slots=True)
class Topics:
    completed: str
    chunks: str
    done: str


@dataclass(frozen=True, slots=True)
class JoinJob:
    """A request whose parts are all in S3: join them (by these hashes; parts under these model identities)."""

    req: Request
    hashes: list[str]
    identities: list[str]


@dataclass(frozen=True, slots=True)
class TxnPlan:
    """One transaction: its records in order, the offsets it commits, the answers it makes durable."""

    records: list[Record]
    offsets: dict[int, int]
    answers: list[Answer]
    chunks: list[ChunkDue] = dataclasses.field(default_factory=list)


class WorkerCore:
    """The ledger and the answers of one worker, driven by the loop's thread."""

    def __init__(self, ledger: Ledger, models: Models, metrics: Any, *, topics: Topics,
                 uri: Callable[[str], str], bucket: str, sample_rate: int, engine_times: bool = True) -> None:
        self.ledger, self.models, self.metrics, self.topics = ledger, models, metrics, topics
        self.engine_times = engine_times  # the engine's word on timing voices the registry does not know
        self._uri, self._bucket, self._sample_rate = uri, bucket, sample_rate

    # -- 2) admit ---------------------------------------------------------------------------
    def admit(self, msg: Any, now: float) -> Seg | None:
        """One consumed record into the ledger; the work to synthesize, if any."""
        return admit_record(msg, self.ledger, self.metrics, identity=self.models.identity, now=now)

    def read_whole(self, fresh: Iterable[Seg]) -> list[JoinJob]:
        """The requests whose last segment is among ``fresh`` and lists their parts: what their join
        will need is known now (the joiner asks S3 about their object while their parts are made)."""
        jobs = []
        for s in fresh:
            req = self.ledger.requests.get((s.partition, s.seg.request_id))
            if req is None or req.last is not s.seg or req.finalizing:
                continue
            hashes = self.ledger.part_hashes(req)
            if hashes:
                jobs.append(self._job(req, hashes))
        return jobs

    def _job(self, req: Request, hashes: list[str]) -> JoinJob:
        """Join ``req`` by these part hashes, its parts under the serving model's identity or, after a hot
        reload, those served before it."""
        return JoinJob(req, hashes, [self.models.identity, *self.models.old_identities])

    # -- 4), 6) parts -------------------------------------------------------------------------
    def parts_failed(self, failures: Iterable[tuple[str, Failure]]) -> None:
        for pid, failure in failures:
            for req, seq in self.ledger.part_failed(pid, ErrorInfo(code=failure.code, message=failure.message)):
                _log.warning("event=request_failed request_id=%s user_id=%s seq=%d code=%s error=%s",
                             req.request_id, req.user_id, seq, failure.code, failure.message)

    def parts_done(self, results: Iterable[PartResult]) -> None:
        """Parts a model call made (their PUTs perhaps in flight) or failed: every segment waiting for them
        moves on; then those whose part's PUT ended since count as done (a failed PUT raises its error)."""
        for s, made, share, wait_s in results:
            self.ledger.queued(s, wait_s)
            if isinstance(made, Failure):
                self.parts_failed([(s.work_id, made)])
            else:
                self.ledger.part_made(s.work_id, made, share)
        self.ledger.settle()

    # -- 7) answers -----------------------------------------------------------------------------
    def to_join(self) -> list[JoinJob]:
        """Answer the requests that failed; hand out, once each, those whose parts are all in S3."""
        jobs = []
        for req, next_ in self.ledger.answerable():
            if next_ == "failed":
                self.answer(req, status="failed", error=req.failure)
            elif next_ == "parts_unknown":
                self.answer(req, status="failed", error=ErrorInfo(
                    code="parts_unknown", message="the last segment carries no part list and earlier parts are gone"))
            else:
                req.finalizing = True
                jobs.append(self._job(req, self.ledger.part_hashes(req) or []))
        return jobs

    def joined(self, results: Iterable[tuple[Request, AudioRef | ErrorInfo, RequestTimings | None]]) -> None:
        """Answer each joined request (its audio and words, or why the join failed) unless its partition moved on."""
        for req, res, words in results:
            if not self.ledger.current(req.partition, req.gen):
                continue
            if isinstance(res, ErrorInfo):
                self.answer(req, status="failed", error=res)
            else:
                self.answer(req, status="ok", audio=res, words=words)

    def answer(self, req: Request, *, status: str, audio: AudioRef | None = None,
               error: ErrorInfo | None = None, words: RequestTimings | None = None) -> None:
        """Build the completion; it is produced and its offsets committed by the next transaction."""
        seg = req.last or req.first  # several backends: the completion names the one that spoke (its voice)
        model_info = self.models.model_info_for(seg.voice if seg is not None else None)
        c, e2e_s = build_completion(req, status=status, model_info=model_info, now=datetime.now(UTC),
                                    audio=audio, error=error, words=words)
        self.ledger.answer(req, c, e2e_s)
        log = _log.warning if status == "failed" else _log.info
        log("event=completion request_id=%s user_id=%s status=%s segments=%d cached=%d code=%s",
            req.request_id, req.user_id, status, req.total, c.cached_segments, error.code if error else "-")

    # -- 8) the transaction's content -------------------------------------------------------------
    def commit_due(self, *, force: bool, since_last_s: float, interval_s: float) -> bool:
        """Answers or chunks to produce, or offsets that moved (at most every ``interval_s`` unless forced)."""
        if self.ledger.answers:
            return True
        if not self.ledger.tracker.advanced():
            return False
        return force or bool(self.ledger.chunks) or since_last_s >= interval_s

    def take_commit(self, assigned: set[int]) -> TxnPlan:
        """What the next transaction commits; the ledger counts the answers' segments as done from now."""
        answers = self.ledger.take_answers()
        began = datetime.now(UTC)
        for a in answers:  # the completion says how long it waited for this transaction
            done = a.completion
            if done.timings is not None and done.completed_at is not None:
                wait_ms = round(max(0.0, (began - done.completed_at).total_seconds()) * 1000, 3)
                a.completion = msgspec.structs.replace(done, timings=msgspec.structs.replace(done.timings,
                                                                                              commit_wait_ms=wait_ms))
        offsets = self.ledger.to_commit(assigned)
        chunks = self.ledger.take_chunks(offsets, answers)
        # chunks before their request's completion, the done record with it; a piece's chunk with its
        # own done record, deleted again with its request's
        records: list[Record] = []
        for c in chunks:
            records.append((self.topics.chunks, c.user_id.encode(), encode(self.chunk(c)), None))
            if c.more:
                records.append(piece_done_record(self.topics.done, c.partition, c.request_id, c.seq))
        for a in answers:
            records.append((self.topics.completed, a.user_id.encode(), encode(a.completion), None))
            records.append(done_record(self.topics.done, a))
            records += [piece_done_record(self.topics.done, a.partition, a.request_id, seq, delete=True)
                        for seq in range(a.pieces)]
        return TxnPlan(records, offsets, answers, chunks)

    def committed(self, plan: TxnPlan) -> None:
        """``plan``'s transaction committed: its offsets and answers are durable."""
        self.ledger.committed(plan.offsets, plan.answers, plan.chunks)
        for a in plan.answers:
            self.metrics.completion(a.completion.status, a.e2e_s)

    def chunk(self, c: ChunkDue) -> Chunk:
        p = c.part
        words = offset_s = reason = None
        if c.segment is not None and c.segment.timestamps:  # its words
            if p.words is None:
                reason = no_words_reason(c.voice, self.engine_times)
            elif c.segment.source is None:
                reason = NO_SOURCE_REASON
            else:
                words = chunk_words(p.words, c.segment.source)
        marks = p.marks.marks if p.marks is not None and p.marks.marks else None  # times in the chunk's audio
        if c.request is not None and (words is not None or reason is not None or marks is not None):
            # where it starts in the request (a word's or a mark's time there is offset_s plus its own)
            offset_s = chunk_offset({k: q.duration_s for k, q in c.request.parts.items()}, c.seq, self._sample_rate)
        return Chunk(request_id=c.request_id, user_id=c.user_id, seq=c.seq, total=c.total, cached=p.cached, more=c.more,
                     audio=AudioRef(uri=self._uri(p.key), bucket=self._bucket, key=p.key, format=PART_FORMAT,
                                    sample_rate=self._sample_rate, duration_s=p.duration_s, bytes=p.bytes,
                                    sha256=p.sha256),
                     # the backend and voice that spoke this part (a voice map's parts may differ)
                     model=msgspec.structs.replace(self.models.model_info_for(c.voice), voice=c.voice),
                     created_at=datetime.now(UTC),
                     words=words, offset_s=offset_s, words_reason=reason, marks=marks)
