"""Nobody waits behind another user's long request in their partition, and a crash repeats no answer.

A ``ttsflow worker`` subprocess on the real stack. One user's request of many segments is
published to partition 0, then other users' one-sentence requests behind it in the same
partition. The worker's read-ahead is bounded by bytes (``TTS_READ_AHEAD_KB``), not by a few
segments, so it reads the short requests at once and serves them in the fair order while the
long one is in progress; its offset stays held back by the long request (offsets follow
durability), so after a SIGKILL the restarted worker reads the short requests again and drops
them as already answered (the done log), answering only the long one, once.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from confluent_kafka import Producer

from schemas import Completion, SchemaError, Segment, decode_chunk, decode_completion, encode
from streams.bench.corpus import sentences
from streams.bench.harness import TopicReader
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from tests.support.metrics import metric_sum
from tests.support.pipeline import check_audio, make_segments

pytestmark = pytest.mark.integration

LONG_SEGMENTS = 80   # one sentence each: ~55 KiB of records, far past the old read-ahead (~32 segments)
SHORTS = 3


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, transaction_timeout_ms=20_000)


@pytest.mark.timeout(600)
def test_short_requests_behind_a_long_one_in_its_partition_are_answered_first_and_once(
        settings: Settings, tmp_path: Path) -> None:
    texts = sentences(4242)
    long_segs = [msgspec.structs.replace(s, stream=True) for s in make_segments(  # its chunks show its progress
        "long", "user-long", " ".join(next(texts) for _ in range(LONG_SEGMENTS)))]
    assert len(long_segs) == LONG_SEGMENTS, len(long_segs)
    shorts = [make_segments(f"short-{i}", f"user-{i}", next(texts)) for i in range(SHORTS)]
    p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "enable.idempotence": True, "linger.ms": 0})
    sent: dict[str, float] = {}
    got: dict[str, tuple[Completion, float]] = {}
    seen: Counter[str] = Counter()
    long_chunks: list[float] = []  # when each chunk of the long request was seen

    def publish(rid: str, segs: list[Segment]) -> None:
        for seg in segs:  # partition 0 for all: the shorts sit behind the long request in the log
            p.produce(settings.kafka.topic_segments, key=seg.user_id.encode(), value=encode(seg), partition=0)
        assert p.flush(30) == 0
        sent[rid] = time.time()

    with Supervisor(tmp_path / "logs") as sup, TopicReader(settings.kafka, settings.kafka.topic_completed) as reader, \
            TopicReader(settings.kafka, settings.kafka.topic_chunks) as chunks:
        def wait(ids: list[str], timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not all(i in got for i in ids):
                sup.check_alive()
                assert time.monotonic() < deadline, f"unanswered: {[i for i in ids if i not in got]}"
                for rec in reader.poll(0.1):
                    try:
                        c = decode_completion(rec.value)
                    except SchemaError:
                        continue
                    seen[c.request_id] += 1
                    got.setdefault(c.request_id, (c, rec.received))
                long_chunks.extend(r.received for r in chunks.poll(0) if decode_chunk(r.value).request_id == "long")

        w = sup.worker("w1", settings)
        sup.wait_ready(w, timeout=120)
        publish("warm", make_segments("warm", "user-w", next(texts)))
        wait(["warm"], 120)
        publish("long", long_segs)
        for i, segs in enumerate(shorts):
            publish(f"short-{i}", segs)
        short_ids = [f"short-{i}" for i in range(SHORTS)]
        wait(short_ids, 120)
        assert "long" not in got, "the long request was answered before the short ones behind it"
        worst = max(got[i][1] - sent[i] for i in short_ids)
        last_short = max(got[i][1] for i in short_ids)
        # SIGKILL while the long request is in progress: its offset holds the shorts' back
        sup.kill("w1", signal.SIGKILL)
        sup.restart("w1")  # same transactional.id: fences the dead instance
        sup.wait_ready(w, timeout=120)
        wait(["long"], 300)
        # the long one's last chunks commit with its completion but come through another reader: read on
        # until all are in (or 60 s), then 3 s more, where a repeated answer or chunk would come
        deadline, end = time.monotonic() + 60.0, time.monotonic() + 3.0
        while time.monotonic() < end or (len(long_chunks) < LONG_SEGMENTS and time.monotonic() < deadline):
            for rec in reader.poll(0.2):
                c = decode_completion(rec.value)
                seen[c.request_id] += 1
            long_chunks.extend(r.received for r in chunks.poll(0) if decode_chunk(r.value).request_id == "long")
        dropped = metric_sum(w.metrics_port, 'ttsflow_worker_segments_skipped_total{reason="request_done"}', timeout=5)
    t_long = got["long"][1] - sent["long"]
    before = sum(1 for t in long_chunks if t <= last_short)
    # when the worker read each short request (its segment was written before `sent`, so this is a bound
    # from above), and how many of the long request's chunks had been seen by then
    read_at = {i: sent[i] + (got[i][0].timings.read_ms or 0) / 1000 for i in short_ids}  # type: ignore[union-attr]
    before_read = max(sum(1 for t in long_chunks if t <= read_at[i]) for i in short_ids)
    print(f"\nread-ahead: {LONG_SEGMENTS}-segment request {t_long:.1f} s (with a SIGKILL); the {SHORTS} one-sentence "
          f"requests behind it in its partition read when {before_read} of its chunks were out, answered within "
          f"{worst:.2f} s, when {before} of its segments were done; segments dropped as done after the restart: "
          f"{dropped:.0f}")
    # read at once (the old read-ahead of ~32 segments read them only after ~32 of the long one's segments
    # were done), then served in the fair order: after the long one's unpaced burst (TTS_FAIR_BURST_MS of
    # its model time) and a batch or two, while the long one goes on (how many of its segments that is
    # depends on how fast the model is; the old read-ahead made them wait for 40 or more)
    assert all(got[i][0].timings is not None and got[i][0].timings.read_ms is not None for i in short_ids)
    assert before_read <= 2, f"the short requests were read after {before_read} of the long one's chunks"
    assert before < LONG_SEGMENTS // 2, f"the short requests waited for {before} of the long one's segments"
    assert len(long_chunks) == LONG_SEGMENTS, len(long_chunks)  # each chunk once, across the kill
    assert seen == Counter(dict.fromkeys(sent, 1)), seen  # every request answered exactly once
    c_long = got["long"][0]
    assert c_long.status == "ok" and c_long.segments == LONG_SEGMENTS, c_long.error
    check_audio(settings, c_long)
    assert all(got[i][0].status == "ok" for i in short_ids)
    assert dropped >= SHORTS, "the restarted worker did not drop the answered short requests as done"
