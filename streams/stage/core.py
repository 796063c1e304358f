"""What one request record turns into: validate, normalize, split, hash (steps 1-2 of :mod:`streams.stage`).

Pure: no Kafka, no faust, no clock of its own (``clock`` returns epoch seconds). An
unexpected error in this code is answered like bad content and counted, never raised to
the agent, so one bad record never stops a partition.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

import msgspec

from engine import lexicon as engine_lexicon
from engine import mix as engine_mix
from engine import spoken as engine_spoken
from engine import ssml as engine_ssml
from engine import voices as engine_voices
from engine.timing import segment_sources
from engine.voices import VoiceInfo
from schemas import (
    DeadLetter,
    ErrorInfo,
    Rejection,
    Request,
    SchemaError,
    Segment,
    SegmentSource,
    Span,
    check_content,
    decode_request,
    encode,
    peek_request_id,
    request_hash,
    segment_hash,
    spans_key,
)
from schemas.errors import ContentError
from streams.settings import EngineSettings, KafkaSettings, StageSettings
from streams.stage import voicemap
from streams.stage.admission import Admission, Bucket, encode_bucket
from streams.stage.cut import budget_for, shorten_first
from streams.stage.lexicons import LexiconStore
from streams.stage.pieces import OpenView, PieceHandler
from streams.stage.spans import Piece, cut_spans
from streams.stage.text import normalize, split_segments

__all__ = ["DEAD_LETTER_ID_HEADER", "Outcome", "RateView", "Record", "SeenIds", "StageCore", "backend_voices",
           "served_voices"]

_log = logging.getLogger("ttsflow.stage")

Kind = Literal["segments", "failed", "dead_letter", "duplicate", "piece", "closed"]
DEAD_LETTER_ID_HEADER = "ttsflow-dead-letter-id"
DLQ_VALUE_KEEP = 256 * 1024  # raw bytes of a dead letter kept whole up to this; a prefix beyond
DLQ_KEY_KEEP = 16 * 1024


# --- voices without loading a model ---------------------------------------------------

def backend_voices(backend: str) -> tuple[str, ...] | None:
    """The voices a backend offers, known without loading its model (None: not checked here).
    The data is the engine's voice registry (:mod:`engine.voices`)."""
    return engine_voices.backend_voices(backend)


def served_voices(engine: EngineSettings) -> tuple[str, ...] | None:
    """The voices of every backend the workers serve (``TTS_BACKENDS``), the default backend's first;
    None if none of them is known to the voice registry (nothing checked here)."""
    out: list[str] = []
    for b in engine.served_backends:
        out += engine_voices.backend_voices(b) or ()
    return tuple(dict.fromkeys(out)) or None


# --- the pure per-record logic ------------------------------------------------------

class SeenIds(Protocol):
    """One record key's seen request ids: ``get(request_id)`` is when it was first seen
    (epoch seconds) or None (a dict works; the stage passes a view of its table)."""

    def get(self, request_id: str, /) -> float | None: ...


class RateView(Protocol):
    """The record key's admission bucket in the record's partition (None: none yet, a full one), and
    whether the record follows every record before it in its partition (False after a hole the stage
    could not fill by re-reading: :meth:`~streams.stage.admission.Admission.decide`)."""

    in_order: bool

    def get(self) -> Bucket | None: ...


@dataclass(frozen=True, slots=True)
class Record:
    """One record to produce."""

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None = None  # None: by the key (murmur2)
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one input record turns into. ``remember`` is the id to record as seen."""

    kind: Kind
    records: tuple[Record, ...] = ()
    request_id: str | None = None
    code: str | None = None
    remember: str | None = None
    # a request sent in pieces (streams/stage/pieces.py): (request id, its new open state; None: closed)
    open: tuple[str, bytes | None] | None = None
    # the record key's new admission bucket (streams/stage/admission.py), encoded; None: unchanged
    rate: bytes | None = None


def _peek_user_id(raw: bytes | None) -> str | None:
    if not raw:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    uid = obj.get("user_id") if isinstance(obj, dict) else None
    return uid if isinstance(uid, str) and 1 <= len(uid) <= 256 else None


def _is_json_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


class StageCore:
    """Validation, normalization, splitting and hashing of one record; no Kafka, no clock
    of its own (``clock`` returns epoch seconds)."""

    def __init__(self, stage: StageSettings, kafka: KafkaSettings, engine: EngineSettings, *,
                 voices: tuple[str, ...] | None = None, clock: Callable[[], float] = time.time,
                 on_dropped: Callable[[str, int], None] | None = None, lexicons: LexiconStore | None = None) -> None:
        self.stage, self.kafka, self.engine = stage, kafka, engine  # limits and dedup; topics; model identity
        self.lexicons = lexicons if lexicons is not None else LexiconStore()  # the stage's materialized view
        self.voices = voices
        self.default_voice = engine.voice or (voices[0] if voices else engine.backend)
        self.clock = clock
        # the voices this stage routes to whose languages are known (engine.voices)
        self.served: tuple[VoiceInfo, ...] = tuple(
            i for i in (engine_voices.voice_info(v) for v in voices or ()) if i is not None)
        self.on_dropped = on_dropped  # (script, spoken units cut from an accepted request)
        self.pieces = PieceHandler(self, clock)
        self.admission = Admission(stage.user_requests_per_s, stage.user_request_burst)
        self._ssml_limits = engine_ssml.Limits(max_chars=stage.ssml_max_chars, max_depth=stage.ssml_max_depth,
                                               max_elements=stage.ssml_max_elements)

    def is_duplicate(self, request_id: str, seen: SeenIds, now: float) -> bool:
        """``seen`` maps the user's request ids to when they were first seen (epoch seconds)."""
        t = seen.get(request_id)
        return t is not None and now - t < self.stage.dedup_window_s

    def handle(self, key: bytes | None, value: bytes | None, *, partition: int, offset: int,
               timestamp_ms: int | None, seen: SeenIds, opened: OpenView | None = None, tick: bool = False,
               rate: RateView | None = None) -> Outcome:
        """Everything the stage does with one record, as data. Never raises. ``opened``: the record
        key's open requests sent in pieces (None: pieces are refused); ``tick``: one of the stage's own
        timer records (:mod:`streams.stage.pieces`); ``rate``: the record key's admission bucket (None:
        every request admitted)."""
        now = self.clock()
        rid = peek_request_id(value)
        try:
            if tick and opened is not None and value is not None:
                return self.pieces.tick(key, value, partition=partition, offset=offset, timestamp_ms=timestamp_ms,
                                        opened=opened)
            if rid is None:
                return self._dead_letter(key, value, partition, offset, timestamp_ms)
            if self.is_duplicate(rid, seen, now):  # (a piece after its request closed: counted, not logged)
                return Outcome("duplicate", request_id=rid, code="piece_repeated" if value and b'"seq"' in value
                               else None)
            assert value is not None
            return self._request(key, value, rid, now, timestamp_ms, partition, offset, opened, rate)
        except Exception as e:  # a bug must not stop the partition: answer it visibly
            _log.error("event=stage_error request_id=%s partition=%d offset=%d error=%r\n%s", rid, partition,
                       offset, e, traceback.format_exc())
            if rid is None:
                return self._dead_letter(key, value, partition, offset, timestamp_ms,
                                         reason="stage_error", message=repr(e))
            return self._failed(key, value, rid, "internal_error", f"stage error: {e!r}", now, partition=partition,
                                offset=offset, timestamp_ms=timestamp_ms)

    def _dead_letter(self, key: bytes | None, value: bytes | None, partition: int, offset: int,
                     timestamp_ms: int | None, *, reason: str | None = None, message: str | None = None) -> Outcome:
        if reason is None:
            if not value:
                reason, message = "empty_value", "the record has no value"
            elif not _is_json_object(value):
                reason, message = "invalid_json", "the value is not a UTF-8 JSON object"
            else:
                reason, message = "no_request_id", "request_id is missing or does not match " \
                                                   "^[A-Za-z0-9._:-]{1,128}$"
        dl_id = f"{self.kafka.topic_requests}:{partition}:{offset}"
        raw = value or b""
        # a hostile record near the broker's size limit must not make a dead letter over it
        # (base64 grows it by a third): that send would fail on every restart, a poison pill
        truncated = len(raw) > DLQ_VALUE_KEEP or (key is not None and len(key) > DLQ_KEY_KEEP)
        dl = DeadLetter(id=dl_id, reason=reason, message=message or reason, source_topic=self.kafka.topic_requests,
                        source_partition=partition, source_offset=offset,
                        key_b64=_b64(None if key is None else key[:DLQ_KEY_KEEP]),
                        value_b64=_b64(raw[:DLQ_VALUE_KEEP]) or "", timestamp_ms=timestamp_ms,
                        value_bytes=len(raw), value_sha256=hashlib.sha256(raw).hexdigest(), truncated=truncated)
        return Outcome("dead_letter", (Record(self.kafka.topic_dlq, key, encode(dl),
                                              headers=((DEAD_LETTER_ID_HEADER, dl_id.encode()),)),), code=reason)

    def admit(self, key: bytes | None, value: bytes, rid: str, rate: RateView | None, *, partition: int, offset: int,
              timestamp_ms: int | None) -> Outcome:
        """Admission of a new request (:mod:`streams.stage.admission`): an Outcome of kind ``segments``
        and no records when admitted (its ``rate`` the bucket to write), else the ``rate_limited``
        rejection. The id is not recorded as seen (no dedup write: a flood costs no table entry per
        request); the bucket's offset makes a re-read refuse it again."""
        if rate is None or not self.admission.enabled:
            return Outcome("segments")
        v = self.admission.decide(rate.get(), timestamp_ms=timestamp_ms, partition=partition, offset=offset,
                                  in_order=rate.in_order)
        new = encode_bucket(v.bucket) if v.bucket is not None else None
        if v.admitted:
            return Outcome("segments", rate=new)
        s = self.stage
        message = (f"this user (record key) started requests faster than {s.user_requests_per_s:g} a second beyond a "
                   f"burst of {s.user_request_burst} (TTS_USER_REQUESTS_PER_S, TTS_USER_REQUEST_BURST); a token is "
                   f"back in {v.retry_after_s:.1f} s: retry then under a new request_id (this one is answered)")
        failed = self._failed(key, value, rid, "rate_limited", message, self.clock(), partition=partition,
                              offset=offset, timestamp_ms=timestamp_ms)
        return Outcome("failed", failed.records, request_id=rid, code="rate_limited", rate=new)

    def _failed(self, key: bytes | None, value: bytes | None, rid: str, code: str, message: str, now: float,
                *, partition: int, offset: int, timestamp_ms: int | None = None) -> Outcome:
        """A rejection on the segments topic, in the request's partition number (by its key, or
        explicitly when it has none); a worker answers it in its transaction."""
        uid = _peek_user_id(value)
        enqueued = datetime.fromtimestamp((timestamp_ms / 1000.0) if timestamp_ms else now, UTC)
        r = Rejection(request_id=rid, user_id=uid or (key or b"")[:256].decode("utf-8", "replace") or "unknown",
                      error=ErrorInfo(code=code, message=message), source_partition=partition,
                      source_offset=offset, enqueued_at=enqueued)
        out_key = key if key else (uid.encode() if uid is not None else None)
        rec = Record(self.kafka.topic_segments, out_key, encode(r), partition=None if out_key else partition)
        return Outcome("failed", (rec,), request_id=rid, code=code, remember=rid)

    def _mix(self, voice: str | None) -> str | None:
        """A voice mix (``"zf_xiaobei(2)+zm_yunjian(1)"``, :mod:`engine.mix`) in its one spelling,
        checked against the served voices; a plain name is returned as it is (checked later).
        Raises ``ContentError`` ``unknown_voice`` naming the bad part."""
        if not engine_mix.is_mix(voice):
            return voice
        assert voice is not None
        try:
            return engine_voices.mix_info(voice, served=self.voices).voice
        except engine_mix.MixError as e:
            raise ContentError(str(e), field="voice", code="unknown_voice") from e

    def _speakable(self, rid: str, requested: str | None, text: str) -> tuple[str, str]:
        """The voice that speaks ``text`` and what it will say (:func:`engine.voices.choose`).

        Raises ``ContentError`` ``unsupported_language`` when the text is mostly in scripts
        the voice cannot speak; a few foreign words are cut and counted. A voice whose
        languages are not registered is not checked."""
        voice = requested or self.default_voice
        if engine_voices.voice_info(voice) is None or not self.served:
            return voice, text
        j = engine_voices.choose(text, requested, self.default_voice, self.served)
        if not j.speakable:
            raise ContentError(_unsupported_message(j), field="text", code="unsupported_language")
        if j.dropped:
            if self.on_dropped is not None:
                for script, n in j.dropped.items():
                    self.on_dropped(script, n)
            _log.info("event=foreign_dropped request_id=%s voice=%s dropped=%s", rid, j.voice.voice,
                      ",".join(f"{sc}:{n}" for sc, n in sorted(j.dropped.items())))
        return j.voice.voice, j.text

    def _ssml(self, req: Request, requested: str | None,
              rewrite: Callable[..., list[Span]] | None) -> tuple[str, list[Piece], engine_spoken.Spoken | None]:
        """An SSML request's voice and segments: parsed in the voice's language (again in the chosen
        voice's, when the text picks another voice), lexicons applied to its plain runs (``rewrite``),
        checked like plain text; and, for a timed request, where what is read was written.
        Raises ``SchemaError`` (``invalid_ssml`` and the plain checks)."""
        stage = self.stage
        limits = self._ssml_limits
        lang = _language(requested or self.default_voice)

        def parse(lang: str) -> tuple[list[Span], engine_spoken.Spoken | None]:
            if req.timestamps:
                return engine_ssml.parse_traced(req.text, lang=lang, limits=limits, rewrite=rewrite)
            return engine_ssml.parse(req.text, lang=lang, limits=limits, rewrite=rewrite), None

        spans, spoken = parse(lang)
        pieces = cut_spans(spans, stage.max_segment_chars)
        text = " ".join(p.text for p in pieces)
        check_content(msgspec.structs.replace(req, voice=None) if engine_mix.is_mix(req.voice) else req,
                      max_text_chars=stage.max_text_chars, voices=self.voices, text=text)
        voice, _ = self._speakable(req.request_id, requested, text)  # foreign words are read, not cut, in SSML
        if _language(voice) != lang:
            spans, spoken = parse(_language(voice))
            pieces = cut_spans(spans, stage.max_segment_chars)
        return voice, pieces, spoken

    def _pieces(self, text: str, stream: bool, rewrite: Callable[..., list[Span]] | None,
                first: bool = True, hits: list[tuple[int, int, str]] | None = None) -> list[Piece]:
        """Plain text's segments: cut at sentences (and the matched words of lexicons, ``rewrite``,
        made spans; ``hits`` collects what they matched); a streaming request's ``first`` segment
        short (streams/stage/cut.py)."""
        stage = self.stage
        if rewrite is not None:  # plain text with lexicons: the matched words become spans (alias text, phonemes)
            spans = rewrite(Span(text=text)) if hits is None else rewrite(Span(text=text), hits=hits)
            return cut_spans(spans, stage.max_segment_chars)
        cuts = split_segments(text, stage.max_segment_chars)
        budget = budget_for(text, stage.first_budgets) if stream and first else None
        if budget is not None:  # fast first audio: a short first segment
            cuts = shorten_first(cuts, budget)
        return [Piece(p, None) for p in cuts]

    def _mapped(self, req: Request, requested: str | None, text: str, rewrite: Callable[[Span], list[Span]] | None
                ) -> tuple[str, list[Piece], list[tuple[str, str | None]]]:
        """A request with a per-language voice map (:mod:`streams.stage.voicemap`): its text cut into
        language runs, each spoken by the map's voice for its language, else by the request's (or the
        one chosen for the run, as for a whole request), each run checked like a request of its own.
        Returns the text spoken, the segments and each one's (voice, lang)."""
        vmap = voicemap.check(req.voices or {}, served=self.voices)
        base = requested or self.default_voice
        chosen: list[voicemap.Run] = []
        for run in voicemap.runs(text, vmap, voicemap.primary_for(_language(base))):
            voice, said = self._speakable(req.request_id, run.voice or requested, run.text)
            if said.strip():
                chosen.append(voicemap.Run(said, run.lang, voice))
        if not chosen:
            raise ContentError("text is empty after normalization", field="text", code="empty_text")
        pieces: list[Piece] = []
        voiced: list[tuple[str, str | None]] = []
        for i, run in enumerate(voicemap.join(chosen)):
            assert run.voice is not None
            cut = self._pieces(run.text.strip(), req.stream, rewrite, first=i == 0)
            pieces += cut
            voiced += [(run.voice, run.lang)] * len(cut)
        return "".join(r.text for r in chosen), pieces, voiced

    def model_for(self, voice: str) -> str:
        """The backend that speaks ``voice`` (several backends: the voice's own names the model)."""
        info = engine_voices.voice_info(voice)
        return info.backend if info is not None and info.backend in self.engine.served_backends else self.engine.backend

    def _request(self, key: bytes | None, value: bytes, rid: str, now: float,
                 timestamp_ms: int | None, partition: int, offset: int, opened: OpenView | None = None,
                 rate: RateView | None = None) -> Outcome:
        if opened is not None:
            try:
                piece = decode_request(value)
            except SchemaError:
                piece = None
            if piece is not None and piece.is_piece:
                return self.pieces.piece(key, value, piece, partition=partition, offset=offset,
                                         timestamp_ms=timestamp_ms, opened=opened, rate=rate)
            if opened.get(rid) is not None:  # a whole request under the id of one open in pieces
                return Outcome("duplicate", request_id=rid, code="open_in_pieces")
        admitted = self.admit(key, value, rid, rate, partition=partition, offset=offset, timestamp_ms=timestamp_ms)
        if admitted.kind == "failed":
            return admitted
        out = self._whole(key, value, rid, now, timestamp_ms, partition, offset)
        return out if admitted.rate is None else replace(out, rate=admitted.rate)

    def _whole(self, key: bytes | None, value: bytes, rid: str, now: float, timestamp_ms: int | None, partition: int,
               offset: int) -> Outcome:
        stage, engine = self.stage, self.engine
        try:
            req = decode_request(value)
            requested = self._mix(req.voice)
            lexicons = self.lexicons.resolve(req.user_id, req.lexicons)
            used: set[str] = set()
            applier = engine_lexicon.Applier(lexicons)

            def rewrite(span: Span, hits: list[tuple[int, int, str]] | None = None) -> list[Span]:
                return applier(span, used, hits)

            voiced: list[tuple[str, str | None]] | None = None  # per piece: (voice, lang) of a voice map
            spoken: engine_spoken.Spoken | None = None  # a timed request's text as read, where rewritten
            ssml = req.reads_ssml
            if req.voices and ssml:
                raise ContentError("voices: an SSML request picks languages with xml:lang and takes no voice map",
                                   field="voices", code="invalid_field")
            if ssml:
                voice, pieces, spoken = self._ssml(req, requested, rewrite if lexicons else None)
            else:
                text = normalize(req.text)
                check_content(msgspec.structs.replace(req, voice=None) if engine_mix.is_mix(req.voice) else req,
                              max_text_chars=stage.max_text_chars, voices=self.voices, text=text)
                cut = rewrite if lexicons else None
                if req.voices:
                    text, pieces, voiced = self._mapped(req, requested, text, cut)
                    voice = voiced[0][0]
                else:
                    voice, text = self._speakable(rid, requested, text)
                    hits: list[tuple[int, int, str]] | None = [] if req.timestamps and cut is not None else None
                    pieces = self._pieces(text, req.stream, cut, hits=hits)
                    if hits:
                        spoken = engine_spoken.rewritten(req.text, text, hits)
        except SchemaError as e:
            return self._failed(key, value, rid, e.code, e.message, now, partition=partition, offset=offset,
                                timestamp_ms=timestamp_ms)
        voiced = voiced or [(voice, None)] * len(pieces)
        models = {v: self.model_for(v) for v, _ in voiced}
        # what else decides the sound: the spans, the versions of the lexicons that matched, and the
        # language a voice map's run is read in
        lex_key = "lex:" + ",".join(sorted(used)) if used else ""
        hashes = [segment_hash(p.text, voice=v, model=models[v], model_version=engine.model_version, speed=req.speed,
                               sample_rate=req.sample_rate, format=req.format,
                               pronunciation=spans_key(p.spans) + lex_key + (f"lang:{lang}" if lang else ""))
                  for p, (v, lang) in zip(pieces, voiced, strict=True)]
        named = [lex.ref for lex in lexicons] or None
        marked = [i for i, p in enumerate(pieces) if p.spans and any(s.mark is not None for s in p.spans)] or None
        rh = request_hash(hashes, format=req.format)
        enqueued = datetime.fromtimestamp((timestamp_ms / 1000.0) if timestamp_ms else now, UTC)
        out_key = key if key else req.user_id.encode()
        n = len(pieces)
        # timestamps: each segment says where it came from in the text as sent (a word's offsets point
        # there; a stretch read otherwise than written, its groups), and the last one where all of them did
        sources: list[SegmentSource | None] = [None] * n
        if req.timestamps:
            try:
                if spoken is not None:  # SSML, or text a lexicon rewrote (engine.spoken)
                    sources = [SegmentSource(start=m.start, map=m.map or None, groups=m.groups or None)
                               for m in engine_spoken.segment_sources(spoken, [p.text for p in pieces], len(req.text))]
                elif not ssml:
                    sources = [SegmentSource(start=a, map=m or None)
                               for a, m in segment_sources(req.text, text, [p.text for p in pieces])]
            except ValueError:  # a segment that is not a piece of the text (a voice map's lexicon alias)
                sources = [None] * n
        records = tuple(
            Record(self.kafka.topic_segments, out_key, encode(Segment(
                request_id=rid, user_id=req.user_id, seq=i, total=n, text=p.text, hash=h, request_hash=rh,
                voice=v, format=req.format, speed=req.speed, sample_rate=req.sample_rate, model=models[v],
                model_version=engine.model_version, created_at=req.created_at, enqueued_at=enqueued,
                parts=hashes if i == n - 1 else None, stream=req.stream, priority=req.priority,
                spans=_wire(p.spans), lexicons=named if i == n - 1 else None,
                marked=marked if i == n - 1 else None,
                timestamps=req.timestamps, source=sources[i], lang=lang,
                sources=sources if req.timestamps and i == n - 1 else None)))  # type: ignore[arg-type]
            for i, (p, h, (v, lang)) in enumerate(zip(pieces, hashes, voiced, strict=True)))
        return Outcome("segments", records, request_id=rid, remember=rid)


def _wire(spans: tuple[Span, ...] | None) -> list[Span] | None:
    return None if spans is None else list(spans)


def _language(voice: str) -> str:
    """The primary language of a voice (of a mix: its first part's), ``en`` when unknown."""
    name = engine_mix.parse(voice)[0][0] if engine_mix.is_mix(voice) else voice
    info = engine_voices.voice_info(name)
    return info.languages[0].split("-")[0].lower() if info is not None else "en"


def _unsupported_message(j: engine_voices.Judgement) -> str:
    """``unsupported_language``: the script, the voice's own, and the installed voices that speak it."""
    script = j.foreign or "?"
    what = "emoji" if script == engine_voices.EMOJI else f"{script} script"
    v = j.voice
    head = (f"text is mostly {what} ({j.foreign_share:.0%} of its words); voice {v.voice!r} speaks "
            f"{', '.join(v.scripts)} ({', '.join(v.languages)})")
    if script == engine_voices.EMOJI:
        return head + "; no voice reads text made only of emoji"
    others = engine_voices.speakers(script)
    if not others:
        return head + f"; no installed voice speaks {script}"
    return head + f"; installed voices that speak {script}: " + ", ".join(
        f"{o.voice} (backend {o.backend}, {', '.join(o.languages)})" for o in others)
