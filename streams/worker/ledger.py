"""The worker's request ledger: what was consumed, what is durable, what is answerable, what may be committed.

Pure bookkeeping, no I/O and no clock of its own (``wall`` returns epoch seconds), so it is
tested directly (tests/unit/test_ledger.py). Invariants:

* **Offsets follow durability** (:class:`~streams.worker.offsets.OffsetTracker`): per
  partition the committable offset is the first segment not yet done. A segment is done
  when its part is in S3; a last segment, and every segment of a failed request, only when
  its request's answer is taken for the transaction that commits the offset
  (:meth:`take_answers`). A part whose PUT is still in flight (:attr:`Part.stored`) serves its
  request's join from memory at once, but its other segments become done, and their chunks due,
  only once the PUT ended (:meth:`settle`, or the request's answer, whose join waited for it).
* **A chunk once.** A streaming request's chunk of segment ``seq`` is produced only in the
  transaction whose committed offset passes that segment, or in the one that commits its
  request's completion, whichever comes first (:meth:`take_chunks`): committed together or
  aborted together, so a segment re-read after a crash is exactly one whose chunk no reader
  ever saw (or one of a request answered, dropped as done), and chunks of a request leave in
  offset order, which is ``seq`` order (the stage writes a request's segments in order, into
  one partition), never after its completion.
* **No second answer.** A request id found in the durable done set of its partition
  (loaded from the done topic on assignment, grown by each commit) within
  ``dedup_window_s`` is dropped, and so is a second copy of a ``(partition, request,
  seq)`` still in flight here; a request is answered once (:meth:`answer` removes it).
* **Generations.** Work belongs to a partition's generation, bumped on assignment, revoke
  and every drop; a part finished for an older generation (its partition was revoked or
  rewound meanwhile) changes nothing.
* **A piece's segment once.** A request sent in pieces (its segments carry ``more``) may be
  cut again by a stage restarted before its table caught up, so a segment can come twice
  with offsets far apart. Its chunk's transaction also writes a done record keyed
  ``<request id>/<seq>`` (:func:`piece_key`), and a segment found there (or in flight here) is
  dropped; the request's completion deletes them again (tombstones).
* **Bounded memory per request**: a part's samples are kept for the join only while the
  request's share stays within ``join_memory_bytes``; a request whose audio passes
  ``max_request_audio_s`` fails at once (``audio_too_long``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import numpy as np

from engine.base import Failure, Prepared
from schemas import Completion, End, ErrorInfo, Rejection, Segment
from streams.worker.marks import PartMarks
from streams.worker.offsets import OffsetTracker
from streams.worker.timings import PartWords

__all__ = ["Answer", "ChunkDue", "Ledger", "Part", "PartResult", "Request", "Seg", "piece_key"]

_END_SEQ = -1  # an End record's place in the in-flight set (a request has one)


def piece_key(request_id: str, seq: int) -> str:
    """The done-set key of segment ``seq`` of a request sent in pieces (a request id never holds '/')."""
    return f"{request_id}/{seq}"


@dataclass(slots=True, eq=False)
class Seg:
    """One consumed segment event and where it came from."""

    partition: int
    gen: int  # the partition's generation when consumed; stale after a revoke or rewind
    offset: int
    seg: Segment
    part_id: str
    received: float
    prepared: Prepared | None = None
    size: int = 0              # bytes of its record (what the read-ahead is bounded by)
    # where its time went (epoch seconds; Timings of the completion whose last part it is)
    written_at: float = 0.0    # the stage wrote it (its record's timestamp)
    read_at: float = 0.0       # this worker read it
    started_at: float = 0.0    # its model call began
    model_s: float = 0.0       # its share of the model call and DSP
    uploaded_at: float = 0.0   # its part was encoded and handed to S3 (its PUT then in flight)
    owed_s: float = 0.0        # how long it waited for a worker to take its partition (Ledger.owed)
    due: float = 0.0           # its place in the fair order (the batcher's due): the lanes' order too

    @property
    def work_id(self) -> str:
        """What is being made: the part, with its words when the segment asked for timestamps (a part
        made without words cannot serve it, so the two are made, and waited for, apart)."""
        return self.part_id + ("+words" if self.seg.timestamps else "")


@dataclass(slots=True)
class Part:
    key: str
    audio: np.ndarray | None  # None: fetch from S3 at join time (always beyond the request's join_memory_mb)
    cached: bool
    sha256: str = ""        # of the stored object (a streaming request's chunk names it)
    bytes: int = 0
    duration_s: float = 0.0
    words: PartWords | None = None  # its words (streams.worker.timings), when made or found with them
    marks: PartMarks | None = None  # its SSML marks (streams.worker.marks), when its segment holds some
    # its object's PUT (and its marks'), while it may still be in flight: None for a part found in S3.
    # Its result is the audio's sha256; it raises what the PUT raised
    stored: Future[str] | None = None

    def in_s3(self) -> bool:
        """Its object is in S3 (a PUT that failed raises its error here)."""
        if self.stored is None:
            return True
        if not self.stored.done():
            return False
        self.stored.result()
        return True


# a model call's result for one segment: the part made (in S3, or its PUT in flight) or why not, its share of the
# synthesis seconds, its wait from batching to the model starting on it
PartResult = tuple[Seg, Part | Failure, float, float]


@dataclass(slots=True)
class ChunkDue:
    """A streaming request's part in S3, waiting for the transaction whose offsets pass its segment."""

    partition: int
    offset: int
    request_id: str
    user_id: str
    seq: int
    total: int
    voice: str
    part: Part
    request: Request | None = None  # where the earlier parts' lengths are (a chunk's offset_s)
    segment: Segment | None = None
    more: bool = False  # of a request still arriving in pieces (total is a lower bound)


@dataclass(slots=True, eq=False)
class Request:
    partition: int
    gen: int
    request_id: str
    user_id: str
    total: int
    first: Segment | None
    offsets: list[int] = field(default_factory=list)
    seqs: set[int] = field(default_factory=set)          # consumed in this process
    parts: dict[int, Part] = field(default_factory=dict)  # ready (in S3)
    last: Segment | None = None
    failure: ErrorInfo | None = None
    start: datetime | None = None  # when the request was made (e2e latency), if known
    finalizing: bool = False
    synth_s: float = 0.0
    queue_s: float = 0.0
    held_bytes: int = 0    # part samples kept in memory for the join (bounded by join_memory_mb)
    audio_s: float = 0.0   # audio of the parts synthesized here so far (max_request_audio_s stops it early)
    pieces: bool = False   # sent in pieces: its segments' done records are deleted with its answer
    last_made: Seg | None = None  # the segment whose part was ready last, and when (its completion's Timings)
    made_at: float = 0.0

    @property
    def key(self) -> tuple[int, str]:
        return (self.partition, self.request_id)


@dataclass(slots=True)
class Answer:
    """A completion ready to be produced, and the request it answers."""

    partition: int
    request_id: str
    user_id: str
    completion: Completion
    offsets: list[int]
    e2e_s: float | None
    pieces: int = 0  # sent in pieces with this many segments: their done records are deleted with it


Next = Literal["failed", "join", "parts_unknown"]


class Ledger:
    """Per-partition requests in flight, the durable done set and the offset tracker of one worker."""

    def __init__(self, *, dedup_window_s: float, max_request_audio_s: float, join_memory_bytes: int,
                 sample_rate: int, wall: Callable[[], float] = time.time, backlog_credit_s: float = 0.0) -> None:
        self.dedup_window_s = dedup_window_s
        self.backlog_credit_s = backlog_credit_s
        self.max_request_audio_s = max_request_audio_s
        self.join_memory_bytes = join_memory_bytes
        self.sample_rate = sample_rate
        self.wall = wall
        self.tracker = OffsetTracker()
        self.requests: dict[tuple[int, str], Request] = {}
        self.waiting: dict[str, list[Seg]] = {}            # work id -> segments waiting for its part
        self.answers: list[Answer] = []
        self.chunks: dict[int, list[ChunkDue]] = {}        # partition -> chunks waiting for their offset's commit
        # request key -> its ready segments whose part's PUT is in flight (done, chunk due: settle())
        self.storing: dict[tuple[int, str], list[tuple[Seg, Part]]] = {}
        self._seen: set[tuple[int, str, int]] = set()      # (partition, request_id, seq) in flight here
        self._done: dict[int, dict[str, float]] = {}       # durable: request id -> answered at (epoch s)
        self._answering: set[tuple[int, str]] = set()      # answered, its transaction not yet committed
        self._gen: dict[int, int] = {}                     # partition -> generation of its in-memory work
        self._since: dict[int, float] = {}                 # partition -> when its generation began (epoch s)
        self._failed_since = False                          # a request failed since unwanted() last looked

    # -- partitions ---------------------------------------------------------------------
    def gen(self, partition: int) -> int:
        return self._gen.get(partition, 0)

    def current(self, partition: int, gen: int) -> bool:
        """Work of generation ``gen`` still counts (its partition was not revoked or rewound since)."""
        return self._gen.get(partition) == gen

    def assigned(self, partitions: set[int]) -> None:
        now = self.wall()
        for p in partitions:
            self._gen[p] = self._gen.get(p, 0) + 1
            self._since[p] = now

    def owed(self, partition: int, written_at: float) -> float:
        """How long a record of ``partition`` written at ``written_at`` (epoch s) waited before this
        worker took the partition (assigned, or rewound after an abort): a restart's, a rebalance's
        or an abort's backlog, which the batcher serves oldest first (``owed_s``). At most
        ``backlog_credit_s``, and 0 for a record read later than that after the partition was taken
        (it waited behind this worker's work, not for a worker; a deep backlog keeps read order)."""
        since = self._since.get(partition)
        if since is None or self.wall() - since > self.backlog_credit_s:
            return 0.0
        return min(self.backlog_credit_s, max(0.0, since - written_at))

    def load_done(self, partition: int, answered: dict[str, float]) -> None:
        """The durable done set of ``partition``: request id -> answered at (epoch seconds)."""
        self._done[partition] = answered

    def is_done(self, partition: int, request_id: str) -> bool:
        """Answered within the stage's dedup window (or answered here, its transaction in flight: a
        later copy of one of its segments must not start it again). Older ids may be reused: the
        stage lets them through."""
        if (partition, request_id) in self._answering:
            return True
        at = self._done.get(partition, {}).get(request_id)
        if at is None:
            return False
        if self.wall() - at < self.dedup_window_s:
            return True
        del self._done[partition][request_id]
        return False

    # -- 2) admit -------------------------------------------------------------------------
    def consumed(self, partition: int, offset: int) -> None:
        """Track a consumed offset; ``ValueError`` when the position went back without a rebalance."""
        self.tracker.add(partition, offset)

    def admit(self, p: int, off: int, seg: Segment, part_id: str, received: float) -> tuple[Seg | None, str | None]:
        """A decoded segment: ``(work, None)`` to synthesize, ``(None, reason)`` when dropped
        (``request_done``, ``duplicate``, ``bad_seq``), ``(None, None)`` when its request already failed."""
        if self.is_done(p, seg.request_id):
            self.tracker.mark_done(p, off)
            return None, "request_done"
        if (p, seg.request_id, seg.seq) in self._seen or seg.seq >= seg.total or \
                (seg.more and self.is_done(p, piece_key(seg.request_id, seg.seq))):
            # a re-emitted copy: its original has a lower offset and holds the commit back (or, for a
            # piece's segment, was done and committed with its chunk)
            self.tracker.mark_done(p, off)
            return None, "duplicate" if seg.seq < seg.total else "bad_seq"
        self._seen.add((p, seg.request_id, seg.seq))
        gen = self._gen.get(p, 0)
        req = self.requests.get((p, seg.request_id))
        if req is None:
            req = self.requests[(p, seg.request_id)] = Request(p, gen, seg.request_id, seg.user_id, seg.total, seg)
        req.offsets.append(off)
        req.seqs.add(seg.seq)
        req.pieces = req.pieces or seg.more
        if seg.last:
            req.last = seg
            req.total = seg.total
        elif seg.more:
            req.total = max(req.total, seg.total)
        if req.failure is not None:  # answered soon; nothing more to synthesize for it
            return None, None
        return Seg(p, gen, off, seg, part_id, received), None

    def admit_end(self, p: int, off: int, end: End) -> str | None:
        """The end of a request sent in pieces: its last segment came before (with ``more``), so
        nothing is synthesized; the request is answerable once every part is in S3. Returns the
        reason it was dropped, if it was."""
        if self.is_done(p, end.request_id):
            self.tracker.mark_done(p, off)
            return "request_done"
        if (p, end.request_id, _END_SEQ) in self._seen:
            self.tracker.mark_done(p, off)
            return "duplicate"
        self._seen.add((p, end.request_id, _END_SEQ))
        req = self.requests.get((p, end.request_id))
        if req is None:
            req = self.requests[(p, end.request_id)] = Request(p, self._gen.get(p, 0), end.request_id, end.user_id,
                                                                end.total, None,
                                                                start=end.created_at or end.enqueued_at)
        req.offsets.append(off)
        req.last = end.as_last()
        req.total = end.total
        req.pieces = True
        return None

    def admit_rejection(self, p: int, off: int, rej: Rejection) -> str | None:
        """The stage refused the request: it is answered, failed with the stage's code, in the next
        transaction. A rejection repeated by a restarted stage finds the request done (or already
        being answered here) and produces nothing. Returns the reason it was dropped, if it was."""
        if self.is_done(p, rej.request_id):
            self.tracker.mark_done(p, off)
            return "request_done"
        req = self.requests.get((p, rej.request_id))
        if req is not None:  # a copy while the first is in flight here: answered with it
            req.offsets.append(off)
            req.failure = req.failure or rej.error
            return "duplicate"
        req = self.requests[(p, rej.request_id)] = Request(p, self._gen.get(p, 0), rej.request_id, rej.user_id,
                                                            0, None, start=rej.enqueued_at)
        req.offsets.append(off)
        req.failure = rej.error
        return None

    def admit_unreadable(self, p: int, off: int, request_id: str | None, user_id: str, error: ErrorInfo) -> None:
        """A segment event that does not decode: its request (if its id can be read) fails with ``error``."""
        if request_id is None or self.is_done(p, request_id):
            self.tracker.mark_done(p, off)
            return
        req = self.requests.get((p, request_id))
        if req is None:
            req = self.requests[(p, request_id)] = Request(p, self._gen.get(p, 0), request_id, user_id, 1, None)
        req.offsets.append(off)
        req.failure = req.failure or error

    # -- 3), 6) parts ---------------------------------------------------------------------
    def join_waiting(self, s: Seg) -> bool:
        """The same audio is being made already: ``s`` waits for it (True), else False."""
        if s.work_id in self.waiting:
            self.waiting[s.work_id].append(s)
            return True
        return False

    def start_waiting(self, s: Seg) -> None:
        self.waiting[s.work_id] = [s]

    def queued(self, s: Seg, wait_s: float) -> None:
        req = self.requests.get((s.partition, s.seg.request_id))
        if req is not None:
            req.queue_s = max(req.queue_s, wait_s)

    def part_made(self, work_id: str, part: Part, synth_s: float) -> None:
        """The part of ``work_id`` (:attr:`Seg.work_id`) is made (in S3, or its PUT in flight): every
        segment waiting for it is ready."""
        for i, s in enumerate(self.waiting.pop(work_id, [])):
            if i == 0:
                req = self.requests.get((s.partition, s.seg.request_id))
                if req is not None:
                    req.synth_s += synth_s
                self.part_ready(s, part)
            else:  # same audio asked for again while it was being made
                self.part_ready(s, dataclasses.replace(part, cached=True))

    def part_ready(self, s: Seg, part: Part) -> None:
        if not self.current(s.partition, s.gen):
            return  # its partition was revoked or rewound meanwhile
        req = self.requests.get((s.partition, s.seg.request_id))
        if req is None:  # answered already (failed), or its partition was dropped
            self.tracker.mark_done(s.partition, s.offset)
            return
        req.parts[s.seg.seq] = self._hold(req, part)
        req.last_made, req.made_at = s, self.wall()
        if (s.seg.stream or not s.seg.last) and not part.in_s3():
            self.storing.setdefault(req.key, []).append((s, part))  # its PUT in flight: settle() moves it on
            return
        self._in_s3(s, req, part)

    def _in_s3(self, s: Seg, req: Request | None, part: Part) -> None:
        """``s``'s part is in S3: its chunk is due (a streaming request's), the segment done (not a last one)."""
        if req is not None and s.seg.stream and req.failure is None:
            self.chunks.setdefault(s.partition, []).append(ChunkDue(
                s.partition, s.offset, req.request_id, req.user_id, s.seg.seq, s.seg.total, s.seg.voice, part,
                req, s.seg, more=s.seg.more))
        if not s.seg.last:  # a last segment is done only with its completion
            self.tracker.mark_done(s.partition, s.offset)

    def settle(self) -> None:
        """Segments whose part's PUT ended since: done now, their chunks due (a PUT that failed raises
        its error, :class:`~storage.errors.S3Unavailable` for an outage)."""
        for key in list(self.storing):
            rest = []
            for s, part in self.storing[key]:
                if not part.in_s3():
                    rest.append((s, part))
                elif self.current(s.partition, s.gen):
                    self._in_s3(s, self.requests.get(key), part)
            if rest:
                self.storing[key] = rest
            else:
                del self.storing[key]

    def part_failed(self, work_id: str, error: ErrorInfo) -> list[tuple[Request, int]]:
        """Every request waiting for ``work_id`` fails with ``error``; returns the ones that failed now (and the seq)."""
        failed = []
        for s in self.waiting.pop(work_id, []):
            req = self.requests.get((s.partition, s.seg.request_id))
            if req is not None and req.failure is None:
                req.failure = error
                failed.append((req, s.seg.seq))
        return failed

    def _hold(self, req: Request, part: Part) -> Part:
        """The part as the request keeps it: its samples only while the request's share stays within
        ``join_memory_bytes`` (beyond it the join reads the part back from S3, so a long request's
        audio never piles up here). A request whose audio passes ``max_request_audio_s`` fails now,
        before the rest of it is synthesized."""
        if part.audio is None:
            return part
        if not part.cached:
            req.audio_s += len(part.audio) / self.sample_rate
            if req.audio_s > self.max_request_audio_s and req.failure is None:
                req.failure = ErrorInfo(code="audio_too_long", message=(
                    f"the audio passed {self.max_request_audio_s} s (TTS_MAX_REQUEST_AUDIO_S) after "
                    f"{len(req.parts) + 1} of {req.total} segments; split the text into several requests"))
        n = part.audio.nbytes
        if req.held_bytes + n > self.join_memory_bytes:
            return dataclasses.replace(part, audio=None)
        req.held_bytes += n
        return part

    # -- 7) what is answerable ------------------------------------------------------------------
    def answerable(self) -> Iterator[tuple[Request, Next]]:
        """Requests that can move on: ``failed`` (answer with its failure), ``join`` (every part is
        in S3: join them), ``parts_unknown`` (its last segment lists no parts and earlier ones are gone)."""
        for req in list(self.requests.values()):
            if req.finalizing:
                continue
            if req.failure is not None:
                yield req, "failed"
                continue
            if req.last is None or any(seq not in req.parts for seq in req.seqs):
                continue
            yield req, ("join" if self.part_hashes(req) is not None else "parts_unknown")

    @staticmethod
    def part_hashes(req: Request) -> list[str] | None:
        last = req.last
        assert last is not None
        if last.parts is not None and len(last.parts) == req.total:
            return list(last.parts)
        if req.total == 1:
            return [last.hash]
        return None  # without the list only parts seen here could be joined: not all of them

    def answer(self, req: Request, completion: Completion, e2e_s: float | None) -> None:
        """``req`` is answered by ``completion``: it leaves the ledger, produced and committed in step 8.
        Its segments whose part's PUT ended are settled first (an ok answer's join waited for every PUT,
        so its chunks go with it); a failed answer's still in flight need not be (it counts them done)."""
        for s, part in self.storing.pop(req.key, []):
            if part.stored is not None and part.stored.done() and part.stored.exception() is None:
                self._in_s3(s, req, part)
        self.answers.append(Answer(req.partition, req.request_id, req.user_id, completion, list(req.offsets), e2e_s,
                                   pieces=req.total if req.pieces else 0))
        self.requests.pop(req.key, None)
        self._answering.add(req.key)
        self._failed_since = self._failed_since or completion.status == "failed"
        self._seen.difference_update({(req.partition, req.request_id, s) for s in (*req.seqs, _END_SEQ)})

    # -- 8) the committed-offset rule -------------------------------------------------------------
    def due(self) -> bool:
        """Something to commit: answers, or offsets that moved (the caller rate-limits the latter)."""
        return bool(self.answers) or self.tracker.advanced()

    def take_answers(self) -> list[Answer]:
        """The answers for this transaction; every segment of theirs counts as done from now."""
        answers, self.answers = self.answers, []
        for a in answers:
            for off in a.offsets:
                self.tracker.mark_done(a.partition, off)
        return answers

    def take_chunks(self, offsets: dict[int, int], answers: Sequence[Answer] = ()) -> list[ChunkDue]:
        """The chunks of the transaction committing ``offsets`` and ``answers``: those whose segment
        the offsets pass, and every chunk still waiting of a request answered in it (segments finish
        out of order across requests, so a request can be answered while an earlier one of its
        partition holds the offset back: its chunks must commit with its completion, or a crash
        would leave a request answered, hence dropped when re-read, whose chunks never came). In
        offset order (each request's in ``seq`` order); the rest wait for a later one."""
        answered = {(a.partition, a.request_id) for a in answers}
        out: list[ChunkDue] = []
        for p in set(offsets) | {a.partition for a in answers}:
            waiting = self.chunks.get(p)
            if not waiting:
                continue
            off = offsets.get(p, -1)
            go = [c.offset < off or (c.partition, c.request_id) in answered for c in waiting]
            out += sorted((c for c, g in zip(waiting, go, strict=True) if g), key=lambda c: c.offset)
            rest = [c for c, g in zip(waiting, go, strict=True) if not g]
            if rest:
                self.chunks[p] = rest
            else:
                del self.chunks[p]
        return out

    def to_commit(self, assigned: set[int]) -> dict[int, int]:
        return {p: o for p, o in self.tracker.to_commit().items() if p in assigned}  # type: ignore[misc]

    def committed(self, offsets: dict[int, int], answers: list[Answer], chunks: Sequence[ChunkDue] = ()) -> None:
        """The transaction with ``offsets``, ``answers`` and ``chunks`` committed: they are durable now."""
        self.tracker.committed(offsets)
        now = self.wall()
        for c in chunks:
            if c.more:
                self._done.setdefault(c.partition, {})[piece_key(c.request_id, c.seq)] = now
        for a in answers:
            done = self._done.setdefault(a.partition, {})
            done[a.request_id] = now
            for seq in range(a.pieces):
                done.pop(piece_key(a.request_id, seq), None)
            self._answering.discard((a.partition, a.request_id))

    # -- dropping work ------------------------------------------------------------------------------
    def unwanted(self) -> set[str]:
        """Parts no request waits for any more (every segment waiting for them is of a request that was
        answered failed meanwhile): forgotten here; the caller drops them from its queue, so a failed
        request's read-ahead is not synthesized."""
        if not self._failed_since:
            return set()
        self._failed_since = False
        gone = {pid for pid, segs in self.waiting.items()
                if all((s.partition, s.seg.request_id) not in self.requests for s in segs)}
        for pid in gone:
            del self.waiting[pid]
        return gone

    def idle(self) -> bool:
        return not (self.requests or self.waiting or self.storing)

    def drop_all(self, assigned: set[int]) -> None:
        """Forget all in-memory work (nothing of it was committed); the done set is kept."""
        now = self.wall()
        for p in set(self._gen) | assigned:
            self._gen[p] = self._gen.get(p, 0) + 1  # results of tasks still running are ignored
            self._since[p] = now  # what is read again from the committed offsets is a backlog
        self.answers = []
        self._answering.clear()
        self.chunks.clear()
        self.storing.clear()
        self.tracker.drop(self.tracker.partitions())
        self.waiting.clear()
        self.requests.clear()
        self._seen.clear()

    def forget(self, gone: set[int]) -> None:
        """The partitions ``gone`` were revoked or lost: drop their work and done sets."""
        for p in gone:
            self._gen[p] = self._gen.get(p, 0) + 1
            self._done.pop(p, None)
            self._since.pop(p, None)
        self.tracker.drop(gone)
        for pid in list(self.waiting):
            rest = [s for s in self.waiting[pid] if s.partition not in gone]
            if rest:
                self.waiting[pid] = rest
            else:
                del self.waiting[pid]
        self.answers = [a for a in self.answers if a.partition not in gone]
        for p in gone:
            self.chunks.pop(p, None)
        for key in [k for k in self.requests if k[0] in gone]:
            del self.requests[key]
        for key in [k for k in self.storing if k[0] in gone]:
            del self.storing[key]
        self._seen = {k for k in self._seen if k[0] not in gone}
        self._answering = {k for k in self._answering if k[0] not in gone}
