"""The worker loop's exactly-once bookkeeping, with in-memory fakes of Kafka, S3 and Redis.

The fakes keep a log per partition, a consumer position, committed offsets and a
transactional producer whose records become visible only on commit; that is all the
loop's guarantees depend on. The real-stack versions of these checks (kills, rebalance,
S3 down) are in tests/integration/test_worker*.py.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent import futures
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from engine.base import ModelInfo, Prepared
from engine.engine import Engine
from schemas import ErrorInfo, Rejection, encode
from storage.errors import S3Unavailable
from streams.errors import FatalError
from tests.support.worker_rig import (
    DONE,
    SEG,
    Broker,
    FakeConsumer,
    FakeProducer,
    FakeStore,
    Rig,
    ToneBackend,
    segments,
)


@pytest.fixture
def rig() -> Any:
    r = Rig()
    yield r
    r.close()


# -- tests --------------------------------------------------------------------------------

def test_every_request_answered_once_offsets_committed_past_everything(rig: Rig) -> None:
    rig.publish(0, segments("a", "u1", ["Hello there.", "How are you?", "Fine."]))
    rig.publish(1, segments("b", "u2", ["Short one."]))
    rig.publish(0, segments("c", "u1", ["Another request."]))
    rig.run()
    cs = rig.completions()
    assert Counter(c.request_id for c in cs) == Counter({"a": 1, "b": 1, "c": 1})
    assert all(c.status == "ok" and c.audio is not None for c in cs)
    a = next(c for c in cs if c.request_id == "a")
    assert a.segments == 3 and a.audio.key in rig.store.objects  # type: ignore[union-attr]
    assert a.audio.sha256 == hashlib.sha256(rig.store.objects[a.audio.key]).hexdigest()  # type: ignore[union-attr]
    assert rig.broker.committed == {0: 4, 1: 1}
    done = rig.broker.read(DONE)
    assert {(m.partition(), m.key()) for m in done} == {(0, b"a"), (1, b"b"), (0, b"c")}


def test_offset_waits_for_the_last_segment_of_an_unfinished_request(rig: Rig) -> None:
    segs = segments("long", "u1", ["One.", "Two.", "Three."])
    rig.publish(0, segs[:2])  # the last segment has not arrived yet
    rig.run()
    assert rig.completions() == []
    assert rig.broker.committed.get(0) == 2  # parts 0 and 1 are in S3: done, committable
    rig.publish(0, segs[2:])
    rig.run()
    assert [c.request_id for c in rig.completions()] == ["long"]
    assert rig.broker.committed[0] == 3


class _HeldPartPuts(FakeStore):
    """A store whose parts' PUTs wait until ``gate`` is set (the request's own object goes through)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def put(self, key: str, data: bytes, content_type: str = "", *, sha256: str | None = None) -> str:
        if key.startswith("a/part/"):
            self.gate.wait(30)
        return super().put(key, data, content_type, sha256=sha256)


def test_a_parts_put_in_flight_holds_its_segment_and_answer_but_not_the_model_lane(rig: Rig) -> None:
    """A part is handed over encoded, its PUT in flight: the lane goes on to the next call while the
    segment stays undone (offset held) and its request unanswered until the PUT ended."""
    rig.close()
    store = rig.store = _HeldPartPuts()
    w = rig.new_worker()

    def turns_until(cond: Any, what: str) -> None:
        deadline = time.monotonic() + 10
        while not cond():
            assert time.monotonic() < deadline, what
            rig.now += 0.1
            w.run_once()

    rig.publish(0, segments("a", "u1", ["First one.", "Second one."]))
    turns_until(lambda: len(rig.backend.inferred) == 2, "a's parts made")
    rig.publish(1, segments("b", "u2", ["Other user."]))
    turns_until(lambda: "Other user." in rig.backend.inferred, "the lane free while a's PUTs are held")
    for _ in range(5):
        rig.now += 0.1
        w.run_once()
    assert rig.completions() == [] and not rig.broker.committed.get(0) and not rig.broker.committed.get(1)
    store.gate.set()
    rig.run_until(lambda: len(rig.completions()) == 2)
    assert {c.request_id: c.status for c in rig.completions()} == {"a": "ok", "b": "ok"}
    assert rig.broker.committed == {0: 2, 1: 1}
    assert all(k in store.objects for k in rig.cache.d.values())  # the cache points only at stored parts


def test_a_restarts_backlog_is_synthesized_in_the_order_it_was_written() -> None:
    """A worker restarted under load reads its backlog partition by partition; the requests that
    waited longest for it (written first, whatever their partition) are synthesized first."""
    r = Rig(max_batch=1)
    try:
        now_ms = int(time.time() * 1000)
        for p, rid, age_ms in ((0, "p0-new", 300), (0, "p0-newest", 100), (1, "p1-oldest", 1800), (1, "p1-old", 900)):
            r.publish(p, segments(rid, f"u-{rid}", [f"Request {rid} here."]))
            r.broker.logs[(SEG, p)][-1]._ts = now_ms - age_ms  # its record's timestamp: when the stage wrote it
        r.new_worker()  # the restart: every record above was written before its partition was taken
        r.run_until(lambda: len(r.completions()) == 4)
        assert r.backend.inferred == [f"Request {rid} here." for rid in ("p1-oldest", "p1-old", "p0-new", "p0-newest")]
    finally:
        r.close()


@pytest.mark.parametrize("measured", [True, False])
def test_a_fresh_worker_paces_by_what_the_engine_measured_as_it_loaded(measured: bool) -> None:
    """Before its first call a worker knows a segment's cost only from the engine's load (warm-up,
    health check): with it, a three-sentence request is served whole ahead of a one-sentence one
    behind it, as later; without it, each segment of unknown cost counts a fair slot and the
    request's second and third sentences go after the other request."""
    r = Rig(max_batch=1)
    try:
        engine = Engine(r.backend, max_batch=1)
        if measured:
            engine.seconds_per_char = {"heart": 0.001}  # ~20 ms a sentence: well within a fair burst
        r.publish(0, segments("long", "u1", ["First sentence.", "Second sentence.", "Third sentence."]))
        r.publish(1, segments("short", "u2", ["Another user."]))
        r.new_worker(engine=engine)
        r.run_until(lambda: len(r.completions()) == 2)
        want = ["First sentence.", "Second sentence.", "Third sentence.", "Another user."] if measured else \
            ["First sentence.", "Another user.", "Second sentence.", "Third sentence."]
        assert r.backend.inferred == want
    finally:
        r.close()


def test_restart_mid_request_rebuilds_from_s3_parts(rig: Rig) -> None:
    segs = segments("r", "u1", ["Part one.", "Part two.", "Part three."])
    rig.publish(0, segs[:2])
    rig.run()
    rig.close()
    rig.cache.d.clear()  # and the cache lost everything: parts come from S3 by their keys
    rig.new_worker()
    rig.publish(0, segs[2:])
    rig.run()
    cs = rig.completions()
    assert [c.request_id for c in cs] == ["r"] and cs[0].status == "ok" and cs[0].segments == 3
    assert rig.backend.inferred.count("Part one.") == 1  # not synthesized again


def test_engine_failure_fails_only_its_request(rig: Rig) -> None:
    rig.publish(0, segments("ok1", "u1", ["Fine text."]))
    rig.publish(0, segments("bad", "u1", ["This will FAIL.", "And this is fine."]))
    rig.publish(0, segments("ok2", "u1", ["More fine text."]))
    rig.run()
    got = {c.request_id: c for c in rig.completions()}
    assert Counter(c.request_id for c in rig.completions()) == Counter({"ok1": 1, "bad": 1, "ok2": 1})
    assert got["ok1"].status == got["ok2"].status == "ok"
    assert got["bad"].status == "failed" and got["bad"].error.code == "synthesis_failed"  # type: ignore[union-attr]
    assert rig.broker.committed[0] == 4


def rejection(rid: str, user: str, code: str = "empty_text") -> Rejection:
    return Rejection(request_id=rid, user_id=user, error=ErrorInfo(code=code, message=f"{code}: bad"),
                     source_partition=0, source_offset=7, enqueued_at=datetime.now(UTC))


def test_a_rejection_is_answered_once_in_order_with_the_stages_code(rig: Rig) -> None:
    rig.publish(0, segments("before", "u1", ["Fine text."]))
    rig.broker.append(SEG, 0, b"u1", encode(rejection("bad", "u1", "unknown_voice")))
    rig.broker.append(SEG, 0, b"u1", encode(rejection("bad", "u1", "unknown_voice")))  # a restarted stage's copy
    rig.publish(0, segments("after", "u1", ["More fine text."]))
    rig.run()
    got = rig.completions()
    assert Counter(c.request_id for c in got) == Counter({"before": 1, "bad": 1, "after": 1})
    bad = next(c for c in got if c.request_id == "bad")
    assert bad.status == "failed" and bad.error is not None and bad.error.code == "unknown_voice"
    assert bad.user_id == "u1" and bad.segments == 0 and bad.timings is not None
    assert rig.broker.committed[0] == 4
    assert (0, b"bad") in {(m.partition(), m.key()) for m in rig.broker.read(DONE)}


def test_a_rejection_repeated_after_its_answer_or_a_restart_produces_nothing(rig: Rig) -> None:
    rig.broker.append(SEG, 1, b"u2", encode(rejection("bad", "u2")))
    rig.run()
    rig.broker.append(SEG, 1, b"u2", encode(rejection("bad", "u2")))  # after the answer committed
    rig.run()
    rig.close()
    rig.new_worker()  # reads the done topic back
    rig.broker.append(SEG, 1, b"u2", encode(rejection("bad", "u2")))
    rig.run()
    assert [c.request_id for c in rig.completions()] == ["bad"]
    assert rig.broker.committed[1] == 3


def test_duplicates_and_done_requests_are_dropped(rig: Rig) -> None:
    segs = segments("d", "u1", ["First.", "Second."])
    rig.publish(0, segs + segs)  # re-emitted while the original is in flight
    rig.run()
    rig.publish(0, segs)  # re-emitted after the completion
    rig.run()
    assert [c.request_id for c in rig.completions()] == ["d"]
    assert rig.broker.committed[0] == 6
    # a restarted worker reads the done topic and drops a later re-emit too
    rig.close()
    rig.new_worker()
    rig.publish(0, segs)
    rig.run()
    assert [c.request_id for c in rig.completions()] == ["d"]
    assert rig.broker.committed[0] == 8


def test_request_id_reused_after_the_dedup_window_is_answered_again(rig: Rig) -> None:
    rig.publish(0, segments("reuse", "u1", ["Old request."]))
    rig.run()
    rig.close()
    for m in rig.broker.read(DONE):  # its done record is older than the stage's window now
        m._ts -= (rig.settings.stage.dedup_window_s + 60) * 1000
    rig.new_worker()
    rig.publish(0, segments("reuse", "u1", ["A new request reusing the id."]))
    rig.run()
    assert [c.request_id for c in rig.completions()] == ["reuse", "reuse"]


def test_abortable_commit_error_aborts_rewinds_and_answers_once(rig: Rig) -> None:
    rig.producer.fail_commit = [KafkaException(KafkaError(KafkaError._STATE, "boom", txn_requires_abort=True))]
    rig.publish(0, segments("x", "u1", ["Abort me once."]))
    rig.publish(1, segments("y", "u2", ["Me too."]))
    rig.run()
    assert "abort" in rig.producer.calls
    assert (0, 0) in rig.consumer.seeks  # rewound to the committed (none: the start)
    assert Counter(c.request_id for c in rig.completions()) == Counter({"x": 1, "y": 1})
    assert rig.metrics.value("ttsflow_worker_transaction_aborts_total") == 1


def test_commit_timeout_is_retried_not_aborted(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.kafka.retry.backoff", lambda attempt: 0.0)
    rig.producer.fail_commit = [KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True))]
    rig.publish(0, segments("t", "u1", ["Slow commit."]))
    rig.run()
    assert "abort" not in rig.producer.calls
    assert rig.producer.calls.count("commit") == 2
    assert [c.request_id for c in rig.completions()] == ["t"]


def test_fenced_producer_is_fatal(rig: Rig) -> None:
    rig.producer.fail_commit = [KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))]
    rig.publish(0, segments("f", "u1", ["Fenced."]))
    with pytest.raises(FatalError):
        rig.run()
    assert rig.completions() == []


def test_s3_down_commits_nothing_and_recovers(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.kafka.retry.backoff", lambda attempt: 0.0)
    rig.store.down = True
    rig.publish(0, segments("s", "u1", ["Stored later.", "Second part."]))
    calls = {"n": 0}
    real_ping = rig.store.ping

    def ping() -> None:  # S3 comes back after two failed probes
        calls["n"] += 1
        if calls["n"] >= 3:
            rig.store.down = False
        real_ping()

    monkeypatch.setattr(rig.store, "ping", ping)
    rig.worker.run_once()
    rig.worker.run_once()
    assert rig.completions() == [] and rig.broker.committed == {}
    rig.run()
    assert [c.request_id for c in rig.completions()] == ["s"]
    assert rig.broker.committed[0] == 2
    assert rig.metrics.value("ttsflow_worker_s3_errors_total") >= 2


def test_parts_beyond_the_join_budget_are_read_back_from_s3_and_join_the_same(rig: Rig) -> None:
    texts = ["First of a long one.", "Second of it.", "Third part here.", "And the last."]
    rig.publish(0, segments("mem", "u1", texts))
    rig.run()
    in_memory = rig.completions()[0]
    lean = Rig()
    try:
        lean.settings = lean.settings.replace(join_memory_mb=0)  # no part kept for the join
        lean.worker.close()
        lean.new_worker()
        got: list[str] = []
        real_get = lean.store.get
        lean.store.get = lambda key: (got.append(key), real_get(key))[1]  # type: ignore[method-assign]
        lean.publish(0, segments("lean", "u1", texts))
        lean.run()
        c = lean.completions()[0]
        assert c.status == "ok" and len([k for k in got if "/part/" in k]) == len(texts)
        assert lean.store.objects[c.audio.key] == rig.store.objects[in_memory.audio.key]  # type: ignore[union-attr]
    finally:
        lean.close()


def test_an_object_that_keeps_failing_fails_its_request_not_the_partition(rig: Rig,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.worker.joiner._BACKOFF_S", 0.0)
    real_put = rig.store.put_file

    def put_file(key: str, f: Any, content_type: str = "", *, metadata: dict[str, str] | None = None) -> Any:
        if float((metadata or {}).get("duration_s", 0)) > 2.5:  # only the long request's object (~4 s; the others ~1 s)
            raise S3Unavailable(f"s3 upload_part {key}: 500")
        return real_put(key, f, content_type, metadata=metadata)

    monkeypatch.setattr(rig.store, "put_file", put_file)
    rig.publish(0, segments("ok1", "u1", ["Before it."]))
    rig.publish(0, segments("huge", "u1", ["One of three.", "Two of three.", "Three of three."]))
    rig.publish(0, segments("ok2", "u1", ["After it."]))
    rig.publish(1, segments("ok3", "u2", ["Elsewhere."]))
    rig.run()
    got = {c.request_id: c for c in rig.completions()}
    assert Counter(c.request_id for c in rig.completions()) == Counter({"ok1": 1, "huge": 1, "ok2": 1, "ok3": 1})
    assert got["huge"].status == "failed" and got["huge"].error.code == "storage_failed"  # type: ignore[union-attr]
    assert all(got[r].status == "ok" for r in ("ok1", "ok2", "ok3"))
    assert rig.broker.committed == {0: 5, 1: 1}
    assert rig.metrics.value("ttsflow_worker_s3_errors_total") == 0 and "abort" not in rig.producer.calls


def test_a_request_past_the_audio_limit_fails_early_and_the_next_one_is_answered(rig: Rig) -> None:
    rig.settings = rig.settings.replace(max_request_audio_s=1)
    rig.worker.close()
    rig.new_worker()
    long_texts = [f"Sentence number {i} of a request whose audio is far longer than a second." for i in range(40)]
    rig.publish(0, segments("long", "u1", long_texts))
    rig.publish(0, segments("next", "u1", ["Short."]))
    rig.run()
    got = {c.request_id: c for c in rig.completions()}
    assert got["long"].status == "failed" and got["long"].error.code == "audio_too_long"  # type: ignore[union-attr]
    assert got["next"].status == "ok"
    assert len(rig.backend.inferred) <= 24  # ~0.2 s a part: stopped after the prefetched ones, not all 40
    assert rig.broker.committed[0] == len(long_texts) + 1


def test_undecodable_segments_answered_or_skipped(rig: Rig) -> None:
    rig.broker.append(SEG, 0, b"u1", b'{"request_id": "broken", "text": 5}')
    rig.broker.append(SEG, 0, b"u1", b"\x00garbage")
    rig.publish(0, segments("fine", "u1", ["Fine."]))
    rig.run()
    got = {c.request_id: c for c in rig.completions()}
    assert set(got) == {"broken", "fine"}
    assert got["broken"].status == "failed" and got["broken"].user_id == "u1"
    assert rig.broker.committed[0] == 3


def test_repeated_text_is_served_from_cache(rig: Rig) -> None:
    rig.publish(0, segments("one", "u1", ["Same words."]))
    rig.run()
    rig.publish(1, segments("two", "u2", ["Same words."]))
    rig.run()
    got = {c.request_id: c for c in rig.completions()}
    assert got["two"].cached_segments == 1 and rig.backend.inferred.count("Same words.") == 1
    assert got["one"].audio.sha256 == got["two"].audio.sha256  # type: ignore[union-attr]


def test_revoke_commits_finished_work_and_forgets_the_rest(rig: Rig) -> None:
    rig.publish(0, segments("p0", "u1", ["Zero."]))
    rig.publish(1, segments("p1", "u2", ["One.", "Two."])[:1])  # unfinished request in partition 1
    rig.run()
    rig.worker.on_revoke(rig.consumer, [TopicPartition(SEG, 1)])
    assert 1 not in rig.worker.consumer.assigned
    assert not any(k[0] == 1 for k in rig.worker.ledger.requests)
    assert rig.broker.committed[1] == 1  # its done part was committed before letting go
    assert [c.request_id for c in rig.completions()] == ["p0"]


# -- hot reload ---------------------------------------------------------------------------

class VersionedTone(ToneBackend):
    """The tone voice as one installed version of the store's hibari model."""

    def __init__(self, version: str, precision: str) -> None:
        super().__init__()
        self.info = ModelInfo(name="tone", version=version, precision=precision, provider="CPUExecutionProvider")


def _reload_rig(tmp_path: Any, max_wait_s: float = 30.0) -> tuple[Rig, Any, Any]:
    from engine.reload import ModelManager
    from engine.store import ModelStore

    store = ModelStore(tmp_path)
    for version in ("1-int8", "2-fp32"):
        store.add("hibari", version, write=lambda path, _cfg, v=version: path.write_bytes(v.encode()) and None,
                  precision=version.split("-")[1], source="test")
    store.use("hibari", "1-int8")
    loaded: list[str] = []

    def loader(mv: Any) -> Engine:
        loaded.append(mv.version)
        return Engine(VersionedTone(mv.version, mv.precision), max_batch=4)

    manager = ModelManager(store, "hibari", loader=loader, health_sentences=("Hi.",))
    manager.start()
    rig = Rig()
    rig.worker.close()
    rig.new_worker(engine=manager, reload_max_wait_s=max_wait_s)
    return rig, store, manager


def test_pending_reload_applied_between_batches_and_named_in_later_completions(tmp_path: Any) -> None:
    rig, store, manager = _reload_rig(tmp_path)
    try:
        rig.publish(0, segments("before", "u1", ["Same words.", "Second part."]))
        rig.run()
        rig.publish(0, segments("unfinished", "u1", ["Part one.", "Part two."])[:1])
        rig.run(3)
        store.use("hibari", "2-fp32")
        manager.request_reload()  # what SIGHUP does
        rig.run(3)
        assert manager.version.version == "1-int8"  # a request is unfinished: no swap in the middle of it
        rig.publish(0, segments("unfinished", "u1", ["Part one.", "Part two."])[1:])
        rig.run()
        assert manager.version.version == "2-fp32" and not manager.reload_pending
        rig.publish(1, segments("after", "u2", ["Same words."]))  # same text: not the old model's cached part
        rig.run()
        got = {c.request_id: c for c in rig.completions()}
        assert Counter(c.request_id for c in rig.completions()) == Counter({"before": 1, "unfinished": 1, "after": 1})
        assert (got["before"].model.version, got["before"].model.precision) == ("1-int8", "int8")
        assert (got["unfinished"].model.version, got["unfinished"].model.precision) == ("1-int8", "int8")
        assert (got["after"].model.version, got["after"].model.precision) == ("2-fp32", "fp32")
        assert got["after"].status == "ok" and got["after"].cached_segments == 0
        assert rig.worker.identity == "tone:2-fp32:fp32"
        assert rig.metrics.value("ttsflow_worker_model_reloads_total", {"result": "ok"}) == 1
        assert rig.broker.committed == {0: 4, 1: 1}
    finally:
        rig.close()
        manager.close()


def test_reload_forced_after_the_wait_keeps_a_spanning_request_whole(tmp_path: Any) -> None:
    rig, store, manager = _reload_rig(tmp_path, max_wait_s=1.0)
    try:
        segs = segments("span", "u1", ["Made by one.", "Made by two."])
        rig.publish(0, segs[:1])
        rig.run(3)
        store.use("hibari", "2-fp32")
        manager.request_reload()
        rig.run(15)  # the request never finishes by itself: the swap comes after 1 s of the loop's clock
        assert manager.version.version == "2-fp32"
        rig.cache.d.clear()  # its first part must come from memory or its stored key, not a recomputed one
        rig.publish(0, segs[1:])
        rig.run()
        cs = rig.completions()
        assert [c.request_id for c in cs] == ["span"] and cs[0].status == "ok" and cs[0].segments == 2
        assert cs[0].model.version == "2-fp32"
        assert rig.backend.inferred == []  # the rig's own engine was never used
    finally:
        rig.close()
        manager.close()


def test_refused_reload_keeps_serving_and_is_counted(tmp_path: Any) -> None:
    rig, store, manager = _reload_rig(tmp_path)
    try:
        (store.get("hibari", "2-fp32").onnx_path).write_bytes(b"tampered")  # checksum no longer matches
        store.use("hibari", "2-fp32")
        manager.request_reload()
        rig.publish(0, segments("still", "u1", ["Old model answers."]))
        rig.run()
        cs = rig.completions()
        assert [c.request_id for c in cs] == ["still"] and cs[0].model.version == "1-int8"
        assert rig.metrics.value("ttsflow_worker_model_reloads_total", {"result": "refused"}) == 1
        assert rig.metrics.value("ttsflow_worker_model_reloads_total", {"result": "ok"}) == 0
    finally:
        rig.close()
        manager.close()


class WedgedProducer(FakeProducer):
    """commit_transaction never returns on its own (librdkafka#5456 after a broker restart);
    released at the end of the test, it then reports what the broker says: fenced."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.release = threading.Event()
        self.ended = threading.Event()

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        self.release.wait()
        self.ended.set()
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by the new producer", fatal=True))


def test_a_wedged_commit_replaces_the_producer_and_answers_once(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.kafka.producer.OP_TIMEOUT_S", 0.05)
    wedged = WedgedProducer(rig.broker)
    fresh: list[FakeProducer] = []

    def factory() -> FakeProducer:
        fresh.append(FakeProducer(rig.broker))
        return fresh[-1]

    rig.worker.close()
    rig.new_worker(producer=wedged, producer_factory=factory, wedge_grace_s=0.2)
    try:
        rig.publish(0, segments("w", "u1", ["A commit that hangs.", "Second part."]))
        rig.publish(1, segments("v", "u2", ["Another request."]))
        rig.run()
        assert wedged.calls.count("commit") == 1, "the wedged producer was called again"
        assert len(fresh) == 1 and fresh[0].calls[:1] == ["init"], "no new producer took over"
        assert (0, 0) in rig.consumer.seeks and (1, 0) in rig.consumer.seeks  # redone from committed offsets
        assert Counter(c.request_id for c in rig.completions()) == Counter({"w": 1, "v": 1})
        assert rig.metrics.value("ttsflow_worker_producer_replacements_total") == 1
        assert rig.worker.abandoned == [wedged]
    finally:
        wedged.release.set()
    assert wedged.ended.wait(10), "the abandoned call never ended"
    futures.wait(rig.worker.checkpoint.futures(), 10)  # (it ends fenced on its own thread): nothing more is written
    assert Counter(c.request_id for c in rig.completions()) == Counter({"w": 1, "v": 1})


def test_a_commit_wedged_at_a_revoke_replaces_the_producer_without_aborting_on_it(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A revoke's commit wedges (the group coordinator's broker died, librdkafka#5511): an abort
    queued behind the stuck call would wedge too, so a fresh producer ends the transaction at once,
    and the partition kept answers once."""
    monkeypatch.setattr("streams.kafka.producer.OP_TIMEOUT_S", 0.05)
    wedged = WedgedProducer(rig.broker)
    fresh: list[FakeProducer] = []

    def factory() -> FakeProducer:
        fresh.append(FakeProducer(rig.broker))
        return fresh[-1]

    rig.worker.close()
    rig.new_worker(producer=wedged, producer_factory=factory, wedge_grace_s=0.2)
    try:
        rig.publish(0, segments("kept", "u1", ["Stays here."]))
        rig.publish(1, segments("moved", "u2", ["Goes elsewhere."]))
        deadline = time.monotonic() + 10
        while "commit" not in wedged.calls:  # the loop's own turns, without waiting on the stuck call
            assert time.monotonic() < deadline, "no transaction reached its commit"
            rig.now += 0.1
            rig.worker.run_once()
            futures.wait(rig.worker.joiner.futures() + rig.worker.parts.futures(), 10)
        rig.worker.on_revoke(rig.consumer, [TopicPartition(SEG, 1)])
        assert "abort" not in wedged.calls, "an abort was queued behind the wedged call"
        assert len(fresh) == 1 and fresh[0].calls[:1] == ["init"], "no new producer ended the transaction"
        assert rig.worker.abandoned == [wedged]
        assert rig.worker.consumer.assigned == {0}
        rig.run()
        assert Counter(c.request_id for c in rig.completions()) == Counter({"kept": 1})
    finally:
        wedged.release.set()


class BrokenProducer(FakeProducer):
    """The first commit fails as librdkafka's idempotence layer breaks the instance: a produce
    possibly persisted on a leader that died, then OUT_OF_ORDER_SEQUENCE_NUMBER on the new one."""

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        raise KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        "sequence desynchronization with broker 1", fatal=True))


def test_a_producer_broken_by_librdkafka_is_replaced_not_the_process(rig: Rig) -> None:
    broken = BrokenProducer(rig.broker)
    fresh: list[FakeProducer] = []

    def factory() -> FakeProducer:
        fresh.append(FakeProducer(rig.broker))
        return fresh[-1]

    rig.worker.close()
    rig.new_worker(producer=broken, producer_factory=factory)
    rig.publish(0, segments("b", "u1", ["Broken once."]))
    rig.run()
    assert broken.calls.count("commit") == 1 and "abort" not in broken.calls
    assert len(fresh) == 1 and fresh[0].calls[:1] == ["init"], "no new producer took over"
    assert Counter(c.request_id for c in rig.completions()) == Counter({"b": 1})
    assert rig.metrics.value("ttsflow_worker_producer_replacements_total") == 1


def test_a_fenced_producer_stays_fatal() -> None:
    from streams.errors import FatalError, ProducerBroken
    from streams.kafka.producer import transaction_error

    fenced = transaction_error(KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True)))
    assert type(fenced) is FatalError
    oos = transaction_error(KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "desync", fatal=True)))
    assert isinstance(oos, ProducerBroken)


class SlowOffsetsConsumer(FakeConsumer):
    """committed() times out the first ``fail`` times (the group's offsets unreadable right
    after a broker restart, until the consumer has polled)."""

    def __init__(self, broker: Broker, fail: int) -> None:
        super().__init__(broker)
        self.fail = fail

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.fail > 0:
            self.fail -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get committed offsets", retriable=True))
        return super().committed(tps, timeout)


def test_a_rewind_that_cannot_read_offsets_stays_pending_and_admits_nothing_until_done(rig: Rig) -> None:
    rig.worker.close()
    producer = FakeProducer(rig.broker)
    producer.fail_commit = [KafkaException(KafkaError(KafkaError._STATE, "boom", txn_requires_abort=True))]
    rig.new_worker(consumer=SlowOffsetsConsumer(rig.broker, fail=3), producer=producer)
    rig.publish(0, segments("p", "u1", ["Aborted, then re-read."]))
    # the commit (pipelined: seen failed one turn after it began) aborts; the rewind cannot read offsets
    rig.run_until(lambda: rig.worker.consumer.rewind_pending == {0, 1})
    rig.publish(0, segments("q", "u1", ["Published while the rewind waits."]))
    rig.run(steps=1)
    assert rig.worker.consumer.rewind_pending and rig.consumer.seeks == [], "seeked without knowing the committed offset"
    rig.run()
    assert not rig.worker.consumer.rewind_pending
    assert Counter(c.request_id for c in rig.completions()) == Counter({"p": 1, "q": 1})


def test_a_consumer_that_goes_back_without_a_rebalance_aborts_and_answers_once(rig: Rig) -> None:
    # librdkafka reset a partition's position after a broker restart: offsets come again
    rig.publish(0, segments("a", "u1", ["First request.", "Its second part."]))
    rig.publish(0, segments("b", "u1", ["Second request."]))
    rig.run(steps=1)
    rig.consumer.pos[0] = 0
    rig.run()
    assert Counter(c.request_id for c in rig.completions()) == Counter({"a": 1, "b": 1})


class SilentTone(ToneBackend):
    """A voice that answers text containing SILENT with silence and MUTE with a 10 ms blip."""

    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        self.inferred += [p.item.text for p in batch]
        return [(p.payload, p.item.text) for p in batch]

    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        n, text = raw
        if "SILENT" in text:
            return np.zeros(800 + 800 * int(n), np.float32)
        if "MUTE" in text:
            return super().postprocess(0, prepared)[:80]
        return super().postprocess(n, prepared)


def test_silent_or_blip_audio_fails_only_its_request_with_the_reason(rig: Rig) -> None:
    rig.backend = SilentTone()
    rig.close()
    rig.new_worker()
    rig.publish(0, segments("ok1", "u1", ["Fine text."]))
    rig.publish(0, segments("hush", "u1", ["This part is fine.", "But this one is SILENT."]))
    rig.publish(1, segments("blip", "u2", ["A MUTE voice says almost nothing here."]))
    rig.publish(1, segments("ok2", "u2", ["More fine text."]))
    rig.run()
    cs = rig.completions()
    assert Counter(c.request_id for c in cs) == Counter({"ok1": 1, "hush": 1, "blip": 1, "ok2": 1})
    got = {c.request_id: c for c in cs}
    assert got["ok1"].status == got["ok2"].status == "ok"
    assert got["ok1"].model is not None and got["ok1"].model.voice == "heart"
    hush, blip = got["hush"].error, got["blip"].error
    assert got["hush"].status == "failed" and hush is not None and hush.code == "synthesis_failed"
    assert "near-silent" in hush.message and "'heart'" in hush.message
    assert got["blip"].status == "failed" and blip is not None and blip.code == "synthesis_failed"
    assert "far shorter than its text" in blip.message
    assert rig.metrics.value("ttsflow_worker_audio_refused_total", {"reason": "silent"}) == 1
    assert rig.metrics.value("ttsflow_worker_audio_refused_total", {"reason": "too_short"}) == 1
    assert rig.broker.committed == {0: 3, 1: 2}
    # a refused part is not cached: a retry of the same text is synthesized again
    assert all("SILENT" not in k for k in rig.cache.d)


class PairedTone(ToneBackend):
    """Runs items one by one, and each model call waits until a second one runs beside it."""

    native_batching = False

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.barrier = threading.Barrier(2, timeout=5)
        self.paired = 0

    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        import threading

        try:
            self.barrier.wait()
            self.paired += 1
        except threading.BrokenBarrierError:  # a lone call (the last odd one): not paired
            self.barrier.reset()
        return super().infer(batch)


def test_two_lanes_run_two_model_calls_at_once_and_answer_each_request_once() -> None:
    backend = PairedTone()
    rig = Rig(backend=backend, lanes=2)
    try:
        for i in range(3):
            rig.publish(i % 2, segments(f"r{i}", f"u{i}", [f"Request {i} first part.", f"Request {i} second."]))
        rig.run_until(lambda: len(rig.completions()) == 3, max_steps=60)
        assert Counter(c.request_id for c in rig.completions()) == Counter({"r0": 1, "r1": 1, "r2": 1})
        assert all(c.status == "ok" for c in rig.completions())
        assert backend.paired >= 4, "model calls never overlapped"  # 6 calls: at least two pairs met
    finally:
        rig.close()


def test_model_lanes_auto_is_two_for_one_by_one_backends_on_two_cores() -> None:
    from streams.settings import Settings
    from streams.worker.main import model_lanes

    hibari = Settings().replace(backend="hibari").engine
    assert model_lanes(hibari, cores=2) == (2, 1)          # two 1-thread calls on 2 cores
    assert model_lanes(hibari, cores=8) == (2, 4)
    assert model_lanes(hibari, cores=1) == (1, 0)          # one core: one call, onnxruntime's default
    assert model_lanes(Settings().replace(backend="hibari", threads=6).engine, cores=8) == (2, 3)  # the budget is shared
    assert model_lanes(Settings().replace(backend="hibari", model_lanes=1).engine, cores=8) == (1, 0)
    assert model_lanes(Settings().replace(backend="hibari", model_lanes=3, threads=2).engine, cores=8) == (3, 1)
    assert model_lanes(Settings().replace(backend="piper").engine, cores=8) == (1, 0)  # batches fill the cores
    assert model_lanes(Settings().replace(backend="hibari", threads=1).engine, cores=8) == (1, 1)  # a budget of one thread


def test_a_completion_says_where_its_time_went_along_its_last_part(rig: Rig) -> None:
    """Issue 32: the places of a request's path (stage to commit wait) are in its timings and add
    up to the time from its publish to its transaction's start."""
    rig.publish(0, segments("a", "u1", ["Hello there.", "How are you?"]))
    rig.run()
    (c,) = rig.completions()
    t = c.timings
    assert t is not None and c.completed_at is not None
    parts = [t.stage_ms, t.read_ms, t.wait_ms, t.model_ms, t.upload_ms, t.collect_ms, t.join_ms, t.commit_wait_ms]
    assert all(p is not None and p >= 0 for p in parts), t
    assert t.model_ms > 0  # type: ignore[operator]
    # from the request's enqueue to the transaction: the segments' enqueue time is their creation here
    assert sum(parts) == pytest.approx(t.e2e_ms + t.commit_wait_ms, abs=5.0)  # type: ignore[arg-type, operator]


class SoloTone(ToneBackend):
    """Runs items one by one, like kokoro with a session on every core for a call that starts alone
    (``solo``, :mod:`engine.solo`); records when each call ran."""

    native_batching = False

    def __init__(self) -> None:
        super().__init__()
        from engine.solo import SoloGate

        self.solo = SoloGate()
        self.calls: list[tuple[str, float, float, bool]] = []  # text, start, end, ran solo

    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        solo = self.solo.enter()
        t0 = time.perf_counter()
        try:
            if batch[0].item.text.startswith("First"):
                time.sleep(0.2)  # long enough for a second lane to start beside it, were it not held
            return super().infer(batch)
        finally:
            self.calls.append((batch[0].item.text, t0, time.perf_counter(), solo))
            self.solo.leave()


def test_a_streams_first_segment_on_an_idle_worker_runs_alone_then_the_lanes_resume() -> None:
    import msgspec

    backend = SoloTone()
    rig = Rig(backend=backend, lanes=2, max_batch=1)
    try:
        segs = [msgspec.structs.replace(s, stream=True)
                for s in segments("r0", "u0", ["First clause,", "the rest of the sentence.", "And another one."])]
        rig.publish(0, segs)
        rig.run_until(lambda: len(rig.completions()) == 1, max_steps=80)
        assert rig.completions()[0].status == "ok"
        calls = {text: (t0, t1, solo) for text, t0, t1, solo in backend.calls}
        first = calls["First clause,"]
        assert first[2], "the first segment's call did not run solo"
        assert all(t0 >= first[1] for text, (t0, _, _) in calls.items() if text != "First clause,"), \
            "a later segment's call started beside the first segment's"
    finally:
        rig.close()


def test_a_whole_requests_segments_still_use_both_lanes() -> None:
    backend = PairedTone()  # no solo session: nothing is held, calls overlap as before
    rig = Rig(backend=backend, lanes=2)
    try:
        import msgspec

        rig.publish(0, [msgspec.structs.replace(s, stream=True) for s in segments("r0", "u0", ["One.", "Two."])])
        rig.run_until(lambda: len(rig.completions()) == 1, max_steps=60)
        assert backend.paired == 2, "a backend without a solo session held its second lane"
    finally:
        rig.close()


@pytest.mark.parametrize("eager", [True, False])
def test_an_idle_lane_starts_a_partial_batch_at_once_unless_told_to_wait(eager: bool) -> None:
    """TTS_EAGER_BATCHES: a lone segment on an idle worker starts now, not after max_wait_ms for a batch
    that will not fill; with it off the batch waits out max_wait_ms (one minute here) first."""

    class Batching(ToneBackend):
        native_batching = True  # a one-by-one backend gets batches of one: always full

    rig = Rig(max_batch=8, backend=Batching())
    try:
        rig.settings = rig.settings.replace(max_wait_ms=60_000, eager_batches=eager)
        rig.worker.close()
        rig.new_worker()
        rig.publish(0, segments("r0", "u0", ["Just one sentence."]))
        if eager:
            rig.run_until(lambda: len(rig.completions()) == 1, max_steps=20)  # 2 s of the loop's clock
            assert rig.completions()[0].status == "ok"
        else:
            rig.run(steps=20)
            assert rig.backend.inferred == [] and rig.completions() == []
    finally:
        rig.close()


def test_a_start_uses_what_the_prelude_finished_and_does_the_rest_itself() -> None:
    """``streams.worker.prelude``: a producer fenced while the model loaded is not initialised again,
    and the done topic's partition count comes from it; a prelude that fenced nothing leaves
    ``init_transactions`` to the worker's start."""
    from streams.worker.prelude import KafkaReady
    from tests.support.worker_rig import FakeProducer

    rig = Rig()
    fenced = FakeProducer(rig.broker)
    w = rig.new_worker(producer=fenced, ready=KafkaReady(producer=fenced, done_partitions=3))
    w.start()
    assert "init" not in fenced.calls and w.done_log.partitions == 3

    w = rig.new_worker(ready=KafkaReady(producer=None, done_partitions=5))
    w.start()
    assert rig.producer.calls == ["init"] and w.done_log.partitions == 5
