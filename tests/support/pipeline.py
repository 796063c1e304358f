"""Helpers of the worker's integration tests: segments built as the stage builds them,
published straight to the segments topic, completions read back ``read_committed``, audio
checked in S3."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer

from engine import audio as audio_codec
from schemas import Completion, Segment, decode_completion, encode, request_hash, segment_hash
from storage import AudioCache, AudioStore
from streams.settings import Settings
from streams.stage.text import normalize, split_segments
from tests.integration.conftest import drain_topic
from tests.support.asr import SENTENCES as ASR_SENTENCES

VOICE = "heart"


def make_segments(rid: str, user: str, text: str, *, max_chars: int = 300, voice: str = VOICE, fmt: str = "wav",
                  sample_rate: int | None = None, speed: float = 1.0) -> list[Segment]:
    """The segments the stage would emit for one request (the last one carries the part list)."""
    pieces = split_segments(normalize(text), max_chars)
    hashes = [segment_hash(p, voice=voice, model="hibari", model_version="", speed=speed, sample_rate=sample_rate,
                           format=fmt) for p in pieces]
    rh = request_hash(hashes, format=fmt)
    now = datetime.now(UTC)
    n = len(pieces)
    return [Segment(request_id=rid, user_id=user, seq=i, total=n, text=p, hash=h, request_hash=rh, voice=voice,
                    format=fmt, speed=speed, sample_rate=sample_rate, model="hibari", created_at=now, enqueued_at=now,
                    parts=hashes if i == n - 1 else None) for i, (p, h) in enumerate(zip(pieces, hashes, strict=True))]


def publish(settings: Settings, segments: list[Segment], raw: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random",
                  "enable.idempotence": True, "linger.ms": 5})
    for s in segments:
        p.produce(settings.kafka.topic_segments, key=s.user_id.encode(), value=encode(s))
    for key, value in raw:
        p.produce(settings.kafka.topic_segments, key=key, value=value)
    assert p.flush(30) == 0


def completions(settings: Settings, count: int | None = None, timeout: float = 60.0) -> list[Completion]:
    msgs = drain_topic(settings.kafka.bootstrap_servers, settings.kafka.topic_completed, count=count, timeout=timeout)
    return [decode_completion(m.value()) for m in msgs]


def by_request(cs: list[Completion]) -> Counter[str]:
    return Counter(c.request_id for c in cs)


def cache_namespace(settings: Settings) -> str:
    from streams.worker.main import cache_namespace as ns

    return ns(settings.s3)


def new_store(settings: Settings, endpoint: str | None = None) -> AudioStore:
    """A store like the worker's, with short timeouts (a test with S3 down must not hang)."""
    s3 = settings.s3 if endpoint is None else settings.replace(s3_endpoint=endpoint).s3
    return AudioStore.from_section(s3, connect_timeout_s=0.5, read_timeout_s=5, max_attempts=1)


def check_audio(settings: Settings, c: Completion) -> tuple[Any, int]:
    """The completion's audio exists in S3 and matches its sha256 and size; returns (samples, rate)."""
    assert c.status == "ok", c.error
    assert c.audio is not None
    store = new_store(settings)
    try:
        data = store.get(c.audio.key)
    finally:
        store.close()
    assert hashlib.sha256(data).hexdigest() == c.audio.sha256
    assert len(data) == c.audio.bytes
    assert c.audio.uri == f"s3://{c.audio.bucket}/{c.audio.key}"
    samples, sr = audio_codec.decode(data)
    assert sr == c.audio.sample_rate
    assert abs(len(samples) / sr - c.audio.duration_s) < 0.01
    return samples, sr


SENTENCES = list(ASR_SENTENCES[:8])  # short, distinct, recognizable English


def corpus(n: int, tag: str, users: int = 7, salt: str = "") -> list:
    """``n`` requests, every fourth one long (three or more segments); no two segments alike,
    so nothing is a cache hit and the worker is busy long enough to be killed mid-work."""
    segs = []
    for i in range(n):
        picked = [SENTENCES[i % len(SENTENCES)]]
        if i % 4 == 0:
            picked = [SENTENCES[(i + k) % len(SENTENCES)] for k in range(3)]
        text = " ".join(f"{s[:-1]}, number {i}{salt}{s[-1]}" for s in picked)
        segs += make_segments(f"{tag}-{i}", f"user-{i % users}", text, max_chars=80)
    return segs


def answer_requests(settings: Settings, log_dir: Any, requests: list[dict[str, Any]], *,
                    timeout: float = 180) -> list[Completion]:
    """Publish raw request JSON (murmur2, keyed by user) the way a user would, run one real stage
    and one worker until a ``read_committed`` reader sees an answer per request id (or the
    deadline), and return what it saw."""
    import json

    from streams.devstack.procs import Supervisor

    p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random"})
    for r in requests:
        p.produce(settings.kafka.topic_requests, key=r["user_id"].encode(), value=json.dumps(r).encode())
    assert p.flush(30) == 0
    with Supervisor(log_dir) as sup:
        sup.stage("stage", settings)
        sup.worker("worker", settings)
        cs = completions(settings, count=len({r["request_id"] for r in requests}), timeout=timeout)
        sup.check_alive()
    return cs


@contextmanager
def running_worker(settings: Settings, engine: Any, *, tid_prefix: str = "test-worker", store: AudioStore | None = None,
                   cache: AudioCache | None = None, overlap: bool | None = None) -> Iterator[Any]:
    """A real Worker loop on a thread, with its own transactional id; stopped, closed and its
    error (if any) re-raised in the test thread on exit."""
    from streams.worker.loop import Worker
    from streams.worker.metrics import WorkerMetrics

    s = settings.replace(transactional_id=f"{tid_prefix}-{uuid.uuid4().hex[:8]}")
    store = store or new_store(s)
    cache = cache or AudioCache(s.redis.redis_url, 600, namespace=cache_namespace(s))
    w = Worker(s.kafka, s.batching, engine, store, cache, WorkerMetrics(0), dedup_window_s=s.stage.dedup_window_s,
               overlap=overlap)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            w.run()
        except BaseException as e:  # surfaced in the test thread below
            errors.append(e)

    t = threading.Thread(target=run, name="worker", daemon=True)
    t.start()
    try:
        yield w
    finally:
        w.stop()
        t.join(60)
        store.close()
        cache.close()
        assert not t.is_alive(), "worker did not stop"
        if errors:
            raise errors[0]
