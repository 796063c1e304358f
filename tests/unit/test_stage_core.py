# ruff: noqa: RUF001 - full-width input is the point
"""The stage's per-record logic without Kafka: what each input turns into."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

import streams.stage.core as stage_mod
import streams.stage.patches as patches_mod
from schemas import Rejection, decode_dead_letter, decode_segment, decode_segment_event, request_hash, segment_hash
from streams.settings import Settings
from streams.stage.core import DEAD_LETTER_ID_HEADER, Outcome, StageCore, backend_voices
from streams.stage.dedup import SeenIndex, UserSeen
from streams.stage.text import normalize, split_segments

S = Settings().replace(max_segment_chars=40, max_text_chars=500, dedup_window_s=100)
NOW = 1_700_000_000.0


def core(**changes: Any) -> StageCore:
    s = S.replace(**changes) if changes else S
    return StageCore(s.stage, s.kafka, s.engine, voices=("heart",), clock=lambda: NOW)


def req(**fields: Any) -> bytes:
    body = {"request_id": "r-1", "user_id": "alice", "text": "Hello there. How are you today? 你好。"}
    body.update(fields)
    return json.dumps({k: v for k, v in body.items() if v is not ...}).encode()


def run(c: StageCore, value: bytes | None, key: bytes | None = b"alice", seen: dict[str, float] | None = None,
        ts: int | None = 1_699_999_999_000) -> Outcome:
    return c.handle(key, value, partition=3, offset=42, timestamp_ms=ts, seen=seen or {})


def test_good_request_becomes_ordered_segments_with_parts_on_the_last() -> None:
    # a voice that speaks both scripts keeps the Chinese sentence (heart would cut it: see test_languages)
    out = run(StageCore(S.stage, S.kafka, S.engine, voices=("chattts",), clock=lambda: NOW), req(text="Ｈｅｌｌｏ there.\u200b How are you today? 你好。", speed=1.5, sample_rate=22050))
    assert out.kind == "segments" and out.remember == "r-1"
    segs = [decode_segment(r.value) for r in out.records]
    assert {r.topic for r in out.records} == {S.kafka.topic_segments}
    assert {r.key for r in out.records} == {b"alice"}
    expected = split_segments(normalize("Ｈｅｌｌｏ there.\u200b How are you today? 你好。"), 40)
    assert [s.text for s in segs] == expected == ["Hello there.", "How are you today?", "你好。"]
    assert [s.seq for s in segs] == [0, 1, 2] and {s.total for s in segs} == {3}
    hashes = [segment_hash(t, voice="chattts", model=S.engine.backend, model_version=S.engine.model_version, speed=1.5,
                           sample_rate=22050, format="wav") for t in expected]
    assert [s.hash for s in segs] == hashes
    assert {s.request_hash for s in segs} == {request_hash(hashes, format="wav")}
    assert segs[-1].parts == hashes and all(s.parts is None for s in segs[:-1])
    assert all(s.voice == "chattts" and s.speed == 1.5 and s.sample_rate == 22050 for s in segs)
    assert segs[0].enqueued_at is not None and segs[0].enqueued_at.timestamp() == pytest.approx(1_699_999_999.0)


def test_stream_and_priority_travel_from_the_request_to_every_segment() -> None:
    plain = [decode_segment(r.value) for r in run(core(), req(text="One. Two. Three.")).records]
    assert {(s.stream, s.priority) for s in plain} == {(False, "interactive")}  # v1 requests without the fields
    asked = [decode_segment(r.value) for r in run(core(), req(text="One. Two. Three.", stream=True,
                                                              priority="bulk")).records]
    assert {(s.stream, s.priority) for s in asked} == {(True, "bulk")}
    bad = decode_segment_event(run(core(), req(priority="urgent")).records[0].value)
    assert isinstance(bad, Rejection) and bad.error.code == "invalid_field" and "priority" in bad.error.message


def test_long_text_respects_the_segment_limit() -> None:
    text = "This sentence is rather long, it has clauses, and it keeps going on and on. " * 5
    segs = [decode_segment(r.value) for r in run(core(), req(text=text)).records]
    assert all(len(s.text) <= 40 for s in segs) and len(segs) > 5
    assert "".join(s.text for s in segs).replace(" ", "") == normalize(text).replace(" ", "")


def test_hash_depends_on_voice_speed_format_and_model_version() -> None:
    base = decode_segment(run(core(), req(text="Hi.")).records[0].value).hash
    assert decode_segment(run(core(), req(text="Hi.", speed=2.0)).records[0].value).hash != base
    assert decode_segment(run(core(), req(text="Hi.", format="flac")).records[0].value).hash != base
    assert decode_segment(run(core(model_version="v2"), req(text="Hi.")).records[0].value).hash != base
    assert decode_segment(run(core(), req(text="  Hi. ")).records[0].value).hash == base  # normalized first


def rejection(value: bytes) -> Rejection:
    r = decode_segment_event(value)
    assert isinstance(r, Rejection)
    return r


@pytest.mark.parametrize(
    ("value", "code", "field"),
    [
        (b'{"request_id": "r-1", "user_id": "alice", "text": NaN}', "invalid_json", None),
        (req(speed=10), "invalid_field", "speed"),
        (req(text=...), "invalid_field", "text"),
        (req(text=12), "invalid_field", "text"),
        (req(sample_rate=5), "invalid_field", "sample_rate"),
        (req(text="\u200b \ufeff\t"), "empty_text", None),
        (req(text="x" * 501), "text_too_long", None),
        (req(voice="nobody"), "unknown_voice", None),
        (req(format="mp3"), "unsupported_format", None),
    ],
)
def test_bad_content_gets_one_rejection_on_the_segments_topic_with_a_stable_code(
        value: bytes, code: str, field: str | None) -> None:
    out = run(core(), value)
    assert out.kind == "failed" and out.code == code and out.remember == "r-1"
    (rec,) = out.records
    # never tts.completed: only the worker's transaction writes answers
    assert rec.topic == S.kafka.topic_segments and rec.key == b"alice" and rec.partition is None
    r = rejection(rec.value)
    assert r.type == "rejection" and r.request_id == "r-1" and r.user_id == "alice"
    assert (r.source_partition, r.source_offset) == (3, 42)
    assert r.error.code == code and r.error.message
    assert r.enqueued_at is not None and r.enqueued_at.timestamp() == pytest.approx(1_699_999_999.0)
    if field is not None:
        assert r.error.message.startswith(field + ":")


def test_rejection_is_keyed_by_the_raw_key_when_user_id_is_unreadable() -> None:
    out = run(core(), req(user_id=123), key=b"k-raw")
    (rec,) = out.records
    assert out.code == "invalid_field" and rec.key == b"k-raw"
    assert rejection(rec.value).user_id == "k-raw"


def test_rejection_without_a_key_goes_to_the_request_partition_number() -> None:
    (rec,) = run(core(), req(text=""), key=None).records
    assert rec.key == b"alice" and rec.partition is None  # by the user id it names
    (rec,) = run(core(), req(text="", user_id=5), key=None).records
    assert rec.key is None and rec.partition == 3  # nothing to key by: the source partition


def test_text_length_is_checked_after_normalization() -> None:
    assert run(core(), req(text="a" + " " * 600 + "b")).kind == "segments"  # 3 chars once folded


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty_value"),
        (b"", "empty_value"),
        (b"not json at all", "invalid_json"),
        (b"\xff\xfe\x00", "invalid_json"),
        (b"[1, 2]", "invalid_json"),
        (b'{"user_id": "alice", "text": "hi"}', "no_request_id"),
        (b'{"request_id": "has spaces!", "text": "hi"}', "no_request_id"),
        (b'{"request_id": 7}', "no_request_id"),
    ],
)
def test_unreadable_request_id_goes_to_the_dead_letter_topic(value: bytes | None, reason: str) -> None:
    out = run(core(), value, key=b"alice")
    assert out.kind == "dead_letter" and out.code == reason and out.remember is None
    (rec,) = out.records
    assert rec.topic == S.kafka.topic_dlq and rec.key == b"alice"
    dl = decode_dead_letter(rec.value)
    assert dl.reason == reason and dl.source_topic == S.kafka.topic_requests
    assert (dl.source_partition, dl.source_offset) == (3, 42)
    assert base64.b64decode(dl.value_b64) == (value or b"")
    assert dl.key_b64 is not None and base64.b64decode(dl.key_b64) == b"alice"
    assert dl.id == f"{S.kafka.topic_requests}:3:42" and rec.headers == ((DEAD_LETTER_ID_HEADER, dl.id.encode()),)


def test_a_dead_letter_sent_again_carries_the_same_identity() -> None:
    first = decode_dead_letter(run(core(), b"garbage").records[0].value)
    again = decode_dead_letter(run(core(), b"garbage").records[0].value)
    other = decode_dead_letter(core().handle(b"alice", b"garbage", partition=3, offset=43, timestamp_ms=None,
                                             seen={}).records[0].value)
    assert first.id == again.id != other.id


def test_dead_letter_without_key() -> None:
    out = run(core(), b"garbage", key=None)
    assert out.records[0].key is None and decode_dead_letter(out.records[0].value).key_b64 is None


def table_with(*entries: tuple[bytes, str, float]) -> dict[bytes, bytes]:
    index = SeenIndex(S.stage.dedup_window_s)
    return dict(index.entry(k, rid, t) for k, rid, t in entries)


def seen_view(table: dict[bytes, bytes], key: bytes = b"alice", now: float = NOW) -> UserSeen:
    return UserSeen(SeenIndex(S.stage.dedup_window_s), table.get, key, now)


def test_repeated_id_within_the_window_is_dropped_and_after_it_served() -> None:
    c = core()
    table = table_with((b"alice", "r-1", NOW - 50))
    assert run(c, req(), seen=seen_view(table)).kind == "duplicate"
    assert run(c, req(request_id="r-2"), seen=seen_view(table)).kind == "segments"
    assert run(c, req(), key=b"bob", seen=seen_view(table, b"bob")).kind == "segments"  # ids are per user
    assert run(c, req(), seen=seen_view(table_with((b"alice", "r-1", NOW - 101)))).kind == "segments"


def test_an_id_seen_in_the_previous_bucket_is_still_within_the_window() -> None:
    index = SeenIndex(100)
    t0 = 1_000_099.0  # the last second of a bucket
    table = dict([index.entry(b"u", "r", t0)])
    assert index.bucket(t0 + 2) == index.bucket(t0) + 1
    assert index.first_seen(table.get, b"u", "r", t0 + 2) == pytest.approx(t0)
    assert index.first_seen(table.get, b"u", "r", t0 + 99) == pytest.approx(t0)
    assert index.first_seen(table.get, b"u", "r", t0 + 100) is None


def test_entries_expire_a_whole_bucket_at_a_time() -> None:
    index = SeenIndex(100)
    k_old, _ = index.entry(b"u", "a", 1_000.0)   # bucket 10
    k_prev, _ = index.entry(b"u", "b", 1_150.0)  # bucket 11
    k_now, _ = index.entry(b"u", "c", 1_250.0)   # bucket 12
    assert [index.expired(k, 1_250.0) for k in (k_old, k_prev, k_now)] == [True, False, False]
    assert index.expired(b"not-a-key", 1_250.0)
    # keys sort by bucket (RocksDB keeps them sorted: the sweep stops at the first live key)
    assert sorted([k_now, k_old, k_prev]) == [k_old, k_prev, k_now]


def test_keys_of_any_user_key_and_request_id_are_distinct() -> None:
    index = SeenIndex(100)
    keys = {index.key(u, r, 7) for u in (b"", b"a", b"a\x00b", b"a\x00") for r in ("b", "x", "b.x")}
    assert len(keys) == 12
    assert all(index.bucket_of(k) == 7 for k in keys)


def test_a_users_entries_cost_the_same_whatever_their_history() -> None:
    index = SeenIndex(86_400)
    sizes = {len(b"".join(index.entry(b"service-account", f"{'x' * 120}-{i}", NOW))) for i in range(10_000, 99_999, 997)}
    assert max(sizes) - min(sizes) <= 1  # one entry per id, never a growing map


def test_a_repeated_bad_request_is_answered_once() -> None:
    c = core()
    first = run(c, req(text=""))
    assert first.kind == "failed" and first.remember == "r-1"
    assert run(c, req(text=""), seen=seen_view(table_with((b"alice", "r-1", NOW)))).kind == "duplicate"


def test_an_unexpected_error_is_answered_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(text: str, max_chars: int) -> list[str]:
        raise RuntimeError("splitter bug")

    monkeypatch.setattr(stage_mod, "split_segments", boom)
    out = run(core(), req())
    assert out.kind == "failed" and out.code == "internal_error"
    assert "splitter bug" in rejection(out.records[0].value).error.message


def test_default_voice_and_backend_voices() -> None:
    assert backend_voices("hibari") == ("heart",)
    assert backend_voices("piper") == ("joe",)
    segs = run(StageCore(S.stage, S.kafka, S.engine, voices=backend_voices("hibari"), clock=lambda: NOW), req()).records
    assert decode_segment(segs[0].value).voice == "heart"
    c = StageCore(S.stage, S.kafka, S.replace(voice="joe").engine, voices=None, clock=lambda: NOW)
    assert decode_segment(run(c, req(voice="anything")).records[0].value).voice == "anything"  # not checked


def test_aiokafka_default_partitioner_is_javas_murmur2() -> None:
    """faust produces through aiokafka's default partitioner; it must be Java's murmur2
    (the vectors are Kafka's own UtilsTest), as confluent-kafka's murmur2_random is."""
    from aiokafka.partitioner import DefaultPartitioner, murmur2

    java = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
            b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    for key, want in java.items():
        assert murmur2(key) == want & 0xFFFFFFFF
        assert DefaultPartitioner()(key, list(range(4)), list(range(4))) == (want & 0x7FFFFFFF) % 4


class _Msg:
    def __init__(self, topic: str, offset: int) -> None:
        self.topic, self.partition, self.offset, self.acked = topic, 0, offset, False


class _Consumer:
    """What faust's consumer does with an ack: the offset becomes committable."""

    def __init__(self) -> None:
        self.committable: list[int] = []
        self._unacked_messages: set[_Msg] = set()
        self._acked: dict[Any, list[int]] = {}
        self._committed_offset: dict[Any, int | None] = {}
        self._gap: dict[Any, list[Any]] = {}

    def _new_offset(self, tp: Any) -> int | None:
        return max(self._acked[tp]) + 1

    def ack(self, message: _Msg) -> bool:
        message.acked = True
        self.committable.append(message.offset)
        return True


def test_an_input_record_the_agent_never_processed_is_not_made_committable_by_its_ack() -> None:
    """faust acks events it skips in a rebalance; those offsets must not be committed."""
    import weakref

    c = _Consumer()
    processed: weakref.WeakSet[Any] = weakref.WeakSet()
    patches_mod.guard_consumer_acks(c, "tts.requests", processed)
    skipped, done, other = _Msg("tts.requests", 67), _Msg("tts.requests", 68), _Msg("changelog", 5)
    c._unacked_messages |= {skipped, done}
    processed.add(done)
    assert c.ack(skipped) is False  # type: ignore[attr-defined]
    assert skipped.acked and skipped not in c._unacked_messages  # faust's wait_empty won't wait for it
    assert c.ack(done) is True and c.ack(other) is True  # type: ignore[attr-defined]
    assert c.committable == [68, 5]


def test_a_commit_never_starts_past_the_committed_offset() -> None:
    """faust would commit acked 2, 3 over an unprocessed offset 1 (committed 1)."""
    import weakref
    from collections import namedtuple

    c = _Consumer()
    patches_mod.guard_consumer_acks(c, "tts.requests", weakref.WeakSet())
    tp = namedtuple("TP", "topic partition")("tts.requests", 0)  # type: ignore[call-arg]
    c._acked[tp], c._committed_offset[tp], c._gap[tp] = [2, 3], 1, []
    assert c._new_offset(tp) is None  # type: ignore[operator]
    c._acked[tp] = [1, 2, 3]
    assert c._new_offset(tp) == 4  # type: ignore[operator]
    c._acked[tp], c._committed_offset[tp] = [2, 3], 0
    assert c._new_offset(tp) is None  # type: ignore[operator]


def test_a_dead_letter_of_a_huge_record_stays_far_below_the_broker_limit() -> None:
    import hashlib

    value = b"\xff" * 900_000  # not JSON, close to Kafka's 1 MB record limit
    key = b"k" * 100_000
    (rec,) = run(core(), value, key=key).records
    dl = decode_dead_letter(rec.value)
    assert len(rec.value) < 400_000  # base64 of the whole would be 1.2 MB: that send fails forever
    assert dl.truncated and dl.value_bytes == 900_000 and dl.value_sha256 == hashlib.sha256(value).hexdigest()
    assert base64.b64decode(dl.value_b64) == value[:len(base64.b64decode(dl.value_b64))]
    assert dl.key_b64 is not None and len(base64.b64decode(dl.key_b64)) < len(key)
    small = decode_dead_letter(run(core(), b"garbage").records[0].value)
    assert not small.truncated and base64.b64decode(small.value_b64) == b"garbage" and small.value_bytes == 7


def test_a_rejection_keyed_by_a_huge_key_names_a_bounded_user_id() -> None:
    (rec,) = run(core(), req(text="", user_id=5), key=b"u" * 200_000).records
    assert len(rejection(rec.value).user_id) <= 256 and rec.key == b"u" * 200_000


def test_a_partition_handed_out_goes_to_the_back_of_the_fetch_line() -> None:
    """patches.take_turns: a flooded partition with records left waits for the others' turn."""
    from collections import OrderedDict

    fetched = OrderedDict([("p1", "9,800 left"), ("p0", "3 left"), ("p2", "1 left")])
    patches_mod.take_turns(fetched, {"p1": ["200 records"]})
    assert list(fetched) == ["p0", "p2", "p1"]
    patches_mod.take_turns(fetched, {"p0": ["3"], "p2": ["1"]})  # (drained ones are gone from it already)
    assert list(fetched) == ["p1", "p0", "p2"]
    patches_mod.take_turns(fetched, {})
    assert list(fetched) == ["p1", "p0", "p2"]


def test_a_partition_held_back_by_its_full_queue_is_asked_for_again_soon() -> None:
    """patches.fetch_timeout: while faust holds a partition back (its queue full), a fetch waits briefly."""
    from streams.stage import patches as patches_mod

    assert patches_mod.fetch_timeout(1.0, set(), wait_s=0.003) == 1.0
    assert patches_mod.fetch_timeout(None, None, wait_s=0.003) is None
    assert patches_mod.fetch_timeout(1.0, {"p0"}, wait_s=0.003) == 0.003
    assert patches_mod.fetch_timeout(0.0, {"p0"}, wait_s=0.003) == 0.0  # never longer than asked


def test_faust_reads_no_read_offset_for_a_partition_being_fetched_again() -> None:
    """patches.hold_read_offsets: faust's fetch loop drops records below a partition's read offset and counts
    jumps over it as done; while the partition is fetched again from a hole, it must do neither."""
    from collections import defaultdict
    from types import SimpleNamespace

    from faust.types import TP

    sought: dict[int, int] = {}
    c = SimpleNamespace(_read_offset=defaultdict(lambda: None))
    held, other, foreign = TP("tts.requests", 3), TP("tts.requests", 2), TP("changelog", 3)
    c._read_offset[held] = 60  # raised by records fetched past the hole
    c._read_offset[foreign] = 7
    patches_mod.hold_read_offsets(c, "tts.requests", sought.get)
    assert c._read_offset[held] == 60 and c._read_offset[other] is None
    sought[3] = 25  # a seek back to 25
    assert c._read_offset[held] is None and c._read_offset[foreign] == 7
    c._read_offset[held] = 25  # what it hands over meanwhile is recorded
    c._read_offset[held] = 26
    del sought[3]  # offset 25 reached the agent
    assert c._read_offset[held] == 26 and c._read_offset[foreign] == 7


def test_offsets_passed_over_by_a_read_committed_fetch_cover_a_jump_only_when_every_offset_is_noted() -> None:
    """patches.PassedOffsets: aborted records and markers are no hole; anything else in a jump is one."""
    passed = patches_mod.PassedOffsets(keep=4)
    passed.note(0, 1, 2)  # a commit marker
    passed.note(0, 2, 8)  # an aborted transaction and its marker
    passed.note(0, 5, 5)  # empty: ignored
    assert passed.covered(0, 1, 8) and passed.covered(0, 3, 6)
    assert not passed.covered(0, 1, 9) and not passed.covered(0, 0, 2) and not passed.covered(1, 1, 2)
    passed.note(0, 10, 12)
    assert not passed.covered(0, 7, 11)  # 8 and 9 were records
    for i in range(4):
        passed.note(0, 20 + i, 21 + i)
    assert not passed.covered(0, 1, 2) and passed.covered(0, 20, 24)  # only the last ``keep`` ranges are kept
