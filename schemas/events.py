"""Event types of ttsflow's topics, version 1, and their encode/decode.

=====================  ==========  ===========================================
topic                  key         value
=====================  ==========  ===========================================
``tts.requests``       user id     :class:`Request`
``tts.segments``       user id     :class:`Segment` (one per segment) or :class:`Rejection`
``tts.completed``      user id     :class:`Completion` (``ok`` or ``failed``)
``tts.chunks``         user id     :class:`Chunk` (one per segment of a streaming request)
``tts.requests.dlq``   raw key     :class:`DeadLetter`
=====================  ==========  ===========================================

Events are frozen msgspec Structs encoded as JSON. Decoding never raises anything
but :class:`~schemas.errors.SchemaError`, whose ``field`` names what is wrong, so one
hostile message can be answered precisely and never stops a partition. Unknown
fields are ignored (forward compatibility within v1). The JSON Schema files beside
this module are generated from these types (``python -m schemas.jsonschema``) and a
unit test keeps them in step.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from schemas.errors import ContentError, InvalidField, InvalidJSON, SchemaError

__all__ = [
    "FORMATS",
    "LANGUAGE_PATTERN",
    "LEXICON_NAME_PATTERN",
    "PRIORITIES",
    "REQUEST_ID_PATTERN",
    "AudioRef",
    "Chunk",
    "Completion",
    "DeadLetter",
    "End",
    "ErrorInfo",
    "LexiconRecord",
    "MarkTime",
    "ModelInfo",
    "ObjectRef",
    "Rejection",
    "Request",
    "Segment",
    "SegmentSource",
    "Span",
    "Timings",
    "WordSpan",
    "WordTimings",
    "check_content",
    "decode_chunk",
    "decode_completion",
    "decode_dead_letter",
    "decode_lexicon",
    "decode_request",
    "decode_segment",
    "decode_segment_event",
    "decode_word_timings",
    "encode",
    "peek_request_id",
    "reads_as_ssml",
    "request_hash",
    "segment_hash",
    "spans_key",
]

REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
LEXICON_NAME_PATTERN = r"^(?:global/)?[A-Za-z0-9._-]{1,64}$"
FORMATS: tuple[str, ...] = ("wav", "flac", "ogg")
PRIORITIES: tuple[str, ...] = ("interactive", "bulk")
_REQUEST_ID_RE = re.compile(REQUEST_ID_PATTERN)

RequestId = Annotated[str, msgspec.Meta(pattern=REQUEST_ID_PATTERN, description="1-128 chars of [A-Za-z0-9._:-]")]
UserId = Annotated[str, msgspec.Meta(min_length=1, max_length=256, description="Partition key; 1-256 chars")]
Voice = Annotated[str, msgspec.Meta(min_length=1, max_length=128, description=(
    "A voice name, or a mix of up to 4 voices of one backend that mixes (kokoro), weights > 0 in parentheses: "
    "zf_xiaobei(2)+zm_yunjian(1)"))]
LANGUAGE_PATTERN = r"^[a-z]{2,3}$"
Language = Annotated[str, msgspec.Meta(pattern=LANGUAGE_PATTERN, description=(
    "A language as its ISO 639 code, lower case: zh (Mandarin), ja (Japanese), en (English)"))]
VoiceMap = Annotated[dict[Language, Voice], msgspec.Meta(max_length=8, description=(
    "Which voice speaks each language of a mixed-language request, e.g. "
    '{"ja": "jf_alpha", "en": "heart"}: the stage cuts the text into runs of one language '
    "(zh, ja, en: docs/using/voices.md#per-language-voices) and each run not in the map is spoken "
    "by the request's voice (or the one chosen for it). Each voice must be served and speak its "
    "language; a request with text_type ssml or sent in pieces takes no map"))]
Speed = Annotated[float, msgspec.Meta(ge=0.25, le=4.0, description="Speaking rate multiplier")]
SampleRate = Annotated[int, msgspec.Meta(ge=8000, le=48000)]
Sha256Hex = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
# RFC 3339 wants an offset; a timestamp without one is read as UTC (decode_request) rather than
# refused, since producers that write naive UTC times are common and the meaning is clear.
AwareDatetime = Annotated[datetime, msgspec.Meta(description="RFC 3339 timestamp; no offset means UTC")]
Stream = Annotated[bool, msgspec.Meta(description="Also send each segment's audio as a chunk event on tts.chunks as soon "
                                                  "as it is stored; the completion still follows with the joined audio")]
Timestamps = Annotated[bool, msgspec.Meta(description=(
    "Also time every word: chunks carry their words inline, the completion references a word-timing "
    "JSON object and WebVTT/SRT captions in S3. A voice that predicts no durations (chattts) answers "
    "ok audio without words and says why in words_reason"))]
TextType = Annotated[Literal["text", "ssml"], msgspec.Meta(
    description="ssml: the text is an SSML document (<speak>...</speak>, the subset in docs/using/pronunciation.md); "
                "text: the text is read as it is, tags included. Absent: ssml when the whole text is one <speak> "
                "document (it ends with </speak> and starts with <speak, an XML declaration or a DOCTYPE), else text; "
                "a request sent in pieces is text")]
Priority = Annotated[Literal["interactive", "bulk"], msgspec.Meta(
    description="interactive (default): served first; bulk (audiobooks, backfills): served when interactive work "
                "leaves room, never starved")]


class _Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    pass


class Request(_Event, frozen=True, kw_only=True):
    """What a user publishes to ``tts.requests`` (key: ``user_id``)."""

    request_id: RequestId
    user_id: UserId
    text: str
    voice: Voice | None = None
    voices: VoiceMap | None = None
    format: str = "wav"
    speed: Speed = 1.0
    sample_rate: SampleRate | None = None
    created_at: AwareDatetime | None = None
    stream: Stream = False
    priority: Priority = "interactive"
    timestamps: Timestamps = False
    text_type: TextType | msgspec.UnsetType = msgspec.UNSET  # absent stays absent on the wire (older stages)
    lexicons: Annotated[list[Annotated[str, msgspec.Meta(pattern=LEXICON_NAME_PATTERN)]], msgspec.Meta(
        max_length=5, description=(
            "Pronunciation lexicons to apply, in order (the first that has a word wins): the user's own by name, "
            "global ones as global/<name>. At most 5"))] | None = None
    seq: Annotated[int, msgspec.Meta(ge=0, description=(
        "Delta number of a request sent in pieces while its text is still being written (0, 1, 2, ...; "
        "every piece has the same request_id and key). Absent: the whole request in one record. The piece "
        "numbered 0 carries the settings (voice, format, speed, sample_rate, stream, priority); theirs on "
        "later pieces are ignored. See docs/using/streaming-input.md"))] | None = None
    final: Annotated[bool, msgspec.Meta(description=(
        "On a piece (seq set): the last one; the request is answered once everything up to it is spoken"))] = False
    flush: Annotated[bool, msgspec.Meta(description=(
        "On a piece (seq set): speak the text held so far now, even mid-sentence"))] = False
    schema_version: Literal[1] = 1

    @property
    def is_piece(self) -> bool:
        """A delta of a request whose text arrives in pieces (docs/using/streaming-input.md)."""
        return self.seq is not None

    @property
    def reads_ssml(self) -> bool:
        """Whether ``text`` is read as SSML: ``text_type`` when given, else whether the whole text is one
        ``<speak>`` document (a piece's text is never: SSML needs the whole document)."""
        if self.text_type is msgspec.UNSET and self.is_piece:
            return False
        return reads_as_ssml(None if self.text_type is msgspec.UNSET else self.text_type, self.text)


_SPEAK_END = re.compile(r"</speak\s*>\Z")


def reads_as_ssml(text_type: str | None, text: str) -> bool:
    """The one rule for whether a whole request's text is read as SSML (the stage's and the gateway's):
    ``text_type`` when given, else whether the text is one ``<speak>`` document."""
    return text_type == "ssml" if text_type is not None else is_ssml_document(text)


def is_ssml_document(text: str) -> bool:
    """Whether ``text`` is, as a whole, one ``<speak>`` document: it ends with ``</speak>`` and starts with
    ``<speak``, an XML declaration or a DOCTYPE (whitespace and a byte-order mark around it aside). Whether
    the document is valid SSML is the parser's to say (``invalid_ssml``)."""
    t = text.strip().lstrip("\ufeff").lstrip()
    return t.startswith(("<speak", "<?xml", "<!")) and _SPEAK_END.search(t[-64:]) is not None


class SegmentSource(_Event, frozen=True, kw_only=True):
    """Where a segment's text came from in its request's ``text`` as sent: character ``k`` of the
    segment is character ``start + k`` of the request, except past a breakpoint ``[i, d]`` of
    ``map`` (the last with ``i <= k``), where it is ``start + d + (k - i)``. Normalization that
    changes lengths (``…`` read as ``...``, folded whitespace, removed invisible characters,
    dropped foreign words, SSML markup) makes breakpoints; a segment copied verbatim has none.
    ``groups``: stretches read in place of other words (:mod:`engine.spoken`)."""

    start: NonNegInt
    map: list[tuple[NonNegInt, NonNegInt]] | None = None
    groups: Annotated[list[tuple[NonNegInt, NonNegInt, NonNegInt, NonNegInt, str]], msgspec.Meta(description=(
        "Stretches read otherwise than written (SSML sub, say-as, phoneme; a lexicon's alias or phoneme): "
        "[i, j, start, end, text]: segment characters i..j were read for request characters start..end, "
        "written text; their words are one caption"))] | None = None

    def offset(self, k: int) -> int:
        """The request-text offset of segment character ``k``."""
        if not self.map:  # copied verbatim (most segments): no breakpoint to look for
            return self.start + k
        i, d = 0, 0
        for bi, bd in self.map or ():
            if bi > k:
                break
            i, d = bi, bd
        return self.start + d + (k - i)


class Span(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One run of a segment's resolved pronunciation (from SSML): text to read, or phonemes for
    that text, or a pause, or a mark. A segment's ``text`` is the concatenation of its spans'
    ``text``; its hash covers every span (what is spoken is what is keyed)."""

    text: str = ""
    ph: Annotated[str, msgspec.Meta(max_length=2048, description=(
        "Phonemes that replace the reading of text, in alphabet"))] | None = None
    alphabet: Literal["ipa", "x-pinyin", "x-voice"] | None = None
    rate: Annotated[float, msgspec.Meta(gt=0, le=16, description="Speaking rate multiplier of this run "
                                                                 "(on top of the request's speed)")] | None = None
    lang: Annotated[str, msgspec.Meta(max_length=35, description="BCP 47 language of this run (xml:lang)")] | None = None
    break_ms: Annotated[int, msgspec.Meta(ge=0, le=10_000, description=(
        "A pause of this many milliseconds here (the voice's own edge silences counted in)"))] | None = None
    mark: Annotated[str, msgspec.Meta(max_length=256, description="An SSML mark's name at this place")] | None = None


class Segment(_Event, frozen=True, kw_only=True):
    """One unit of synthesis work on ``tts.segments`` (key: ``user_id``).

    ``hash`` is the segment's cache key (:func:`segment_hash`); the last segment of a
    request (``seq == total - 1``) carries ``parts``, the hashes of all its segments in
    order, so a worker that restarts mid-request can rebuild the whole from S3.

    A request whose text arrives in pieces has segments with ``more`` set while its text is
    still arriving: their ``total`` is ``seq + 2`` (a lower bound, so ``last`` is false) and
    their ``request_hash`` covers the parts so far. It ends with a segment without ``more``
    (``total`` and ``parts`` final), or, when no text was left to speak at the end, with an
    :class:`End` record.
    """

    request_id: RequestId
    user_id: UserId
    seq: NonNegInt
    total: Annotated[int, msgspec.Meta(ge=1)]
    text: Annotated[str, msgspec.Meta(min_length=1)]
    hash: Sha256Hex
    request_hash: Sha256Hex
    voice: Voice
    format: str = "wav"
    speed: Speed = 1.0
    sample_rate: SampleRate | None = None
    model: str = ""
    model_version: str = ""
    created_at: datetime | None = None
    enqueued_at: datetime | None = None
    parts: list[Sha256Hex] | None = None
    stream: bool = False
    priority: Priority = "interactive"
    timestamps: bool = False
    source: SegmentSource | None = None
    sources: list[SegmentSource] | None = None
    spans: Annotated[list[Span], msgspec.Meta(description=(
        "Resolved pronunciation of an SSML request's segment (breaks, phonemes, rate, language, marks); "
        "absent for plain text"))] | None = None
    lexicons: Annotated[list[str], msgspec.Meta(description=(
        "On the last segment: the lexicons the request applied, as owner/name@version"))] | None = None
    marked: Annotated[list[NonNegInt], msgspec.Meta(description=(
        "On the last segment: the seq of every segment of the request whose spans hold an SSML mark "
        "(absent: none), so a worker that restarted mid-request knows whose mark times to read back"))] | None = None
    more: Annotated[bool, msgspec.Meta(description=(
        "More segments of this request may follow (its text is still arriving): total is a lower bound"))] = False
    lang: Annotated[Language, msgspec.Meta(description=(
        "The one language the whole text is read in, as the stage cut it for a request's voice map "
        "(its hash covers it); absent: the voice's front end tells the languages of its clauses"))] | None = None
    schema_version: Literal[1] = 1

    @property
    def last(self) -> bool:
        return self.seq == self.total - 1 and not self.more


class End(_Event, frozen=True, kw_only=True):
    """The end of a request sent in pieces whose every segment went out with ``more`` set (no text
    was left to speak when its final piece came), on ``tts.segments`` (key: ``user_id``).

    It stands for the request's last segment in the worker: ``total`` and ``parts`` are final,
    nothing is synthesized for it, and the completion follows once every part is in S3.
    """

    type: Literal["end"] = "end"
    request_id: RequestId
    user_id: UserId
    total: Annotated[int, msgspec.Meta(ge=1)]
    parts: list[Sha256Hex]
    request_hash: Sha256Hex
    voice: Voice
    format: str = "wav"
    speed: Speed = 1.0
    sample_rate: SampleRate | None = None
    model: str = ""
    model_version: str = ""
    created_at: datetime | None = None
    enqueued_at: datetime | None = None
    stream: bool = False
    priority: Priority = "interactive"
    timestamps: bool = False
    sources: list[SegmentSource] | None = None
    schema_version: Literal[1] = 1

    def as_last(self) -> Segment:
        """The request's last segment as the worker's ledger keeps it (its text is not needed: the
        segment itself came before, with ``more`` set)."""
        return Segment(request_id=self.request_id, user_id=self.user_id, seq=self.total - 1, total=self.total,
                       text=" ", hash=self.parts[-1], request_hash=self.request_hash, voice=self.voice,
                       format=self.format, speed=self.speed, sample_rate=self.sample_rate, model=self.model,
                       model_version=self.model_version, created_at=self.created_at, enqueued_at=self.enqueued_at,
                       parts=self.parts, stream=self.stream, priority=self.priority, timestamps=self.timestamps,
                       sources=self.sources)


class AudioRef(_Event, frozen=True, kw_only=True):
    """Where a request's audio lives and what it is."""

    uri: str
    bucket: str
    key: str
    format: str
    sample_rate: SampleRate
    duration_s: NonNegFloat
    bytes: NonNegInt
    sha256: Sha256Hex
    url: Annotated[str, msgspec.Meta(max_length=8192, description=(
        "A presigned HTTPS/HTTP GET link to the audio, fetchable without S3 credentials until it expires "
        "(present when the worker runs with TTS_S3_PRESIGN_TTL_S > 0)"))] | None = None


class ObjectRef(_Event, frozen=True, kw_only=True):
    """An object in S3 beside a request's audio (its word timings, its captions)."""

    uri: str
    bucket: str
    key: str
    content_type: str
    bytes: NonNegInt
    sha256: Sha256Hex
    url: Annotated[str, msgspec.Meta(max_length=8192, description=(
        "A presigned GET link (present when the worker runs with TTS_S3_PRESIGN_TTL_S > 0)"))] | None = None


class WordSpan(_Event, frozen=True, kw_only=True):
    """One written word and when it is spoken: ``start``/``end`` are character offsets into the
    request's ``text`` as sent (``text[start:end]``), ``start_s``/``end_s`` seconds in the audio
    (the request's joined audio in a completion's word timings; the chunk's own audio on a chunk).
    ``word`` is the word as the voice read it (after the stage's NFKC normalization); a stretch read
    otherwise than written (SSML ``sub``/``say-as``/``phoneme``, a lexicon's entry) is one word, as written."""

    word: str
    start: NonNegInt
    end: NonNegInt
    start_s: NonNegFloat
    end_s: NonNegFloat
    chars: list[WordSpan] | None = None  # a Mandarin word's characters, each with its own span


class WordTimings(_Event, frozen=True, kw_only=True):
    """The word-timing object a completion's ``words`` points at (JSON in S3, content-addressed):
    every word of the request, in order, times in the request's joined audio."""

    duration_s: NonNegFloat
    words: list[WordSpan]
    schema_version: Literal[1] = 1


class MarkTime(_Event, frozen=True, kw_only=True):
    """An SSML ``<mark name="..."/>`` and when the audio reaches it: seconds in the request's joined
    audio on a completion, in the chunk's own audio on a chunk (like a chunk's words; its request
    time is the chunk's ``offset_s`` plus ``time_s``)."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    time_s: NonNegFloat


class ModelInfo(_Event, frozen=True, kw_only=True):
    """The model that answered; ``voice`` is the voice that spoke (absent in older events)."""

    name: str
    version: str
    precision: str
    provider: str
    voice: Annotated[str, msgspec.Meta(min_length=1, max_length=128, description="The voice that spoke (a mix in its "
                                                                                 "one spelling)")] | None = None


class Timings(_Event, frozen=True, kw_only=True):
    """Where a request's time went, in milliseconds. ``e2e_ms``, ``synth_ms`` (model time of all its
    parts) and ``queue_ms`` (longest wait of a part before its model call) always; the rest (absent
    in older events) follow the request's *last part made*, the one its answer waited for, so that
    ``stage + read + wait + model + upload + collect + join + commit_wait`` is the time from its
    publish to the transaction that commits its completion: ``stage`` (published to its segments
    written by the stage), ``read`` (to the worker reading the last part's segment: topic, fetch,
    read-ahead), ``wait`` (to the model starting on it: front end, batcher queue, fair order,
    lanes), ``model`` (its share of the model call and DSP), ``upload`` (its encode: the part is
    then handed to S3, its PUT in flight), ``collect`` (to the worker's loop taking it in),
    ``join`` (every part made to the answer built: join and upload of the request's audio, beside
    its parts' PUTs, which it waits for), ``commit_wait`` (answer built to the
    transaction that commits it beginning)."""

    e2e_ms: NonNegFloat
    synth_ms: NonNegFloat
    queue_ms: NonNegFloat | None = None
    stage_ms: NonNegFloat | None = None
    read_ms: NonNegFloat | None = None
    wait_ms: NonNegFloat | None = None
    model_ms: NonNegFloat | None = None
    upload_ms: NonNegFloat | None = None
    collect_ms: NonNegFloat | None = None
    join_ms: NonNegFloat | None = None
    commit_wait_ms: NonNegFloat | None = None


ErrorCode = Annotated[str, msgspec.Meta(description=(
    "Stable code. From the stage: invalid_json, invalid_field, empty_text, text_too_long, unknown_voice, "
    "unsupported_format, unsupported_language (the text is mostly in scripts the voice cannot speak), "
    "invalid_ssml (text read as SSML, by text_type ssml or as one <speak> document with no text_type, that is not "
    "valid or not allowed SSML: the message gives line, "
    "column and reason), unknown_lexicon (a lexicon the request names is not stored, or its document is invalid), "
    "too_many_lexicons (a lexicon the request names is one its owner wrote past TTS_LEXICONS_PER_USER: the stage "
    "serves an owner's first that many, by their last write), "
    "internal_error (a stage bug, answered instead of stopping the partition), rate_limited (the user, by record "
    "key, started new requests faster than TTS_USER_REQUESTS_PER_S beyond a burst of TTS_USER_REQUEST_BURST; the "
    "message says when a token is back: retry under a new request_id); for a request sent in pieces: "
    "stream_timeout (no piece for TTS_STREAM_TIMEOUT_S before the final one), too_many_streams (the user has "
    "TTS_MAX_OPEN_STREAMS_PER_USER open), stage_busy (the stage holds TTS_MAX_OPEN_STREAMS open), "
    "too_many_pieces (past TTS_MAX_STREAM_PIECES), piece_gap (pieces missing while TTS_MAX_PIECES_AHEAD later "
    "ones wait). From the "
    "worker: synthesis_failed (including audio refused as near-silent or far shorter than its text), "
    "engine_error, part_missing, audio_too_long (past TTS_MAX_REQUEST_AUDIO_S), storage_failed (S3 answers "
    "but keeps failing on this request's audio), join_failed (the joined audio could not be written locally)."))]


class ErrorInfo(_Event, frozen=True, kw_only=True):
    code: ErrorCode
    message: str


class Completion(_Event, frozen=True, kw_only=True):
    """The one answer to a request on ``tts.completed`` (key: ``user_id``)."""

    request_id: str
    user_id: str
    status: Literal["ok", "failed"]
    audio: AudioRef | None = None
    segments: NonNegInt = 0
    cached_segments: NonNegInt = 0
    model: ModelInfo | None = None
    timings: Timings | None = None
    error: ErrorInfo | None = None
    completed_at: datetime | None = None
    words: Annotated[ObjectRef, msgspec.Meta(description=(
        "The request asked for timestamps: its word-timing JSON (a WordTimings object) beside the audio"))] | None = None
    captions: Annotated[dict[str, ObjectRef], msgspec.Meta(description=(
        "Caption files from the word timings, by format: vtt (WebVTT) and srt"))] | None = None
    words_count: NonNegInt | None = None
    words_reason: Annotated[str, msgspec.Meta(description=(
        "Why a request that asked for timestamps has no words (a voice without durations)"))] | None = None
    lexicons: Annotated[list[str], msgspec.Meta(description=(
        "The pronunciation lexicons the request applied, as owner/name@version (absent: none)"))] | None = None
    marks: Annotated[list[MarkTime], msgspec.Meta(description=(
        "The SSML marks of the request in document order, each with its time in the joined audio (absent: "
        "none, or a voice that does not time them: piper, chattts)"))] | None = None
    schema_version: Literal[1] = 1



class Chunk(_Event, frozen=True, kw_only=True):
    """One segment's audio of a streaming request on ``tts.chunks`` (key: ``user_id``).

    Produced in the worker's transaction as soon as the segment's audio is in S3, so a
    ``read_committed`` reader sees each chunk once and, per request, in ``seq`` order; the
    request's :class:`Completion` follows with the joined audio.
    """

    type: Literal["chunk"] = "chunk"
    request_id: RequestId
    user_id: str
    seq: NonNegInt
    total: Annotated[int, msgspec.Meta(ge=1)]
    audio: AudioRef
    cached: bool = False
    model: ModelInfo | None = None
    created_at: datetime | None = None
    words: Annotated[list[WordSpan], msgspec.Meta(description=(
        "The request asked for timestamps: this chunk's words, times in the chunk's audio, character "
        "offsets into the request's text"))] | None = None
    offset_s: Annotated[float, msgspec.Meta(ge=0, description=(
        "Where this chunk starts in the request's joined audio (a word's time in it is offset_s + start_s); "
        "also the sum of the earlier chunks' duration_s plus 0.15 s between each two"))] | None = None
    words_reason: str | None = None
    marks: Annotated[list[MarkTime], msgspec.Meta(description=(
        "The SSML marks in this chunk's segment, times in the chunk's audio (in the request's: offset_s + "
        "time_s); absent: none"))] | None = None
    more: Annotated[bool, msgspec.Meta(description=(
        "More chunks of this request may follow (its text is still arriving): total is a lower bound; "
        "the completion ends the request"))] = False
    schema_version: Literal[1] = 1

    @property
    def last(self) -> bool:
        return self.seq == self.total - 1 and not self.more


class Done(_Event, frozen=True, kw_only=True):
    """A worker's durable record that a request was answered, on the compacted ``tts.worker.done``
    (key: ``request_id``; partition: that of the request's segments), written in the same
    transaction as the completion. Workers read only its key and timestamp back; the fields
    are those the record always had (no ``schema_version``), so older records still load."""

    request_id: RequestId
    status: Literal["ok", "failed"]
    completed_at: datetime | None = None


class Rejection(_Event, frozen=True, kw_only=True):
    """The stage's verdict on a request with a readable id but bad content, on ``tts.segments``
    (same key and partition number as the request, so it keeps the user's order).

    The stage never writes ``tts.completed``: a worker turns a rejection into the request's
    failed completion inside its transaction and records it in its done set, so a
    rejection re-sent by a restarted stage produces no second answer. ``type`` tells it
    apart from a :class:`Segment` on the same topic.
    """

    type: Literal["rejection"] = "rejection"
    request_id: RequestId
    user_id: str
    error: ErrorInfo
    source_partition: int
    source_offset: int
    created_at: datetime | None = None
    enqueued_at: datetime | None = None
    schema_version: Literal[1] = 1


class LexiconRecord(_Event, frozen=True, kw_only=True):
    """A pronunciation lexicon on ``tts.lexicons`` (key ``owner/name``) or ``tts.lexicons.global``
    (key ``global/name``), compacted; a tombstone (null value) deletes it. ``pls`` is the W3C PLS 1.0
    document; its version is the digest of ``pls`` (the same document is the same version)."""

    owner: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._-]{1,64}$")]
    pls: str
    updated_at: datetime | None = None
    schema_version: Literal[1] = 1


class DeadLetter(_Event, frozen=True, kw_only=True):
    """A record that could not be answered (no readable ``request_id``).

    Dead letters are at-least-once: a stage killed after sending one and before its input
    offset is committed sends it again. ``id`` (``<topic>:<partition>:<offset>`` of the
    source record; also the ``ttsflow-dead-letter-id`` header) is the same on every copy,
    so an operator or a compacted store tells a re-sent dead letter from a new one.

    The raw bytes are kept whole up to a bound (the stage's: 256 KiB of value, 16 KiB of
    key), so a dead letter always fits in a Kafka record; past it ``truncated`` is true and
    ``value_b64`` / ``key_b64`` hold a prefix, while ``value_bytes`` and ``value_sha256``
    describe the whole original value.
    """

    id: str = ""
    reason: str
    message: str
    source_topic: str
    source_partition: int
    source_offset: int
    key_b64: str | None
    value_b64: str
    timestamp_ms: int | None = None
    value_bytes: NonNegInt | None = None
    value_sha256: Sha256Hex | None = None
    truncated: bool = False
    schema_version: Literal[1] = 1


# --- encode / decode -----------------------------------------------------------------

_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
_FIELD_AT = re.compile(r"(?:at|in) `\$\.([A-Za-z0-9_]+)")  # "in": a bad key of a map
_MISSING = re.compile(r"missing required field `([A-Za-z0-9_]+)`")

E = TypeVar("E", bound=_Event)


def encode(event: _Event) -> bytes:
    """Compact JSON bytes of an event."""
    return _encoder.encode(event)


def _decode(raw: bytes | str, typ: type[E]) -> E:
    dec = _decoders.get(typ)
    if dec is None:
        dec = _decoders[typ] = msgspec.json.Decoder(typ)
    try:
        return dec.decode(raw)
    except msgspec.ValidationError as e:
        msg = str(e)
        m = _FIELD_AT.search(msg) or _MISSING.search(msg)
        if m is None:  # top level is not an object
            raise InvalidJSON(f"not a JSON object: {msg}") from None
        raise InvalidField(f"{m.group(1)}: {msg}", field=m.group(1)) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise InvalidJSON(f"not valid JSON: {e}") from None
    except RecursionError:  # hostile nesting inside an object: bad input, not a crash
        raise InvalidJSON("not valid JSON: nested too deeply") from None


def decode_request(raw: bytes | str) -> Request:
    """Decode a request's bytes; raises :class:`SchemaError` naming the bad field.

    A ``created_at`` without an offset is taken as UTC, so every decoded time is aware.
    """
    req = _decode(raw, Request)
    if req.created_at is not None and req.created_at.tzinfo is None:
        req = msgspec.structs.replace(req, created_at=req.created_at.replace(tzinfo=UTC))
    return req


def decode_segment(raw: bytes | str) -> Segment:
    return _decode(raw, Segment)


def decode_completion(raw: bytes | str) -> Completion:
    return _decode(raw, Completion)


def decode_chunk(raw: bytes | str) -> Chunk:
    return _decode(raw, Chunk)


class _Kind(msgspec.Struct):
    type: str = "segment"


_kind_decoder = msgspec.json.Decoder(_Kind)


def decode_segment_event(raw: bytes | str) -> Segment | Rejection | End:
    """Decode a record of ``tts.segments``: a :class:`Rejection` or an :class:`End` when its
    ``type`` says so, else a :class:`Segment`. Raises :class:`SchemaError` like the others."""
    try:
        kind = _kind_decoder.decode(raw).type
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        kind = "segment"  # let the Segment decoder name what is wrong
    if kind == "rejection":
        return _decode(raw, Rejection)
    if kind == "end":
        return _decode(raw, End)
    return _decode(raw, Segment)


def decode_word_timings(raw: bytes | str) -> WordTimings:
    return _decode(raw, WordTimings)


def decode_dead_letter(raw: bytes | str) -> DeadLetter:
    return _decode(raw, DeadLetter)


def decode_lexicon(raw: bytes | str) -> LexiconRecord:
    return _decode(raw, LexiconRecord)


def peek_request_id(raw: bytes | str | None) -> str | None:
    """The request id if one can be read from otherwise bad bytes, else None.

    Decides between a failed completion (a client waits for that id) and a dead letter.
    """
    if raw is None:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(obj, dict):
        rid = obj.get("request_id")
        if isinstance(rid, str) and _REQUEST_ID_RE.match(rid):
            return rid
    return None


def check_content(req: Request, *, max_text_chars: int, voices: tuple[str, ...] | None = None,
                  formats: tuple[str, ...] = FORMATS, text: str | None = None) -> None:
    """Semantic checks after decoding, on the normalized ``text`` if given.

    Raises :class:`ContentError` with code ``empty_text``, ``text_too_long``,
    ``unsupported_format`` or ``unknown_voice``.
    """
    body = req.text if text is None else text
    if not body.strip():
        raise ContentError("text is empty after normalization", field="text", code="empty_text")
    if len(body) > max_text_chars:
        raise ContentError(f"text has {len(body)} characters, the limit is {max_text_chars}",
                           field="text", code="text_too_long")
    if req.format not in formats:
        raise ContentError(f"format {req.format!r} is not one of {', '.join(formats)}",
                           field="format", code="unsupported_format")
    if voices is not None and req.voice is not None and req.voice not in voices:
        raise ContentError(f"voice {req.voice!r} is not one of {', '.join(voices)}",
                           field="voice", code="unknown_voice")


def spans_key(spans: list[Span] | tuple[Span, ...] | None) -> str:
    """The canonical bytes (as text) of a segment's resolved pronunciation; empty for plain text."""
    return _encoder.encode(list(spans)).decode() if spans else ""


def segment_hash(text: str, *, voice: str, model: str, model_version: str, speed: float,
                 sample_rate: int | None, format: str, pronunciation: str = "") -> str:
    """SHA-256 cache key of one segment's audio: same inputs, same key, same bytes.

    ``pronunciation`` is what else decides the sound (:func:`spans_key` of an SSML segment's spans,
    lexicon versions); empty for plain text, whose keys are unchanged by it."""
    h = hashlib.sha256()
    parts = ["ttsflow-seg-v1", text, voice, model, model_version, f"{speed:.4f}", str(sample_rate or 0), format]
    if pronunciation:
        parts.append(pronunciation)
    for part in parts:
        b = part.encode("utf-8")
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()


def request_hash(part_hashes: list[str], *, format: str) -> str:
    """SHA-256 key of a request's joined audio, derived from its parts in order."""
    h = hashlib.sha256(b"ttsflow-req-v1\0" + format.encode())
    for p in part_hashes:
        h.update(bytes.fromhex(p))
    return h.hexdigest()


_ = SchemaError  # re-exported through schemas/__init__
