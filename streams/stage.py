"""``ttsflow stage``: the CPU stream stage on faust-streaming.

Consumes ``settings.topic_requests`` (raw bytes, key = user id) and, for each record,
in partition order:

1. **Validate.** No readable ``request_id`` (not JSON, not an object, id missing or not
   matching the v1 pattern): a :class:`~schemas.DeadLetter` with the raw key and value
   (base64), source topic/partition/offset, its identity ``id`` (the same on a re-sent
   copy; also the ``ttsflow-dead-letter-id`` header) and a reason (``empty_value``,
   ``invalid_json``, ``no_request_id``) goes to ``settings.topic_dlq``, keyed like the
   original. A readable id with bad content: a :class:`~schemas.Rejection` on
   ``settings.topic_segments`` with a stable ``error.code`` (``invalid_json``,
   ``invalid_field`` whose message starts with the field name, ``empty_text``,
   ``text_too_long``, ``unknown_voice``, ``unsupported_format``,
   ``unsupported_language``), keyed like the request (by the user id it names when the
   record has no key; to the source partition when it names none either). The stage never
   writes ``tts.completed``: a worker answers the rejection in its transaction, once.
2. **Normalize, split, hash** (:mod:`streams.text`, :func:`schemas.segment_hash` over the
   normalized segment text, voice, model = ``settings.backend``, ``settings.model_version``,
   speed, sample rate and format; :func:`schemas.request_hash` over the parts).
3. **Produce** one :class:`~schemas.Segment` per segment to ``settings.topic_segments``
   with the request's own record key (so the segment for user U lands in the partition
   number U's request came from: every producer partitions with murmur2, aiokafka's
   default), in ``seq`` order; the last carries ``parts``, all part hashes.

No exception escapes the agent for a bad record: decoding raises only
:class:`~schemas.SchemaError`, and an unexpected error in the pure per-record code is
answered like bad content (failed completion ``internal_error`` or dead letter
``stage_error``) and counted, so the next record is processed. Kafka errors are not
swallowed: they crash the worker, which exits non-zero for the orchestrator to restart.

**Duplicates.** A faust Table ``seen`` (``seen-eos`` under exactly_once: a changelog
written in transactions hangs faust's non-transactional recovery), rebuilt from its
compacted changelog on start and on rebalance (``TTS_STAGE_STORE``: in memory, or in
RocksDB on disk, which restarts from its own files), holds one entry per (record key,
request id) in a time bucket one window wide (:mod:`streams.stage_dedup`): a request's
cost never grows with its user's history. A Table's changelog record is written to the
partition of the event being processed, so a user's entries live in the same partition
as the user's requests and move with it. A request id seen for the same key within
``settings.dedup_window_s`` produces nothing (counted); buckets older than the previous
one are dropped from the local store and expire from the changelog by retention. Failed
requests are recorded too, so every readable request id gets exactly one verdict from
the stage. Ids are per user: the same id from two users is two requests.

**Guarantee** (``settings.stage_guarantee``, default ``at_least_once``). What a
``read_committed`` reader of the segments topic saw in ``ttsflow bench stage --kill``
(2 stage processes, 4 partitions, 100 requests/s, SIGKILLs with immediate restarts,
crashed stages restarted as an orchestrator would; faust-streaming 0.15.3, aiokafka
0.14, Kafka 3.9; counted by ``(request_id, seq)``):

* ``at_least_once`` -- **the stage gives at-least-once, nothing lost.** 3,000 requests /
  4 kills: 0 lost, 10 duplicated segments (2 requests); 4,000 requests / 6 kills: 0
  lost, 9 duplicated (2 requests); no crash. Plain producer; the stage awaits the
  delivery of a request's outputs before it records the id in the table, so a crash can
  repeat a request's segments (the input offset was not committed) but never marks a
  request seen whose segments were lost. **Input offsets are committed only for records
  the agent processed** (:func:`guard_consumer_acks`): faust's stream *acks* events it
  skips in a rebalance (older consumer generation, flow suspended) and the event an agent
  crashed on, and those acks let its commit move past requests the stage never finished
  (``ttsflow chaos``: 18 requests published during a stage restart, offsets 67-84 of one
  partition, committed past and never answered). faust's table check "changelog has 0
  partitions" (``PartitionsMismatch``), which crashed the agent mid-record right after
  every restart, is skipped. And a commit must start at the committed offset:
  faust's own check lets a run of acked offsets start one past it (or anywhere when it is
  0); ``tests/integration/test_stage_kill.py`` lost a request that way (a partition handed
  the agent offsets 0 then 2; 1 was committed past). Holes in what the agent is handed are
  logged as ``input_gap``. The worker drops repeated ``(request_id,
  seq)``, and its transactional completion record makes the end-to-end answer
  exactly-once anyway.
* ``exactly_once`` -- faust's: one transactional producer per assigned input partition
  (pre-KIP-447, ``transactional.id = <app id>-<group>-<partition>``) committing that
  partition's offsets. faust's ``topic.send`` picks the transaction of the *destination*
  partition; this stage sends every output through the transaction of the *source*
  partition instead, so outputs, the table's changelog and the offsets of one input
  partition commit together. **Broken under SIGKILL:** with 4 kills it never duplicated
  or lost a committed segment, but both stages crashed twice in table recovery
  (``ConsistencyError``: "persisted offset ... higher than highwater (205 > -1)") and
  only an outside restart brought them back; with 6 kills they crash-looped 12 times
  (``ConsistencyError``, ``ValueError: Offset must be a positive integer`` in recovery's
  seek) and 11,836 of 22,210 segments were still missing 60 s after the last one came.
  With faust's ``recovery_consistency_check`` off they stopped crashing but stalled:
  2,763 segments missing after 80 s, more records in the log than committed. Rebalances
  also log ``Invalid state transition IN_TRANSACTION -> IN_TRANSACTION`` (faust begins
  transactions on producers already in one). Latency is bounded by the commit interval
  (``TTS_STAGE_COMMIT_INTERVAL_MS``) as segments become visible only at commit.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from engine import voices as engine_voices
from engine.voices import VoiceInfo
from schemas import (
    DeadLetter,
    ErrorInfo,
    Rejection,
    SchemaError,
    Segment,
    check_content,
    decode_request,
    encode,
    peek_request_id,
    request_hash,
    segment_hash,
)
from schemas.errors import ContentError
from streams.settings import Settings, SettingsError, load_settings
from streams.stage_dedup import SeenIndex, UserSeen, dedup_table_name
from streams.text import normalize, split_segments

__all__ = ["InputWatch", "Outcome", "Record", "StageCore", "backend_voices", "main"]

_log = logging.getLogger("ttsflow.stage")

Kind = Literal["segments", "failed", "dead_letter", "duplicate"]
DEAD_LETTER_ID_HEADER = "ttsflow-dead-letter-id"


# --- voices without loading a model ---------------------------------------------------

def backend_voices(backend: str) -> tuple[str, ...] | None:
    """The voices a backend offers, known without loading its model (None: not checked here).
    The data is the engine's voice registry (:mod:`engine.voices`)."""
    return engine_voices.backend_voices(backend)


# --- the pure per-record logic ------------------------------------------------------

class SeenIds(Protocol):
    """One record key's seen request ids: ``get(request_id)`` is when it was first seen
    (epoch seconds) or None (a dict works; the stage passes a view of its table)."""

    def get(self, request_id: str, /) -> float | None: ...


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

    def __init__(self, settings: Settings, *, voices: tuple[str, ...] | None = None,
                 clock: Callable[[], float] = time.time,
                 on_dropped: Callable[[str, int], None] | None = None) -> None:
        self.s = settings
        self.voices = voices
        self.default_voice = settings.voice or (voices[0] if voices else settings.backend)
        self.clock = clock
        # the voices this stage routes to whose languages are known (engine.voices)
        self.served: tuple[VoiceInfo, ...] = tuple(
            i for i in (engine_voices.voice_info(v) for v in voices or ()) if i is not None)
        self.on_dropped = on_dropped  # (script, spoken units cut from an accepted request)

    def is_duplicate(self, request_id: str, seen: SeenIds, now: float) -> bool:
        """``seen`` maps the user's request ids to when they were first seen (epoch seconds)."""
        t = seen.get(request_id)
        return t is not None and now - t < self.s.dedup_window_s

    def handle(self, key: bytes | None, value: bytes | None, *, partition: int, offset: int,
               timestamp_ms: int | None, seen: SeenIds) -> Outcome:
        """Everything the stage does with one record, as data. Never raises."""
        now = self.clock()
        rid = peek_request_id(value)
        try:
            if rid is None:
                return self._dead_letter(key, value, partition, offset, timestamp_ms)
            if self.is_duplicate(rid, seen, now):
                return Outcome("duplicate", request_id=rid)
            assert value is not None
            return self._request(key, value, rid, now, timestamp_ms, partition, offset)
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
        dl_id = f"{self.s.topic_requests}:{partition}:{offset}"
        dl = DeadLetter(id=dl_id, reason=reason, message=message or reason, source_topic=self.s.topic_requests,
                        source_partition=partition, source_offset=offset, key_b64=_b64(key),
                        value_b64=_b64(value or b"") or "", timestamp_ms=timestamp_ms)
        return Outcome("dead_letter", (Record(self.s.topic_dlq, key, encode(dl),
                                              headers=((DEAD_LETTER_ID_HEADER, dl_id.encode()),)),), code=reason)

    def _failed(self, key: bytes | None, value: bytes | None, rid: str, code: str, message: str, now: float,
                *, partition: int, offset: int, timestamp_ms: int | None = None) -> Outcome:
        """A rejection on the segments topic, in the request's partition number (by its key, or
        explicitly when it has none); a worker answers it in its transaction."""
        uid = _peek_user_id(value)
        enqueued = datetime.fromtimestamp((timestamp_ms / 1000.0) if timestamp_ms else now, UTC)
        r = Rejection(request_id=rid, user_id=uid or (key or b"").decode("utf-8", "replace") or "unknown",
                      error=ErrorInfo(code=code, message=message), source_partition=partition,
                      source_offset=offset, enqueued_at=enqueued)
        out_key = key if key else (uid.encode() if uid is not None else None)
        rec = Record(self.s.topic_segments, out_key, encode(r), partition=None if out_key else partition)
        return Outcome("failed", (rec,), request_id=rid, code=code, remember=rid)

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

    def _request(self, key: bytes | None, value: bytes, rid: str, now: float,
                 timestamp_ms: int | None, partition: int, offset: int) -> Outcome:
        s = self.s
        try:
            req = decode_request(value)
            text = normalize(req.text)
            check_content(req, max_text_chars=s.max_text_chars, voices=self.voices, text=text)
            voice, text = self._speakable(rid, req.voice, text)
        except SchemaError as e:
            return self._failed(key, value, rid, e.code, e.message, now, partition=partition, offset=offset,
                                timestamp_ms=timestamp_ms)
        pieces = split_segments(text, s.max_segment_chars)
        hashes = [segment_hash(p, voice=voice, model=s.backend, model_version=s.model_version, speed=req.speed,
                               sample_rate=req.sample_rate, format=req.format) for p in pieces]
        rh = request_hash(hashes, format=req.format)
        enqueued = datetime.fromtimestamp((timestamp_ms / 1000.0) if timestamp_ms else now, UTC)
        out_key = key if key else req.user_id.encode()
        n = len(pieces)
        records = tuple(
            Record(s.topic_segments, out_key, encode(Segment(
                request_id=rid, user_id=req.user_id, seq=i, total=n, text=p, hash=h, request_hash=rh, voice=voice,
                format=req.format, speed=req.speed, sample_rate=req.sample_rate, model=s.backend,
                model_version=s.model_version, created_at=req.created_at, enqueued_at=enqueued,
                parts=hashes if i == n - 1 else None)))
            for i, (p, h) in enumerate(zip(pieces, hashes, strict=True)))
        return Outcome("segments", records, request_id=rid, remember=rid)


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


# --- faust wiring -------------------------------------------------------------------

def _key_str(key: bytes | None) -> str:
    return "" if key is None else key.decode("utf-8", "surrogateescape")


def _seek_before_resume() -> None:
    """Make faust's end of table recovery seek the stream partitions *before* resuming them.

    ``Recovery.on_recovery_completed`` resumes the stream partitions, then awaits the seek
    to committed offsets, while the flow is already running (it was resumed to read the
    changelogs). In between, the fetcher hands the agent records from wherever the
    position was; when the seek lands, the rest of that fetch is still being handed out
    and faust drops the re-fetched records below the last offset it handed out, past a
    hole: seen as ``input_gap`` (offsets 39-47 of a partition never processed) right
    after a stage restart, and the partition's commit stuck behind the hole. Here
    ``resume_partitions`` calls made during it are held until it returns. Process-wide
    (the stage process runs only this app).
    """
    from faust.tables.recovery import Recovery

    if getattr(Recovery, "_ttsflow_seek_first", False):
        return
    completed = Recovery.on_recovery_completed

    async def on_recovery_completed(self: Any, generation_id: int = 0) -> None:
        consumer = self.app.consumer
        held: list[set[Any]] = []
        consumer.resume_partitions = lambda tps: held.append(set(tps))
        try:
            await completed(self, generation_id)
        finally:
            del consumer.resume_partitions  # the class's method again
            for tps in held:
                consumer.resume_partitions(tps)

    Recovery.on_recovery_completed = on_recovery_completed  # type: ignore[method-assign]
    Recovery._ttsflow_seek_first = True  # type: ignore[attr-defined]


def _stage_app_class() -> type:
    """faust.App whose consumer commits only offsets of input records the agent processed."""
    import weakref

    import faust

    _seek_before_resume()

    class StageApp(faust.App):  # type: ignore[misc]
        """See :func:`guard_consumer_acks`."""

        _guarded_topic: str | None = None
        _processed: weakref.WeakSet[Any]

        def guard_acks(self, topic: str) -> None:
            self._guarded_topic = topic
            self._processed = weakref.WeakSet()

        def mark_processed(self, message: Any) -> None:
            """The agent is done with ``message`` (outputs delivered): its offset may be committed."""
            if self._guarded_topic is not None:
                self._processed.add(message)

        def _new_consumer(self) -> Any:
            consumer = super()._new_consumer()
            if self._guarded_topic is not None:
                guard_consumer_acks(consumer, self._guarded_topic, self._processed)
                seek_uncommitted_to_start(consumer, self._guarded_topic)
            return consumer

    return StageApp


_STALL_S = 30.0
_FRESH_STALL_S = 8.0
_BROKER_WAIT_S = 120.0


class InputWatch:
    """When must the stage restart itself to get an input partition moving again? Pure: the
    caller passes what the consumer knows and the time, once every few seconds per partition.

    faust sometimes leaves an assigned partition unserved, and nothing in faust notices:

    * **commit stalled** -- the agent was never handed a hole in the partition (records
      fetched and dropped around a rebalance). The records after it are processed, but
      :func:`guard_consumer_acks` never commits past the hole, so the committed offset
      sits still while processed records wait above it.
    * **input stalled** -- after a rebalance's table recovery the partition is never
      fetched again (seen: a stage restarted after SIGKILL, assigned two partitions with
      hundreds of requests waiting, processed none of them in two minutes, while the
      committed offset and the agent's position stood still).

    Either, unchanged for ``stall_s``, returns a reason; the stage then re-executes itself
    and reads again from the committed offset (the worker drops repeated segments). A
    partition that has records waiting and has not handed the agent a single one since it
    was assigned (``delivered`` false) is given only ``fresh_stall_s``: a healthy fetch
    delivers within a second, and the first stage on a fresh cluster once sat 35 s on such
    a partition. The caller does not check while tables recover. One record past what is
    done is not counted as waiting: a transactional producer's commit marker ends a
    partition with an offset no consumer is ever handed.
    """

    def __init__(self, stall_s: float = _STALL_S, fresh_stall_s: float = _FRESH_STALL_S) -> None:
        self.stall_s = stall_s
        self.fresh_stall_s = fresh_stall_s
        self._commit: dict[int, tuple[int | None, float]] = {}
        self._input: dict[int, tuple[tuple[int | None, int | None], float]] = {}

    def forget(self, keep: set[int]) -> None:
        """Drop the partitions not in ``keep`` (revoked)."""
        for d in (self._commit, self._input):
            for p in [p for p in d if p not in keep]:
                del d[p]

    def check(self, partition: int, *, committed: int | None, processed_next: int | None, end: int | None,
              acked_waiting: bool, now: float, delivered: bool = True) -> str | None:
        """``committed``: the group's committed offset; ``processed_next``: one past the last
        offset the agent processed; ``end``: the partition's end offset (None: unknown);
        ``acked_waiting``: processed records wait to be committed; ``delivered``: the agent
        was handed a record of the partition since its assignment."""
        if acked_waiting:
            prev_c = self._commit.get(partition)
            if prev_c is None or prev_c[0] != committed:
                self._commit[partition] = (committed, now)
            elif now - prev_c[1] > self.stall_s:
                return "commit_stalled"
        else:
            self._commit.pop(partition, None)
        done = max((x for x in (committed, processed_next) if x is not None), default=0)
        if end is None or end - done <= 1:
            self._input.pop(partition, None)
            return None
        key = (committed, processed_next)
        prev_i = self._input.get(partition)
        if prev_i is None or prev_i[0] != key:
            self._input[partition] = (key, now)
        elif now - prev_i[1] > (self.stall_s if delivered else self.fresh_stall_s):
            return "input_stalled"
        return None


def seek_uncommitted_to_start(consumer: Any, topic: str) -> None:
    """Make faust's seek to committed offsets seek a ``topic`` partition that has none to its start.

    After a rebalance faust suspends the flow, clears the queues of what was fetched, and
    seeks every partition back to its committed offset; aiokafka skips a partition without
    one, so the fetcher goes on from where its prefetch stopped and the cleared records are
    never handed to the agent. Seen right after a stage restart, before its first commit:
    offsets 16-35 of a partition skipped (``input_gap``), or a whole partition fetched and
    dropped so the agent never saw one of its records. With no committed offset, what the
    stage must process is everything from the start (``auto.offset.reset`` is earliest);
    records it already answered are dropped as duplicates.
    """
    seek_to_committed = consumer.seek_to_committed

    async def seek_to_committed_or_start() -> Any:
        committed = await seek_to_committed()
        missing = [tp for tp, off in committed.items() if tp.topic == topic and (off is None or off < 0)]
        if missing:
            starts = await consumer.earliest_offsets(*missing)
            for tp in missing:
                start = starts.get(tp, 0) or 0
                await consumer.seek(tp, start)
                _log.info("event=seek_uncommitted partition=%d offset=%d", tp.partition, start)
        return committed

    consumer.seek_to_committed = seek_to_committed_or_start


def guard_consumer_acks(consumer: Any, topic: str, processed: Any) -> None:
    """Make ``consumer.ack`` refuse, for ``topic``, every message not in ``processed``.

    faust's stream acks an event it *skips* without handing it to the agent: one fetched
    in an older consumer generation or while flow control is suspended (a rebalance). If
    that ack lands after the rebalance's seek to the committed offset C, the skipped
    offsets C, C+1, ... count as done and the next commit moves past records the stage
    never processed: their requests are lost (seen as a contiguous block of lost offsets
    right after a stage restart). A refused message is marked acked (so faust's
    ``wait_empty`` does not wait for it) but its offset is not committable, so after the
    seek it is read and processed again.
    """
    ack = consumer.ack

    def guarded_ack(message: Any) -> bool:
        if message.topic == topic and message not in processed:
            if not message.acked:
                message.acked = True
                consumer._unacked_messages.discard(message)
                _log.warning("event=skipped_ack_refused partition=%d offset=%d", message.partition, message.offset)
            return False
        processed.discard(message)
        return bool(ack(message))

    consumer.ack = guarded_ack

    # faust commits the first run of consecutive acked offsets unless it starts more than
    # ONE past the committed offset, and skips that check when the committed offset is 0:
    # a single record never processed at the committed offset (seen: offset 1 of a
    # partition committed 1, acked 2, 3, ...) was committed past. Here a run must start at
    # the committed offset (faust's gap tracking fills transaction markers into it first).
    new_offset = consumer._new_offset

    def guarded_new_offset(tp: Any) -> int | None:
        if tp.topic == topic:
            acked = consumer._acked[tp]
            committed = consumer._committed_offset[tp]
            if acked and committed is not None:
                gaps = consumer._gap[tp]
                low = min(min(acked), min((g.begin for g in gaps), default=min(acked)))
                if low > committed:
                    return None
        result: int | None = new_offset(tp)
        return result

    consumer._new_offset = guarded_new_offset


def claim_stage_instance_id(settings: Settings) -> str:
    """``<app id>-<hostname>-<slot>``: the lowest slot no live stage of this cluster and app id
    holds on this host (:func:`streams.identity.claim_slot`, shared with the worker's
    transactional id), held until exit; a stage restarted after a crash takes the dead
    one's id, hence its static membership and its partitions."""
    from streams.identity import claim_slot, host_name

    slot = claim_slot("stage", settings.bootstrap_servers, settings.stage_app_id)
    return f"{settings.stage_app_id}-{host_name()}-{slot}"


def _leave_group_on_stop() -> None:
    """Make a static member (``group.instance.id``) leave its group when it stops cleanly.

    aiokafka 0.14's ``GroupCoordinator._maybe_leave_group`` sends no LeaveGroup when a
    ``group_instance_id`` is set (as the Java client does): the broker keeps the member and
    its partitions until its session times out, waiting for it to come back under the same
    id. Right for a crash (SIGKILL, OOM, the input watchdog's re-exec, a container
    restarted in its pod): the restart takes the partitions back at once. Wrong for a
    clean stop (SIGTERM): a scale-down or a Deployment's rolling update replaces the pod
    under a new name, and its partitions would sit idle for the session timeout. So here a
    clean stop leaves as a dynamic member does (a LeaveGroup by member id removes a static
    member too, and the group rebalances at once). Same body as aiokafka 0.14's, without the
    static check; process-wide (the stage process runs only this app).
    """
    from aiokafka import errors as kafka_errors
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from aiokafka.protocol.group import LeaveGroupRequest

    if getattr(GroupCoordinator, "_ttsflow_static_leave", False):
        return

    async def _maybe_leave_group(self: Any) -> None:
        if self.generation > 0:
            try:  # one attempt, as aiokafka's: the session timeout covers a lost request
                resp = await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
                err = kafka_errors.for_code(resp.error_code)
                if err is not kafka_errors.NoError:
                    raise err()
            except kafka_errors.KafkaError as e:
                _log.warning("event=leave_group_failed group=%s error=%r", self.group_id, e)
            else:
                _log.info("event=left_group group=%s instance_id=%s", self.group_id, self._group_instance_id)
        self.reset_generation()

    GroupCoordinator._maybe_leave_group = _maybe_leave_group  # type: ignore[method-assign]
    GroupCoordinator._ttsflow_static_leave = True  # type: ignore[attr-defined]


def _fetch_state(consumer: Any, tp: Any) -> str:
    """What aiokafka's fetcher holds for ``tp`` (position, paused, awaiting an offset reset),
    for the log line of a stalled partition; faust keeps none of it."""
    try:
        from aiokafka.structs import TopicPartition

        sub = consumer._thread._ensure_consumer()._subscription.subscription
        st = sub.assignment.state_value(TopicPartition(tp.topic, tp.partition))
        return (f"position={getattr(st, '_position', None)} paused={st.paused} "
                f"awaiting_reset={st.awaiting_reset} valid={st.has_valid_position}")
    except Exception as e:  # a diagnostic only
        return f"unknown({e!r})"


async def _sweep_expired(store: Any, index: SeenIndex, now: float, *, chunk: int = 10_000) -> int:
    """Drop expired dedup entries from faust's local store (memory dict, or one RocksDB per
    partition, whose keys sort by bucket), yielding to the loop every ``chunk`` keys."""
    n = 0
    dbs = getattr(store, "_dbs", None)
    if dbs is not None:  # faust.stores.rocksdb.Store
        for db in list(dbs.values()):
            doomed = []
            for key in db.keys():
                if not index.expired(key, now):
                    break  # sorted by bucket: the rest is live
                doomed.append(key)
            for i, key in enumerate(doomed):
                del db[key]
                if i % chunk == chunk - 1:
                    await asyncio.sleep(0)
            n += len(doomed)
        return n
    data = store.data  # faust.stores.memory.Store
    keys = list(data.keys())
    for i, key in enumerate(keys):
        if index.expired(key, now):
            data.pop(key, None)
            n += 1
        if i % chunk == chunk - 1:
            await asyncio.sleep(0)
    return n


def build_app(settings: Settings, metrics: Any, *, core: StageCore | None = None) -> Any:
    """The faust app of the stage (not started). ``metrics`` is a :class:`StageMetrics`."""
    _StageApp = _stage_app_class()
    core = core or StageCore(settings, voices=backend_voices(settings.backend), on_dropped=metrics.foreign_dropped)
    eos = settings.stage_guarantee == "exactly_once"
    brokers = [f"kafka://{b.strip()}" for b in settings.bootstrap_servers.split(",") if b.strip()]
    # Static membership (KIP-345): a stage restarted after a SIGKILL rejoins under the same
    # group.instance.id and gets its partitions back without a rebalance, so the other
    # stages never stop and it need not wait out the dead member's session (seen before:
    # every stage idle ~10 s after each kill; one killed again within ~8 s of its restart
    # never started). A clean stop still leaves the group at once (_leave_group_on_stop).
    instance_id = settings.stage_instance_id or claim_stage_instance_id(settings)
    # one data dir per stage identity: RocksDB locks its files, and a restarted stage with the
    # same identity (same partitions back) finds its table where it left it
    datadir = Path(settings.home) / "stage" / settings.stage_app_id / instance_id
    datadir.mkdir(parents=True, exist_ok=True)
    _leave_group_on_stop()
    metrics.identify(instance_id=instance_id, group=settings.stage_app_id)
    app = _StageApp(
        settings.stage_app_id,
        broker=brokers,
        key_serializer="raw",
        value_serializer="raw",
        processing_guarantee=settings.stage_guarantee,
        store="rocksdb://" if settings.stage_store == "rocksdb" else "memory://",
        web_enabled=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        consumer_auto_offset_reset="earliest",
        datadir=str(datadir),
        producer_acks=-1,
        broker_commit_every=1000,
        broker_commit_interval=settings.stage_commit_interval_ms / 1000.0,
        consumer_group_instance_id=instance_id,
        broker_client_id=instance_id,  # what `ttsflow lag --json` and the broker's group view show
        # a member that dies and does not come back (a pod replaced under a new name) holds its
        # partitions until its session times out: keep that short
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
    )
    requests = app.topic(settings.topic_requests, key_type=bytes, value_type=bytes,
                         key_serializer="raw", value_serializer="raw")
    # Raw bytes in and out of the table (the app's serializers): one entry per (record key,
    # request id) in a time bucket, the value its first-seen time (streams/stage_dedup.py).
    # One changelog per guarantee: a changelog written in transactions ends in commit
    # markers, and faust's non-transactional recovery waits forever for an event at the
    # marker's offset (seen when a stage switched from exactly_once to at_least_once).
    # Switching modes therefore starts with an empty dedup table.
    seen = app.Table(dedup_table_name(settings), default=None, partitions=settings.partitions, key_type=bytes,
                     value_type=bytes)
    index = SeenIndex(settings.dedup_window_s)
    source_topic = settings.topic_requests
    # faust checks on the first table write that the changelog has as many partitions as the
    # source topic; right after a start the consumer may not know the changelog yet ("has 0
    # partitions") and the check crashes the agent mid-record (seen in every SIGKILL run).
    # Both topics are made with settings.partitions, so the check is skipped.
    seen._verified_source_topics_for_partitions.add(source_topic)
    app.guard_acks(source_topic)

    async def send(rec: Record, src_partition: int) -> Awaitable[Any]:
        headers = list(rec.headers) or None
        if eos:
            # The transaction of the *source* partition: its offsets commit with these records.
            group = app.assignor.group_for_topic(source_topic)
            tid = f"{app.conf.id}-{group}-{src_partition}"
            return await app.producer.send(rec.topic, rec.key, rec.value, rec.partition, None, headers,
                                           transactional_id=tid)
        return await app.producer.send(rec.topic, rec.key, rec.value, rec.partition, None, headers)

    # (consumer generation, last offset processed) per input partition: a jump within one
    # generation is a hole in what the agent was handed (transaction markers, or records
    # faust dropped around a rebalance); logged so a lost request can be traced
    last_offset: dict[int, tuple[int, int]] = {}

    def note_offset(msg: Any) -> None:
        gen = app.consumer_generation_id
        prev = last_offset.get(msg.partition)
        if prev is not None and prev[0] == gen and msg.offset > prev[1] + 1:
            _log.warning("event=input_gap partition=%d after_offset=%d offset=%d generation=%d", msg.partition,
                         prev[1], msg.offset, gen)
        last_offset[msg.partition] = (gen, msg.offset)

    @app.agent(requests)
    async def stage(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            note_offset(msg)
            t0 = time.perf_counter()
            metrics.consumed()
            k = msg.key or b""
            user_seen = UserSeen(index, seen.get, k, core.clock())
            outcome = core.handle(msg.key, msg.value, partition=msg.partition, offset=msg.offset,
                                  timestamp_ms=int(msg.timestamp * 1000) if msg.timestamp else None, seen=user_seen)
            metrics.processed(time.perf_counter() - t0)
            futs = [await send(r, msg.partition) for r in outcome.records]
            if outcome.remember is not None:
                if not eos and futs:
                    for f in futs:
                        await f  # delivered before the id is recorded: a crash repeats, never loses
                entry_key, entry_value = index.entry(k, outcome.remember, core.clock())
                seen[entry_key] = entry_value
            if outcome.kind == "segments":
                metrics.segments(len(outcome.records))
                if msg.timestamp:
                    metrics.request_age(time.time() - msg.timestamp)
            elif outcome.kind == "failed":
                k = _key_str(msg.key)
                metrics.failed(outcome.code or "?")
                _log.info("event=request_failed request_id=%s key=%s code=%s", outcome.request_id, k, outcome.code)
            elif outcome.kind == "dead_letter":
                metrics.dead_letter(outcome.code or "?")
                _log.info("event=dead_letter partition=%d offset=%d reason=%s", msg.partition, msg.offset,
                          outcome.code)
            else:
                k = _key_str(msg.key)
                metrics.duplicate()
                _log.info("event=duplicate request_id=%s key=%s", outcome.request_id, k)
            app.mark_processed(msg)
            metrics.heartbeat()

    @app.timer(1.0)
    async def beat() -> None:
        metrics.heartbeat()

    # Entries of buckets older than the previous one can never match again: drop them from
    # the local store (no tombstones: the changelog deletes them by retention). Checked once
    # a minute, done when the bucket has moved on since the last sweep.
    swept: list[int] = []

    @app.timer(60.0)
    async def expire_seen() -> None:
        if app.in_recovery or app.rebalancing:
            return
        now = core.clock()
        b = index.bucket(now)
        if swept and swept[-1] == b:
            return
        n = await _sweep_expired(seen.data, index, now)
        swept[:] = [b]
        if n:
            _log.info("event=dedup_expired entries=%d", n)

    # faust can leave an assigned input partition unserved (see InputWatch): the stage then
    # restarts itself in place (same PID, same command line) and reads again from the
    # committed offset; duplicates are dropped by the worker.
    watch = InputWatch()

    @app.timer(2.0)
    async def input_watchdog() -> None:
        if eos:
            return
        if app.in_recovery or app.rebalancing:  # tables are being rebuilt: nothing is fetched yet
            watch.forget(set())
            return
        consumer = app.consumer
        try:
            tps = [tp for tp in consumer.assignment() if tp.topic == source_topic]
            ends = await asyncio.wait_for(consumer.highwaters(*tps), 10.0) if tps else {}
        except Exception as e:  # broker unreachable, rebalance under way: look again later
            _log.debug("event=input_watch_skipped error=%r", e)
            return
        now = time.monotonic()
        watch.forget({tp.partition for tp in tps})
        for tp in tps:
            committed = consumer._committed_offset.get(tp)
            last = last_offset.get(tp.partition)
            processed_next = None if last is None else last[1] + 1
            delivered = last is not None and last[0] == app.consumer_generation_id
            reason = watch.check(tp.partition, committed=committed, processed_next=processed_next,
                                 end=ends.get(tp), acked_waiting=bool(consumer._acked.get(tp)), now=now,
                                 delivered=delivered)
            if reason is None:
                continue
            _log.error("event=%s partition=%d committed=%s processed_next=%s end=%s paused=%s fetch_state=%s; "
                       "restarting to re-read from the committed offset", reason, tp.partition, committed,
                       processed_next, ends.get(tp), tp in consumer._paused_partitions, _fetch_state(consumer, tp))
            metrics.ready(False)
            metrics.close()
            logging.shutdown()
            os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])

    @app.task
    async def started() -> None:
        metrics.ready(True)
        _log.info("event=stage_started app_id=%s instance_id=%s guarantee=%s topic=%s", settings.stage_app_id,
                  instance_id, settings.stage_guarantee, settings.topic_requests)

    app.stage_agent = stage  # type: ignore[attr-defined]
    return app


def _prepare_topics(settings: Settings) -> Settings:
    """Create every topic the stage uses (its changelog and leader topic included) before faust
    starts, with as many partitions as the requests topic really has. Where the stage may not
    create topics (ACLs) they must exist already: logged, and faust is left to try."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from streams.kafka import ensure_topics

    try:
        md = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 3}).list_topics(
            settings.topic_requests, timeout=10)
        t = md.topics.get(settings.topic_requests)
        if t is not None and t.error is None and t.partitions and len(t.partitions) != settings.partitions:
            _log.warning("event=partitions_from_topic topic=%s partitions=%d setting=%d", settings.topic_requests,
                         len(t.partitions), settings.partitions)
            settings = settings.replace(partitions=len(t.partitions))
        created = ensure_topics(settings)
        _log.info("event=topics_ready created=%s", ",".join(created) or "-")
    except KafkaException as e:
        _log.warning("event=topics_not_prepared error=%s", e)
    return settings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow stage", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--metrics-port", type=int, default=None,
                    help="port of /metrics, /healthz, /readyz (default TTS_METRICS_PORT; 0 disables)")
    ap.add_argument("--guarantee", choices=("exactly_once", "at_least_once"), default=None,
                    help="faust processing guarantee (default TTS_STAGE_GUARANTEE)")
    ns = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(stage_guarantee=ns.guarantee)
    except SettingsError as e:
        print(f"ttsflow stage: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("aiokafka", "faust", "mode"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(settings.log_level)))

    from faust import Worker

    from streams.kafka import wait_for_broker
    from streams.stage_metrics import StageMetrics

    # faust exits at once when it cannot bootstrap; a stage started during a broker restart
    # waits for it instead (bounded: past that, exit non-zero for the orchestrator)
    if not wait_for_broker(settings, timeout_s=_BROKER_WAIT_S):
        print(f"ttsflow stage: no broker at {settings.bootstrap_servers} after {_BROKER_WAIT_S:.0f} s", file=sys.stderr)
        return 1

    settings = _prepare_topics(settings)
    port = settings.metrics_port if ns.metrics_port is None else ns.metrics_port
    metrics = StageMetrics(port)
    try:
        app = build_app(settings, metrics)
        worker = Worker(app, loglevel=settings.log_level.lower(), quiet=True, override_logging=False)
        worker.execute_from_commandline()  # returns or raises SystemExit when the worker stops
    except SystemExit as e:
        code = e.code
        return int(code) if isinstance(code, int) else (0 if code is None else 1)
    finally:
        metrics.ready(False)
        metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
