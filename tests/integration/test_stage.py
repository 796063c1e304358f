# ruff: noqa: RUF001 - full-width and CJK input is the point
"""The stage on the real broker: two ``ttsflow stage`` processes, four partitions.

What a user would notice: every user's segments arrive in order and in the partition
of the user's requests; every bad input is answered (dead letter, or a rejection on the
segments topic with the right code, which a worker turns into the failed completion; the
stage itself never writes completions); a repeated request id yields one set of segments;
a stage SIGKILLed mid-run and restarted loses no request.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from schemas import Rejection, decode_dead_letter, decode_segment, decode_segment_event
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from streams.stage.core import DEAD_LETTER_ID_HEADER
from streams.stage.text import normalize, split_segments
from tests.integration.conftest import drain_topic, producer_conf

pytestmark = pytest.mark.integration

_SENTENCES = [
    "Dr. Smith paid $3.14 for the tea.", "今天天气很好，我们去公园散步吧！", "Is it raining again?",
    "The U.S. team won, e.g. in the final.", "我们明天见。", "Wait... what happened next?",
    "Ｆｕｌｌ－ｗｉｄｔｈ text is folded.", "He said: come here, please; now.",
]


def _text(user: int, n: int) -> str:
    picks = [_SENTENCES[(user * 7 + n * 3 + i) % len(_SENTENCES)] for i in range(1 + (user + n) % 4)]
    return f"Request {n} of user {user}. " + " ".join(picks)


def _expected(text: str, s: Settings) -> list[str]:
    return split_segments(normalize(text), s.stage.max_segment_chars)


@pytest.fixture
def stages(settings: Settings, tmp_path: Path) -> Iterator[tuple[Supervisor, Settings]]:
    # the stage's default guarantee (at_least_once; see streams/stage/ for why); a backend
    # whose voice speaks Chinese and English, so the mixed texts are split, not refused or cut
    # (the stage loads no model; language checks: tests/integration/test_languages_pipeline.py)
    s = settings.replace(home=str(tmp_path / "home"), max_segment_chars=60,
                         max_text_chars=2000, log_level="INFO", backend="chattts", voice="")
    with Supervisor(tmp_path / "logs") as sup:
        for name in ("stage-a", "stage-b"):
            sup.stage(name, s)
        for name in ("stage-a", "stage-b"):
            sup.wait_ready(name, timeout=90)
        sup.wait_group(s, s.stage.stage_app_id, 2, timeout=90)
        yield sup, s


def _produce(s: Settings, records: list[tuple[bytes | None, bytes | None]]) -> dict[bytes | None, set[int]]:
    """Publish in order (murmur2, like every ttsflow producer); key -> partitions used."""
    parts: dict[bytes | None, set[int]] = defaultdict(set)
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            parts[msg.key()].add(msg.partition())

    p = Producer(producer_conf(s, **{"enable.idempotence": True}))
    for key, value in records:
        p.produce(s.kafka.topic_requests, key=key, value=value, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0 and not errors
    return parts


def _req(rid: str, user: str, text: str, **extra: Any) -> bytes:
    return json.dumps({"request_id": rid, "user_id": user, "text": text, **extra}).encode()


def test_two_stages_keep_order_answer_bad_input_and_drop_duplicates(stages: tuple[Supervisor, Settings]) -> None:
    sup, s = stages
    users, per_user = 24, 5
    good: dict[str, tuple[str, str]] = {}  # rid -> (user, text)
    records: list[tuple[bytes | None, bytes | None]] = []
    for n in range(per_user):
        for u in range(users):
            rid, user, text = f"u{u}-r{n}", f"user-{u}", _text(u, n)
            good[rid] = (user, text)
            records.append((user.encode(), _req(rid, user, text)))
    # bad inputs: (key, value) -> what must answer them
    bad_failed = {
        "bad-empty": ("user-1", _req("bad-empty", "user-1", "\u200b \u3000"), "empty_text"),
        "bad-long": ("user-2", _req("bad-long", "user-2", "x" * 2001), "text_too_long"),
        "bad-voice": ("user-3", _req("bad-voice", "user-3", "Hello.", voice="nobody"), "unknown_voice"),
        "bad-format": ("user-4", _req("bad-format", "user-4", "Hello.", format="mp3"), "unsupported_format"),
        "bad-speed": ("user-5", _req("bad-speed", "user-5", "Hello.", speed=99), "invalid_field"),
        "bad-nan": ("user-6", b'{"request_id": "bad-nan", "user_id": "user-6", "text": NaN}', "invalid_json"),
    }
    bad_dlq = [(b"user-7", b"this is not json"), (b"user-8", b'{"text": "no id"}'), (b"user-9", None),
               (None, b"[1, 2, 3]")]
    for _, (user, value, _) in bad_failed.items():
        records.append((user.encode(), value))
    records += bad_dlq
    # a client retrying: the same ids again, some with different text (must still be dropped)
    repeats = [f"u{u}-r{n}" for u in range(0, users, 3) for n in (0, 2)]
    for rid in repeats:
        user, text = good[rid]
        records.append((user.encode(), _req(rid, user, text if rid.endswith("0") else "Changed text.")))
    records.append((b"user-1", bad_failed["bad-empty"][1]))  # a repeated bad request: answered once

    request_parts = _produce(s, records)
    want = sum(len(_expected(t, s)) for _, t in good.values())
    out = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=want + len(bad_failed), timeout=90)
    dlq = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_dlq, count=len(bad_dlq), timeout=30)
    sup.check_alive()
    assert drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_completed, timeout=3) == []  # only workers answer
    decoded = [(m, decode_segment_event(m.value())) for m in out]
    segs = [m for m, e in decoded if not isinstance(e, Rejection)]
    rejections = [(m, e) for m, e in decoded if isinstance(e, Rejection)]

    # 1. one set of segments per request, nothing lost or repeated, texts as split
    events = [(m.partition(), m.offset(), m.key(), decode_segment(m.value())) for m in segs]
    ids = Counter((e.request_id, e.seq) for *_, e in events)
    assert len(events) == want, f"{len(events)} segments, expected {want}"
    assert max(ids.values()) == 1
    by_req: dict[str, list[Any]] = defaultdict(list)
    for *_, e in sorted(events, key=lambda x: (x[0], x[1])):
        by_req[e.request_id].append(e)
    assert set(by_req) == set(good)
    for rid, es in by_req.items():
        user, text = good[rid]
        assert [e.text for e in es] == _expected(text, s), rid
        assert [e.seq for e in es] == list(range(es[0].total))
        assert es[-1].parts == [e.hash for e in es] and es[-1].user_id == user

    # 2. per user: the partition of the user's requests, in the order published
    order: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for part, _, key, e in sorted(events, key=lambda x: (x[0], x[1])):
        assert key == e.user_id.encode()
        assert request_parts[key] == {part}, f"{e.user_id}: requests in {request_parts[key]}, segment in {part}"
        order[e.user_id].append((int(e.request_id.split("-r")[1]), e.seq))
    for user, seq in order.items():
        assert seq == sorted(seq), f"{user}'s segments out of order: {seq}"

    # 3. every bad input answered, once, with its code, in the partition of the user's requests
    assert Counter(r.request_id for _, r in rejections) == Counter(list(bad_failed))
    for m, r in rejections:
        user, _, code = bad_failed[r.request_id]
        assert r.error.code == code, (r.request_id, r.error)
        assert m.key() == user.encode() and r.user_id == user
        assert request_parts[m.key()] == {m.partition()} and r.source_partition == m.partition()
    assert next(r for _, r in rejections if r.request_id == "bad-speed").error.message.startswith("speed")
    letters = [(m.key(), dict(m.headers() or []), decode_dead_letter(m.value())) for m in dlq]
    assert sorted(dl.reason for *_, dl in letters) == sorted(["invalid_json", "no_request_id", "empty_value",
                                                              "invalid_json"])
    for key, headers, dl in letters:
        assert dl.source_topic == s.kafka.topic_requests and dl.source_offset >= 0
        assert (key, dl.source_partition) in {(k, p) for k, ps in request_parts.items() for p in ps}
        assert dl.id == f"{s.kafka.topic_requests}:{dl.source_partition}:{dl.source_offset}"
        assert headers[DEAD_LETTER_ID_HEADER] == dl.id.encode()

    # 4. and the operator sees it on /metrics, summed over both stages
    def metric(name: str) -> float:
        total = 0.0
        for p in sup.procs.values():
            with urllib.request.urlopen(f"http://127.0.0.1:{p.metrics_port}/metrics", timeout=5) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name):
                        total += float(line.rsplit(" ", 1)[1])
        return total

    assert metric('ttsflow_stage_requests_failed_total{code="empty_text"}') == 1
    assert metric("ttsflow_stage_dead_letters_total") == len(bad_dlq)
    assert metric("ttsflow_stage_duplicates_total") == len(repeats) + 1
    assert metric("ttsflow_stage_segments_produced_total") == want


def test_a_stage_killed_mid_run_and_restarted_loses_nothing(stages: tuple[Supervisor, Settings]) -> None:
    sup, s = stages
    n = 600
    reqs = [(f"k{i}", f"user-{i % 37}", _text(i % 37, i)) for i in range(n)]
    stop = threading.Event()

    def publish() -> None:
        p = Producer(producer_conf(s, **{"enable.idempotence": True}))
        for i, (rid, user, text) in enumerate(reqs):
            p.produce(s.kafka.topic_requests, key=user.encode(), value=_req(rid, user, text))
            if i % 50 == 49:
                p.flush(30)
                time.sleep(0.1)  # spread the run over a few seconds so the kill lands mid-stream
            if stop.is_set():
                break
        p.flush(30)

    t = threading.Thread(target=publish)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while len(drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=1, timeout=5)) == 0:
            assert time.monotonic() < deadline, "the stages produced nothing"
        sup.restart("stage-a", sig=signal.SIGKILL)
    finally:
        t.join(120)
        stop.set()
    sup.wait_ready("stage-a", timeout=90)
    want = {(rid, i) for rid, _, text in reqs for i in range(len(_expected(text, s)))}
    # read everything again until every expected segment is there (a count alone could be
    # reached early by duplicates) or the deadline passes
    deadline = time.monotonic() + 120
    while True:
        segs = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=len(want), timeout=30)
        got = Counter((e.request_id, e.seq) for e in (decode_segment(m.value()) for m in segs))
        lost = want - set(got)
        if not lost or time.monotonic() > deadline:
            break
        sup.check_alive()
    dups = sum(c - 1 for c in got.values())
    print(f"kill test: {len(want)} segments expected, {len(got)} distinct seen, lost={len(lost)} duplicated={dups}")
    assert not lost, f"{len(lost)} segments lost, e.g. {sorted(lost)[:5]}"
    assert set(got) == want
    # at-least-once: segments of requests whose offsets were not committed before the kill
    # may come twice (the worker drops repeated (request_id, seq)); only a few may
    assert dups <= 0.2 * len(want), f"{dups} duplicated segments"


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_the_dedup_table_survives_a_restart_of_every_stage(stages: tuple[Supervisor, Settings], store: str) -> None:
    """The seen ids come back from the table's changelog (memory) or the local RocksDB plus the
    changelog's tail (rocksdb): a retry after a full restart is dropped."""
    sup, s = stages
    names = ["stage-a", "stage-b"]
    if store != s.stage.stage_store:  # the fixture's stages run the default store: replace them
        s = s.replace(stage_store=store)
        for name in names:
            sup.kill(name, signal.SIGTERM)
        names = [f"{n}-{store}" for n in names]
        for name in names:  # one TTS_HOME: each stage identity gets a data dir of its own
            sup.stage(name, s)
        for name in names:
            sup.wait_ready(name, timeout=90)
        sup.wait_group(s, s.stage.stage_app_id, 2, timeout=90)
    first = [(f"d{i}", f"user-{i}", _text(i, 0)) for i in range(8)]
    _produce(s, [(u.encode(), _req(rid, u, t)) for rid, u, t in first])
    want = sum(len(_expected(t, s)) for *_, t in first)
    assert len(drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=want, timeout=60)) == want
    for name in names:
        sup.restart(name, sig=signal.SIGTERM)  # a clean stop commits; the new processes start empty
    for name in names:
        sup.wait_ready(name, timeout=90)
    sup.wait_group(s, s.stage.stage_app_id, 2, timeout=90)
    retry = [(u.encode(), _req(rid, u, t)) for rid, u, t in first]
    fresh = ("d-new", "user-3", "A new request after the restart.")
    _produce(s, [*retry, (fresh[1].encode(), _req(*fresh))])
    total = want + len(_expected(fresh[2], s))
    segs = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=total, timeout=60)
    # the fresh request is behind the retries in user-3's partition: once it is there, the
    # retries have been processed (and dropped)
    got = Counter(decode_segment(m.value()).request_id for m in segs)
    assert got["d-new"] == len(_expected(fresh[2], s))
    assert {rid: got[rid] for rid, *_ in first} == {rid: len(_expected(t, s)) for rid, _, t in first}
    assert len(segs) == total


def test_a_stage_killed_before_its_first_commit_hands_every_record_to_the_agent(settings: Settings,
                                                                                 tmp_path: Path) -> None:
    """A restart with nothing committed yet: faust's recovery used to resume the partitions
    before seeking them, and a block of records in the middle was never processed (logged
    as ``input_gap``); the commit then stuck behind it until the stage restarted itself."""
    s = settings.replace(home=str(tmp_path / "home"), stage_commit_interval_ms=60_000, log_level="INFO")
    first = [(f"c{i}", f"user-{i % 11}", f"Hello number {i}.") for i in range(200)]
    second = [(f"c{i}", f"user-{i % 11}", f"Hello number {i}.") for i in range(200, 400)]
    _produce(s, [(u.encode(), _req(r, u, t)) for r, u, t in first])  # a backlog when the stage starts
    with Supervisor(tmp_path / "logs") as sup:
        sup.stage("solo", s)
        sup.wait_ready("solo", timeout=90)
        deadline = time.monotonic() + 60
        while len(drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=50, timeout=2)) < 50:
            assert time.monotonic() < deadline, "the stage produced nothing"
        sup.restart("solo", sig=signal.SIGKILL)  # long before the first commit (60 s)
        sup.wait_ready("solo", timeout=90)
        _produce(s, [(u.encode(), _req(r, u, t)) for r, u, t in second])
        # well inside the stage's own 30 s stall restart: the records must flow, not be recovered
        deadline = time.monotonic() + 25
        while True:
            ids = {decode_segment(m.value()).request_id
                   for m in drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=400, timeout=5)}
            if len(ids) == 400 or time.monotonic() > deadline:
                break
        log = sup.procs["solo"].log_path.read_text(errors="replace")
    assert ids == {r for r, _, _ in first + second}, f"{400 - len(ids)} requests never segmented"
    assert "event=input_gap" not in log and "_stalled" not in log


def test_a_stage_started_while_the_broker_is_away_waits_for_it(settings: Settings, tmp_path: Path) -> None:
    """Started during a broker restart, the stage waits for it (faust alone exits at once)."""
    from streams.devstack.procs import free_port
    from streams.kafka import wait_for_broker

    away = settings.replace(bootstrap_servers=f"127.0.0.1:{free_port()}", home=str(tmp_path / "home"))
    assert wait_for_broker(away.kafka, timeout_s=1.0) is False
    with Supervisor(tmp_path / "logs") as sup:
        proc = sup.stage("early", away)
        # its first metadata request times out after 5 s; a loaded machine adds seconds of imports
        deadline = time.monotonic() + 60
        while "event=waiting_for_broker" not in proc.log_path.read_text(errors="replace"):
            assert proc.popen is not None and proc.popen.poll() is None, f"the stage exited:\n{proc.log_tail()}"
            assert time.monotonic() < deadline, f"the stage never said it waits:\n{proc.log_tail()}"
            time.sleep(0.5)
        time.sleep(3)
        assert proc.popen is not None and proc.popen.poll() is None, f"the stage exited while waiting:\n{proc.log_tail()}"
    assert wait_for_broker(settings.kafka, timeout_s=30.0) is True


def test_hostile_records_near_the_size_limit_are_dead_lettered_and_the_partition_goes_on(
        stages: tuple[Supervisor, Settings]) -> None:
    """A dead letter keeps a record's raw bytes, base64: whole, a 900 kB record would make a
    1.2 MB dead letter the broker refuses, on every restart (a poison pill). Bounded, the
    stage dead-letters it and the user's next request in the same partition is served."""
    sup, s = stages
    garbage = bytes(range(256)) * 3500  # ~900 kB, not JSON
    no_id = json.dumps({"user_id": "user-1", "text": "x" * 850_000}).encode()  # an object, no request id
    after = ("h-after", "user-1", "Still served after the hostile records.")
    _produce(s, [(b"user-1", garbage), (b"user-1", no_id), (after[1].encode(), _req(*after))])
    segs = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=len(_expected(after[2], s)), timeout=60)
    dlq = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_dlq, count=2, timeout=30)
    sup.check_alive()
    assert {decode_segment(m.value()).request_id for m in segs} == {"h-after"}
    letters = sorted((decode_dead_letter(m.value()) for m in dlq), key=lambda d: d.source_offset)
    assert [(d.reason, d.value_bytes, d.truncated) for d in letters] == [
        ("invalid_json", len(garbage), True), ("no_request_id", len(no_id), True)]
    assert all(len(m.value()) < 512_000 for m in dlq)
