"""Per-user admission at the stage (streams/stage/admission.py), without Kafka: the bucket's rules, a flood
answered with rate_limited while a heavy burst passes, and the same outcomes when records are re-read."""

from __future__ import annotations

import json
from typing import Any

from schemas import Rejection, Segment, decode_segment_event
from streams.settings import Settings
from streams.stage.admission import Admission, Bucket, bucket_key, decode_bucket, encode_bucket
from streams.stage.core import Outcome, StageCore
from streams.stage.pieces import OpenRequest, decode_open

NOW_MS = 1_700_000_000_000


def test_a_burst_is_admitted_then_the_rate_and_refusals_leave_the_bucket_as_they_found_it() -> None:
    a = Admission(per_s=10.0, burst=5)
    b: Bucket | None = None
    got = []
    for off in range(8):  # 8 at the same instant: the burst of 5 passes
        v = a.decide(b, timestamp_ms=NOW_MS, partition=0, offset=off)
        b = v.bucket or b
        got.append(v.admitted)
    assert got == [True] * 5 + [False] * 3
    assert b is not None and b.tokens == 0.0 and b.offset == 7
    refused = a.decide(b, timestamp_ms=NOW_MS + 50, partition=0, offset=8)  # half a token back
    assert not refused.admitted and abs(refused.retry_after_s - 0.05) < 1e-9
    assert refused.bucket is not None
    v = a.decide(refused.bucket, timestamp_ms=NOW_MS + 100, partition=0, offset=9)  # one token in 100 ms
    assert v.admitted
    assert v.bucket is not None
    full = a.decide(v.bucket, timestamp_ms=NOW_MS + 3_600_000, partition=0, offset=10)  # never above the burst
    assert full.bucket is not None and full.bucket.tokens == 4.0


def test_time_comes_from_the_records_and_never_runs_backwards() -> None:
    a = Admission(per_s=1.0, burst=1)
    v1 = a.decide(None, timestamp_ms=NOW_MS, partition=0, offset=0)
    assert v1.admitted and v1.bucket is not None
    back = a.decide(v1.bucket, timestamp_ms=NOW_MS - 10_000, partition=0, offset=1)  # an older timestamp adds nothing
    assert not back.admitted and back.bucket is not None and back.bucket.at_ms == NOW_MS
    none = a.decide(back.bucket, timestamp_ms=None, partition=0, offset=2)  # no timestamp: no refill
    assert not none.admitted
    assert none.bucket is not None
    assert a.decide(none.bucket, timestamp_ms=NOW_MS + 1000, partition=0, offset=3).admitted


def test_a_record_decided_before_a_crash_is_refused_again_without_touching_the_bucket() -> None:
    a = Admission(per_s=1.0, burst=1)
    b = Bucket(tokens=1.0, at_ms=NOW_MS, partition=3, offset=40)
    again = a.decide(b, timestamp_ms=NOW_MS - 5, partition=3, offset=40)  # read again: no later than the bucket
    assert not again.admitted and again.replayed and again.bucket is None
    other = a.decide(b, timestamp_ms=NOW_MS, partition=4, offset=40)  # another partition's offsets do not compare
    assert other.admitted


def test_records_decided_after_a_hole_leave_the_hole_to_be_decided_when_it_is_read() -> None:
    a = Admission(per_s=1.0, burst=100)
    b = a.decide(None, timestamp_ms=NOW_MS, partition=2, offset=24).bucket
    assert b is not None and b.offset == 24
    for off in range(45, 60):  # faust handed 45.. and never 25..44: decided, the bucket's offset stays
        v = a.decide(b, timestamp_ms=NOW_MS + 10, partition=2, offset=off, in_order=False)
        assert v.admitted and v.bucket is not None and v.bucket.offset == 24
        b = v.bucket
    assert abs(b.tokens - 84.01) < 1e-9  # 99 after offset 24, 0.01 back in 10 ms, 15 taken
    hole = a.decide(b, timestamp_ms=NOW_MS + 5, partition=2, offset=30)  # read at last, in order
    assert hole.admitted and not hole.replayed and hole.bucket is not None and hole.bucket.offset == 30
    first = a.decide(None, timestamp_ms=NOW_MS, partition=2, offset=50, in_order=False)  # nothing in order yet
    assert first.bucket is not None and first.bucket.offset == -1
    assert a.decide(first.bucket, timestamp_ms=NOW_MS, partition=2, offset=0).admitted


def test_a_hole_read_at_last_is_served_not_refused_as_if_decided_before() -> None:
    """Seen on CI: a stage restarted after a SIGKILL was handed offsets 45.. of a partition and never 25..44;
    it handled them (the restart that would re-read the hole had just happened), the bucket's offset went to
    the last of them, and when 25..44 were read after the next restart they were taken for refusals made
    before the crash: 14 valid requests answered rate_limited."""
    s = Stage(user_requests_per_s=2.0, user_request_burst=1000)
    for off in range(25):
        assert code(s.send(off, whole(off), ts_ms=NOW_MS + off)) == "ok"
    for off in range(45, 60):
        assert code(s.send(off, whole(off), ts_ms=NOW_MS + off, in_order=False)) == "ok"
    # restarted: read again from the committed offset 25, in order now
    again = [code(s.send(off, whole(off), ts_ms=NOW_MS + off)) for off in range(25, 60)]
    assert again == ["ok"] * 20 + ["duplicate"] * 15


def test_a_topic_made_again_starts_its_offsets_over_and_its_users_are_not_refused_for_ever() -> None:
    a = Admission(per_s=1.0, burst=1)
    b = Bucket(tokens=0.0, at_ms=NOW_MS, partition=0, offset=5_000)  # left in the table by the old topic
    fresh = a.decide(b, timestamp_ms=NOW_MS + 3_600_000, partition=0, offset=0)
    assert fresh.admitted and not fresh.replayed and fresh.bucket is not None and fresh.bucket.offset == 0
    replay = a.decide(fresh.bucket, timestamp_ms=NOW_MS + 3_600_000, partition=0, offset=0)
    assert not replay.admitted and replay.replayed  # decided now (the stage finds an admitted one seen first)


def test_zero_rate_admits_everything_and_buckets_round_trip() -> None:
    assert Admission(per_s=0.0, burst=1).decide(None, timestamp_ms=None, partition=0, offset=0) == \
        Admission(per_s=0.0, burst=1).decide(None, timestamp_ms=None, partition=0, offset=0)
    assert Admission(per_s=0.0, burst=1).decide(None, timestamp_ms=None, partition=0, offset=0).admitted
    b = Bucket(tokens=0.1 + 0.2, at_ms=NOW_MS, partition=1, offset=7)
    assert decode_bucket(encode_bucket(b)) == b  # exact: a bucket read back decides as the one in memory
    assert decode_bucket(b"junk") is None and decode_bucket(None) is None
    assert bucket_key(b"u", 1) != bucket_key(b"u", 2)


class Stage:
    """StageCore with dicts for its three tables, as the faust app keeps them; ``offset`` per record."""

    def __init__(self, **changes: Any) -> None:
        s = Settings().replace(dedup_window_s=100, max_open_streams_per_user=50, **changes)
        self.now = NOW_MS / 1000
        self.core = StageCore(s.stage, s.kafka, s.engine, voices=("heart",), clock=lambda: self.now)
        self.seen: dict[bytes, dict[str, float]] = {}
        self.open: dict[tuple[bytes, str], bytes] = {}
        self.rate: dict[bytes, bytes] = {}

    def send(self, offset: int, body: dict[str, Any], key: bytes = b"flooder", ts_ms: int = NOW_MS,
             in_order: bool = True) -> Outcome:
        stage = self

        class Opened:
            def get(self, rid: str) -> OpenRequest | None:
                raw = stage.open.get((key, rid))
                return decode_open(raw) if raw else None

            def user_open(self) -> int:
                return sum(1 for k, _ in stage.open if k == key)

            def all_open(self) -> int:
                return len(stage.open)

        class Rate:
            def __init__(self) -> None:
                self.in_order = in_order

            def get(self) -> Bucket | None:
                return decode_bucket(stage.rate.get(bucket_key(key, 0)))

        out = self.core.handle(key, json.dumps(body).encode(), partition=0, offset=offset, timestamp_ms=ts_ms,
                               seen=self.seen.setdefault(key, {}), opened=Opened(), rate=Rate())
        if out.remember:
            self.seen[key][out.remember] = self.now
        if out.open is not None:
            rid, state = out.open
            if state is None:
                self.open.pop((key, rid), None)
            else:
                self.open[(key, rid)] = state
        if out.rate is not None:
            self.rate[bucket_key(key, 0)] = out.rate
        return out


def whole(i: int, user: str = "flooder") -> dict[str, Any]:
    return {"request_id": f"{user}-{i}", "user_id": user, "text": "Hello."}


def code(out: Outcome) -> str:
    if out.kind == "segments":
        return "ok"
    if out.kind == "duplicate":
        return "duplicate"
    [rej] = [decode_segment_event(r.value) for r in out.records]
    assert isinstance(rej, Rejection)
    return rej.error.code


def test_a_flood_of_whole_requests_is_refused_past_the_burst_and_others_are_untouched() -> None:
    s = Stage(user_requests_per_s=2.0, user_request_burst=50)
    codes = [code(s.send(i, whole(i))) for i in range(300)]  # published in one instant
    assert codes == ["ok"] * 50 + ["rate_limited"] * 250
    refused = s.send(300, whole(300))
    [rej] = [decode_segment_event(r.value) for r in refused.records]
    assert isinstance(rej, Rejection) and "TTS_USER_REQUESTS_PER_S" in rej.error.message
    assert refused.remember is None and refused.open is None  # no dedup write per refused request
    assert code(s.send(301, whole(1, "calm"), key=b"calm")) == "ok"  # another user has its own bucket
    assert code(s.send(302, whole(302), ts_ms=NOW_MS + 500)) == "ok"  # a token back after 0.5 s at 2/s
    assert code(s.send(303, whole(0))) == "duplicate"  # an admitted id repeated: the dedup table, as before


def test_a_heavy_user_with_the_defaults_never_hits_the_limit() -> None:
    s = Stage()  # the documented defaults
    assert all(code(s.send(i, whole(i))) == "ok" for i in range(50))  # 50 in one burst
    # then 20 a second for a minute
    assert all(code(s.send(50 + i, whole(50 + i), ts_ms=NOW_MS + 50 * (i + 1))) == "ok" for i in range(1200))


def test_opening_streams_takes_tokens_and_later_pieces_of_an_admitted_one_do_not() -> None:
    s = Stage(user_requests_per_s=1.0, user_request_burst=2)
    first = [s.send(i, {"request_id": f"s{i}", "user_id": "flooder", "text": "Hi ", "seq": 0}) for i in range(3)]
    assert [o.kind for o in first] == ["piece", "piece", "failed"] and code(first[2]) == "rate_limited"
    more = [s.send(10 + i, {"request_id": "s0", "user_id": "flooder", "text": "there ", "seq": 1 + i})
            for i in range(20)]
    assert all(o.kind == "piece" and o.rate is None for o in more)  # pieces of an open request are not new requests
    closed = s.send(40, {"request_id": "s1", "user_id": "flooder", "text": "end.", "seq": 1, "final": True})
    assert closed.kind == "closed"
    assert any(isinstance(decode_segment_event(r.value), Segment) for r in closed.records)


def test_records_re_read_after_a_crash_get_the_same_answers() -> None:
    """The stage's tables are written before its input offset is committed, so a restarted stage re-reads
    records its tables already decided: each gets the answer it got the first time."""
    records = [(i, whole(i), NOW_MS + 100 * i) for i in range(40)]
    first = Stage(user_requests_per_s=2.0, user_request_burst=10)
    answers = [code(first.send(off, body, ts_ms=ts)) for off, body, ts in records]
    assert answers.count("rate_limited") > 0 and answers.count("ok") > 10
    # crashed after offset 39 was written to the tables, committed only up to 20: re-read 20.. from the tables
    again = [code(first.send(off, body, ts_ms=ts)) for off, body, ts in records[20:]]
    assert again == ["duplicate" if a == "ok" else a for a in answers[20:]]  # admitted: seen; refused: refused
    # and the records after the crash go on exactly as without one
    fresh = Stage(user_requests_per_s=2.0, user_request_burst=10)
    tail = [(40 + i, whole(40 + i), NOW_MS + 4000 + 30 * i) for i in range(30)]
    for off, body, ts in records:
        fresh.send(off, body, ts_ms=ts)
    assert [code(first.send(*r[:2], ts_ms=r[2])) for r in tail] == [code(fresh.send(*r[:2], ts_ms=r[2])) for r in tail]
