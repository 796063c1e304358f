"""Requests sent in pieces: the text a stage holds for each open one, and what each piece turns into.

A request whose text is still being written arrives as pieces (:attr:`schemas.Request.seq`,
``final`` on the last; docs/using/streaming-input.md). Pure: no Kafka, no faust, no clock of
its own. Guarantees:

* **State in the table.** An open request is one entry of the stage's ``open`` table
  (changelog-backed, in the partition of its pieces; key ``<record key> 0x00 <request id>``,
  value :class:`OpenRequest` as msgpack): its settings (from piece 0), the next piece number,
  the pieces that came early, the text held (not yet spoken) and the hashes of the segments
  sent. A stage killed and restarted rebuilds the table and goes on where it left.
* **Each piece once, in order.** A piece numbered below the next one (re-sent by its producer,
  or re-read after a crash) is dropped; one above it is held (at most ``max_pieces_ahead``,
  else ``piece_gap``) until the gap fills. A piece of a request already closed (after its final
  piece, or failed) is dropped: the request id is in the dedup table, as for whole requests.
* **Segments as soon as text is complete** (:func:`streams.stage.cut.cut_open`): a sentence, the
  first clause (a short first segment for a streaming request), everything on ``flush``, the
  whole words held after ``stream_idle_cut_ms`` without a piece. They go out with ``more`` set
  and numbered in order; after the final piece an :class:`~schemas.End` record carries ``total``
  and ``parts`` (a last segment would be done only with its completion, after the join, so its
  chunk would wait for the join).
* **Deterministic replay.** Every change is a function of the partition's records in order:
  the pieces, and the stage's own timer records (:func:`tick_value`), which carry the number of
  changes the request had when the timer decided and do nothing if it has had more since. A
  stage that re-reads records after a crash with its table behind cuts the same segments under
  the same numbers; a segment sent twice that way is dropped by the worker (its piece done
  record).
* **Bounded.** A user has at most ``max_open_streams_per_user`` open requests
  (``too_many_streams``), a stage at most ``max_open_streams`` (``stage_busy``: counted over the
  partitions it holds, so this one depends on the assignment), a request at most
  ``max_stream_pieces`` pieces (``too_many_pieces``) and ``max_text_chars`` characters
  (``text_too_long``); a request without a piece for ``stream_timeout_s`` before its final one is
  closed with ``stream_timeout`` (what was spoken stays spoken, as chunks); and opening one takes a
  token of the user's admission bucket (``rate_limited``, :mod:`streams.stage.admission`). Each is a
  rejection the worker answers once, as a failed completion.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from engine import mix as engine_mix
from engine.timing import segment_sources
from schemas import End, Request, Segment, SegmentSource, check_content, encode, request_hash, segment_hash
from schemas.errors import ContentError, SchemaError
from streams.errors import StreamError
from streams.stage.cut import budget_for, cut_open, speakable
from streams.stage.text import normalize

if TYPE_CHECKING:
    from streams.stage.core import Outcome, RateView, StageCore

__all__ = ["CONTROL_HEADER", "OpenIndex", "OpenRequest", "OpenView", "PieceHandler", "decode_open", "encode_open",
           "open_key", "tick_value"]

CONTROL_HEADER = "ttsflow-control"  # the stage's own records on the requests topic carry it ("tick")
TickKind = Literal["idle", "timeout"]


class Held(msgspec.Struct, array_like=True):
    """A piece that came before an earlier one."""

    text: str
    final: bool
    flush: bool


class OpenRequest(msgspec.Struct, kw_only=True):
    """One open request sent in pieces, as the ``open`` table keeps it."""

    user_id: str
    partition: int
    enqueued_at: float
    last_at: float                    # stage clock when a piece last changed it (the timer's)
    changes: int = 0                  # pieces and timer records applied: a timer record names this
    next_seq: int = 0
    ahead: dict[int, Held] = {}
    held: str = ""
    hashes: list[str] = []
    chars: int = 0
    raw_at: int = 0                   # characters of the pieces' text before ``held`` (-1: lost track)
    sources: list[SegmentSource | None] = []  # where each segment came from in the pieces' text
    # from piece 0
    voice_asked: str | None = None
    voice: str = ""                   # chosen at the first segment, then kept
    model: str = ""
    format: str = "wav"
    speed: float = 1.0
    sample_rate: int | None = None
    stream: bool = False
    priority: Literal["interactive", "bulk"] = "interactive"
    created_at: datetime | None = None
    timestamps: bool = False


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(OpenRequest)


def encode_open(st: OpenRequest) -> bytes:
    return _enc.encode(st)


def decode_open(raw: bytes) -> OpenRequest:
    return _dec.decode(raw)


def open_key(user_key: bytes, request_id: str) -> bytes:
    """The ``open`` table's key of a request (a request id never holds 0x00)."""
    return user_key + b"\x00" + request_id.encode("ascii")


def tick_value(request_id: str, user_id: str, kind: TickKind, changes: int) -> bytes:
    """A timer record: cut what is held (``idle``) or close (``timeout``) if the request had
    ``changes`` changes when it is read."""
    return json.dumps({"request_id": request_id, "user_id": user_id, "tick": kind, "changes": changes}).encode()


class OpenView(Protocol):
    """The open requests as :class:`PieceHandler` sees them for one record key."""

    def get(self, request_id: str, /) -> OpenRequest | None: ...

    def user_open(self) -> int: ...

    def all_open(self) -> int: ...


class OpenIndex:
    """In-memory index of the open requests a stage holds (rebuilt from its table on each
    assignment): counts per record key, and which are due an idle cut or a timeout."""

    def __init__(self) -> None:
        self._by_key: dict[bytes, tuple[float, int, bool, int, str, str]] = {}
        self._users: Counter[bytes] = Counter()
        self._ticked: dict[bytes, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def rebuild(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        self._by_key.clear()
        self._users.clear()
        for k, v in items:
            try:
                self.put(k, decode_open(v))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue

    def user_count(self, user_key: bytes) -> int:
        return self._users[user_key]

    def put(self, key: bytes, st: OpenRequest) -> None:
        if key not in self._by_key:
            self._users[key.rsplit(b"\x00", 1)[0]] += 1
        rid = key.rsplit(b"\x00", 1)[1].decode("ascii")
        self._by_key[key] = (st.last_at, st.changes, bool(st.held.strip()), st.partition, rid, st.user_id)

    def delete(self, key: bytes) -> None:
        if self._by_key.pop(key, None) is not None:
            user = key.rsplit(b"\x00", 1)[0]
            self._users[user] -= 1
            if self._users[user] <= 0:
                del self._users[user]
        self._ticked.pop(key, None)

    def due(self, now: float, *, idle_s: float, timeout_s: float) -> list[tuple[bytes, int, str, str, TickKind, int]]:
        """``(user key, partition, request id, user id, kind, changes)`` of each open request due a
        timer record not sent yet."""
        out: list[tuple[bytes, int, str, str, TickKind, int]] = []
        for key, (last_at, changes, held, partition, rid, uid) in self._by_key.items():
            kind: TickKind | None = None
            if now - last_at >= timeout_s:
                kind = "timeout"
            elif held and now - last_at >= idle_s:
                kind = "idle"
            if kind is None or self._ticked.get(key) == (kind, changes):
                continue
            self._ticked[key] = (kind, changes)
            out.append((key.rsplit(b"\x00", 1)[0], partition, rid, uid, kind, changes))
        return out


class _Closed(StreamError):
    """The request fails now with this code (raised inside the handler, answered as a rejection)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class PieceHandler:
    """What a piece or a timer record does to its open request (see the module docstring)."""

    def __init__(self, core: StageCore, clock: Callable[[], float]) -> None:
        self.core, self.clock = core, clock
        self.s = core.stage

    # -- records -----------------------------------------------------------------------
    def piece(self, key: bytes | None, value: bytes, req: Request, *, partition: int, offset: int,
              timestamp_ms: int | None, opened: OpenView, rate: RateView | None = None) -> Outcome:
        """A piece: the first one of a request (in any order) opens it within the bounds and the user's
        admission (:mod:`streams.stage.admission`); the rest are applied in order."""
        rid, s = req.request_id, self.s
        st = opened.get(rid)
        if st is None:
            if opened.user_open() >= s.max_open_streams_per_user:
                return self._reject(key, value, rid, "too_many_streams", (
                    f"this user has {s.max_open_streams_per_user} requests sent in pieces open "
                    "(TTS_MAX_OPEN_STREAMS_PER_USER); finish one first"), partition, offset, timestamp_ms,
                    remember=False)
            if opened.all_open() >= s.max_open_streams:
                return self._reject(key, value, rid, "stage_busy", (
                    f"the stage holds {s.max_open_streams} requests sent in pieces open (TTS_MAX_OPEN_STREAMS); "
                    "retry later"), partition, offset, timestamp_ms, remember=False)
            admitted = self.core.admit(key, value, rid, rate, partition=partition, offset=offset,
                                       timestamp_ms=timestamp_ms)
            if admitted.kind == "failed":
                return admitted
            now = self.clock()
            st = OpenRequest(user_id=req.user_id, partition=partition,
                             enqueued_at=(timestamp_ms / 1000.0) if timestamp_ms else now, last_at=now)
            out = self._apply(key, value, req, st, partition=partition, offset=offset, timestamp_ms=timestamp_ms)
            return out if admitted.rate is None else replace(out, rate=admitted.rate)
        return self._apply(key, value, req, st, partition=partition, offset=offset, timestamp_ms=timestamp_ms)

    def _apply(self, key: bytes | None, value: bytes, req: Request, st: OpenRequest, *, partition: int, offset: int,
               timestamp_ms: int | None) -> Outcome:
        """A piece applied to its open request ``st`` (new or from the table)."""
        from streams.stage.core import Outcome

        rid, s, now = req.request_id, self.s, self.clock()
        assert req.seq is not None
        if req.seq < st.next_seq or req.seq in st.ahead:
            return Outcome("duplicate", request_id=rid, code="piece_repeated")
        st.changes += 1
        st.last_at = now
        records: list[Any] = []
        try:
            if st.changes > s.max_stream_pieces:
                raise _Closed("too_many_pieces", f"more than {s.max_stream_pieces} pieces (TTS_MAX_STREAM_PIECES); "
                                                 "send larger pieces")
            if req.seq > st.next_seq:
                if len(st.ahead) >= s.max_pieces_ahead:
                    raise _Closed("piece_gap", f"piece {st.next_seq} is missing while {len(st.ahead)} later ones "
                                               f"wait (TTS_MAX_PIECES_AHEAD); pieces are numbered from 0")
                st.ahead[req.seq] = Held(req.text, req.final, req.flush)
                return Outcome("piece", request_id=rid, open=(rid, encode_open(st)))
            cur: Held | None = Held(req.text, req.final, req.flush)
            while cur is not None:
                if st.next_seq == 0:
                    self._settings(st, req)
                st.next_seq += 1
                st.held += cur.text
                st.chars += len(cur.text)
                if st.chars > self.core.stage.max_text_chars:
                    raise _Closed("text_too_long", f"the pieces hold more than {s.max_text_chars} characters "
                                                   "(TTS_MAX_TEXT_CHARS)")
                if cur.final:
                    records += self._close(st, rid, key, now)
                    return Outcome("closed", tuple(records), request_id=rid, remember=rid, open=(rid, None))
                records += self._cut(st, rid, key, "all" if cur.flush else None, now, cur.text)
                cur = st.ahead.pop(st.next_seq, None)
        except _Closed as e:
            return self._reject(key, value, rid, e.code, e.message, partition, offset, timestamp_ms, before=records)
        return Outcome("piece", tuple(records), request_id=rid, open=(rid, encode_open(st)))

    def tick(self, key: bytes | None, value: bytes, *, partition: int, offset: int, timestamp_ms: int | None,
             opened: OpenView) -> Outcome:
        """One of the stage's timer records: an idle cut or a timeout, if nothing changed since it was decided."""
        from streams.stage.core import Outcome

        try:
            t = json.loads(value)
            rid, kind, changes = str(t["request_id"]), str(t["tick"]), int(t["changes"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return Outcome("duplicate", code="tick_unreadable")
        st = opened.get(rid)
        if st is None or st.changes != changes:
            return Outcome("duplicate", request_id=rid, code="tick_stale")
        now = self.clock()
        if kind == "timeout":
            return self._reject(key, value, rid, "stream_timeout", (
                f"no piece for {self.s.stream_timeout_s:g} s (TTS_STREAM_TIMEOUT_S) after piece {st.next_seq - 1} "
                f"and before a final one; the {len(st.hashes)} segments cut before were spoken"),
                partition, offset, timestamp_ms, user_id=st.user_id)
        try:
            records = self._cut(st, rid, key, "idle", now)
        except _Closed as e:
            return self._reject(key, value, rid, e.code, e.message, partition, offset, timestamp_ms,
                                user_id=st.user_id)
        return Outcome("piece", tuple(records), request_id=rid, open=(rid, encode_open(st)))

    # -- the request's text --------------------------------------------------------------
    def _settings(self, st: OpenRequest, req: Request) -> None:
        """Piece 0's settings, checked like a whole request's (its text is checked as it is cut)."""
        if req.text_type == "ssml":
            raise _Closed("invalid_field", "text_type: a request sent in pieces is plain text (SSML needs the whole "
                                           "document: send it as one request)")
        if req.voices:
            raise _Closed("invalid_field", "voices: a request sent in pieces is spoken by one voice (a voice map "
                                           "needs the whole text: send it as one request)")
        try:
            asked = self.core._mix(req.voice)
            probe = msgspec.structs.replace(req, voice=None if engine_mix.is_mix(req.voice) else req.voice, text="x")
            check_content(probe, max_text_chars=self.s.max_text_chars, voices=self.core.voices)
        except SchemaError as e:
            raise _Closed(e.code, e.message) from None
        st.voice_asked, st.format, st.speed, st.sample_rate = asked, req.format, req.speed, req.sample_rate
        st.stream, st.priority, st.created_at = req.stream, req.priority, req.created_at
        st.timestamps = req.timestamps

    def _cut(self, st: OpenRequest, rid: str, key: bytes | None, force: Literal["idle", "all"] | None,
             now: float, last: str = "") -> list[Any]:
        """What is complete in the held text now (``last``: the piece just added, if one was)."""
        budget = budget_for(st.held.lstrip(), self.s.first_budgets) if st.stream and not st.hashes else None
        if force is None and last.isascii() and last.isalnum() and len(st.held) <= (budget or self.s.max_segment_chars):
            return []  # letters or digits added within the limit: nothing can have completed (a fast path)
        texts, sources = self._take(st, budget, force)
        return self._emit(st, rid, key, texts, sources, final=False, now=now)

    def _close(self, st: OpenRequest, rid: str, key: bytes | None, now: float) -> list[Any]:
        budget = budget_for(st.held.lstrip(), self.s.first_budgets) if st.stream and not st.hashes else None
        texts, sources = self._take(st, budget, "all")
        keep = [i for i, t in enumerate(texts) if speakable(t)]
        return self._emit(st, rid, key, [texts[i] for i in keep], [sources[i] for i in keep], final=True, now=now)

    def _take(self, st: OpenRequest, budget: int | None,
              force: Literal["idle", "all"] | None) -> tuple[list[str], list[SegmentSource | None]]:
        """Cut what is complete from the held text (kept as sent, so each segment knows where in the
        pieces' text it came from: a word's offsets point there, as for a whole request)."""
        raw = st.held
        folded = _fold(raw)
        texts, rest = cut_open(folded, max_chars=self.s.max_segment_chars, budget=budget, force=force)
        if not texts:
            if force == "all" and not speakable(raw):  # nothing to speak is left: past it
                st.held, st.raw_at = "", st.raw_at + len(raw) if st.raw_at >= 0 else -1
            return texts, []
        try:
            found = segment_sources(raw, folded, texts) if st.raw_at >= 0 else None
        except ValueError:  # a segment joined from two (a lone mark and its neighbour): not a slice
            found = None
        if found is None:
            st.held, st.raw_at = rest, -1
            return texts, [None] * len(texts)
        srcs = [SegmentSource(start=a, map=m or None) for a, m in found]
        end = srcs[-1].offset(len(texts[-1]) - 1) + 1  # in ``raw``, after the last segment
        out: list[SegmentSource | None] = [SegmentSource(start=st.raw_at + x.start, map=x.map) for x in srcs]
        st.held, st.raw_at = raw[end:], st.raw_at + end
        return texts, out

    def _emit(self, st: OpenRequest, rid: str, user_key: bytes | None, texts: list[str],
              sources: list[SegmentSource | None], *, final: bool, now: float) -> list[Any]:
        from streams.stage.core import Record

        spoken: list[tuple[str, SegmentSource | None]] = []
        for text, src in zip(texts, sources or [None] * len(texts), strict=True):
            try:
                voice, said = self.core._speakable(rid, st.voice or st.voice_asked, normalize(text))
            except ContentError as e:
                raise _Closed(e.code, e.message) from None
            if not said.strip():
                continue
            if not st.voice:
                st.voice, st.model = voice, self.core.model_for(voice)
            spoken.append((said, src if said == text else None))  # foreign words dropped: offsets unknown
        if final and not spoken and not st.hashes:
            raise _Closed("empty_text", "the pieces hold no text to speak")
        kafka, eng = self.core.kafka, self.core.engine
        key = user_key or st.user_id.encode()  # the pieces' key: their partition number
        enqueued = datetime.fromtimestamp(now, UTC)
        out: list[Any] = []
        for text, src in spoken:
            more = True  # even the last: an End record closes the request (below)
            h = segment_hash(text, voice=st.voice, model=st.model, model_version=eng.model_version, speed=st.speed,
                             sample_rate=st.sample_rate, format=st.format)
            st.hashes.append(h)
            st.sources.append(src)
            seq = len(st.hashes) - 1
            out.append(Record(kafka.topic_segments, key, encode(Segment(
                request_id=rid, user_id=st.user_id, seq=seq, total=seq + 2 if more else seq + 1, text=text, hash=h,
                request_hash=request_hash(st.hashes, format=st.format), voice=st.voice, format=st.format,
                speed=st.speed, sample_rate=st.sample_rate, model=st.model, model_version=eng.model_version,
                created_at=st.created_at, enqueued_at=enqueued, parts=None if more else list(st.hashes),
                stream=st.stream, priority=st.priority, more=more, timestamps=st.timestamps,
                source=src if st.timestamps else None)), partition=None))  # type: ignore[arg-type]
        # The request ends with an End record, never with a last segment: a last segment is done only with
        # its completion (after the join), so its chunk would wait for the join; a segment with ``more`` is
        # done, and chunked, as soon as it is made (the tail sentence is heard ~1 s sooner)
        if final:
            out.append(Record(kafka.topic_segments, key, encode(End(
                request_id=rid, user_id=st.user_id, total=len(st.hashes), parts=list(st.hashes),
                request_hash=request_hash(st.hashes, format=st.format), voice=st.voice, format=st.format,
                speed=st.speed, sample_rate=st.sample_rate, model=st.model, model_version=eng.model_version,
                created_at=st.created_at, enqueued_at=enqueued, stream=st.stream, priority=st.priority,
                timestamps=st.timestamps,
                sources=[x for x in st.sources if x is not None] if st.timestamps and all(
                    x is not None for x in st.sources) else None)), partition=None))  # type: ignore[arg-type]
        return out

    def _reject(self, key: bytes | None, value: bytes, rid: str, code: str, message: str, partition: int,
                offset: int, timestamp_ms: int | None, *, before: Iterable[Any] = (),
                user_id: str | None = None, remember: bool = True) -> Outcome:
        """The request fails with ``code`` (a rejection after what was sent ``before``); it is closed.

        ``remember=False`` (refused at the bounds, nothing open): the id is not recorded, so the agent
        need not wait for the rejection's delivery (a user opening 10,000 streams would otherwise hold
        the stage for 10,000 round trips); a later piece of it is refused again, and the worker's done
        log drops the repeated rejection."""
        from streams.stage.core import Outcome

        raw = json.dumps({"user_id": user_id}).encode() if user_id is not None else value
        failed = self.core._failed(key, raw, rid, code, message, self.clock(), partition=partition, offset=offset,
                                   timestamp_ms=timestamp_ms)
        if not remember:
            return Outcome("failed", (*before, *failed.records), request_id=rid, code=code)
        return Outcome("failed", (*before, *failed.records), request_id=rid, code=code, remember=rid,
                       open=(rid, None))


def _fold(text: str) -> str:
    """Normalized, keeping one space at either end where there was whitespace (it separates pieces)."""
    if not text:
        return text
    body = normalize(text)
    if not body:
        return " " if text[:1].isspace() or text[-1:].isspace() else ""
    return (" " if text[:1].isspace() else "") + body + (" " if text[-1:].isspace() else "")
