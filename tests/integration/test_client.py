"""TTSClient against the real broker and S3.

The stage and worker are stood in for by this test: it reads the client's requests from
the requests topic and answers with completion events produced in Kafka transactions,
with audio uploaded to S3, so what is checked is the client's own contract: keys and
partitioning, one shared read_committed reader, completions that arrive before wait(),
typed errors, sha256-checked fetch, the asyncio forms and the fetch-by-scan helper.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from schemas import AudioRef, Completion, ErrorInfo, decode_request, encode
from streams.client import AsyncTTSClient, TTSClient, find_completion, tail_completions
from streams.errors import AudioFetchError, CompletionTimeout, RequestFailed, StackUnavailable
from streams.settings import Settings

pytestmark = pytest.mark.integration


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Kafka's Java DefaultPartitioner: toPositive(murmur2(key)) % partitions."""
    m, r, seed = 0x5BD1E995, 24, 0x9747B28C
    length = len(key)
    h = (seed ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = key[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


class FakeWorker:
    """Answers requests with transactional completions and real S3 objects."""

    def __init__(self, settings: Settings, s3: Any) -> None:
        self.s = settings
        self.s3 = s3
        self.p = Producer({"bootstrap.servers": settings.bootstrap_servers, "partitioner": "murmur2_random",
                           "transactional.id": f"fake-worker-{uuid.uuid4().hex[:8]}"})
        self.p.init_transactions(30)

    def audio(self, rid: str, data: bytes, *, sha: str | None = None) -> AudioRef:
        key = f"test-client/{rid}.wav"
        self.s3.put_object(Bucket=self.s.s3_bucket, Key=key, Body=data)
        return AudioRef(uri=f"s3://{self.s.s3_bucket}/{key}", bucket=self.s.s3_bucket, key=key, format="wav",
                        sample_rate=22050, duration_s=0.1, bytes=len(data),
                        sha256=sha or hashlib.sha256(data).hexdigest())

    def complete(self, c: Completion, *, abort: bool = False) -> None:
        self.p.begin_transaction()
        self.p.produce(self.s.topic_completed, key=c.user_id.encode(), value=encode(c))
        if abort:
            self.p.abort_transaction(30)
        else:
            self.p.commit_transaction(30)

    def ok(self, rid: str, user: str, data: bytes, **kw: Any) -> Completion:
        c = Completion(request_id=rid, user_id=user, status="ok", audio=self.audio(rid, data, **kw), segments=1)
        self.complete(c)
        return c


@pytest.fixture
def worker(settings: Settings, s3: Any) -> FakeWorker:
    return FakeWorker(settings, s3)


def test_submit_keys_by_user_and_partitions_like_java(settings: Settings, drain: Callable[..., list[Message]]) -> None:
    users = [f"user-{i}" for i in range(12)]
    with TTSClient(settings) as client:
        ids = [client.submit(f"hello {u}", u, voice="v1") for u in users]
        same = client.submit("again", users[0], request_id="my-own-id.1")
    assert same == "my-own-id.1" and len(set(ids)) == len(ids)
    msgs = drain(settings.topic_requests, count=len(users) + 1)
    assert len(msgs) == len(users) + 1
    for m in msgs:
        req = decode_request(m.value())
        assert m.key() == req.user_id.encode()
        assert m.partition() == murmur2_partition(m.key(), 4), req.user_id
    by_id = {decode_request(m.value()).request_id: decode_request(m.value()) for m in msgs}
    assert by_id[ids[3]].text == "hello user-3" and by_id[ids[3]].voice == "v1"


def test_wait_dispatches_by_id_and_keeps_early_completions(settings: Settings, worker: FakeWorker,
                                                           tmp_path: Path) -> None:
    with TTSClient(settings) as client:
        a = client.submit("one", "alice")
        b = client.submit("two", "bob")
        audio_b = b"RIFF-bob-" + uuid.uuid4().bytes
        worker.ok(b, "bob", audio_b)  # b completes first, before anyone waits for it
        worker.complete(Completion(request_id=a, user_id="alice", status="ok",
                                   audio=worker.audio(a, b"aborted")), abort=True)  # never visible
        audio_a = b"RIFF-alice-" + uuid.uuid4().bytes
        worker.ok(a, "alice", audio_a)
        ca = client.wait(a, timeout=30)
        cb = client.wait(b, timeout=30)
        assert (ca.request_id, cb.request_id) == (a, b)
        assert client.fetch(ca) == audio_a
        out = client.save(cb, tmp_path / "sub" / "b.wav")
        assert out.read_bytes() == audio_b
        # exactly one visible completion for a: the aborted one was never dispatched
        with pytest.raises(CompletionTimeout):
            client.wait(a, timeout=1.0)
        assert client._consumer is not None and threading_count(client) == 1


def threading_count(client: TTSClient) -> int:
    """Reader threads this client runs: one, however many waits happened."""
    import threading

    return sum(1 for t in threading.enumerate() if t is client._thread)


def test_failed_completion_raises_request_failed_with_code(settings: Settings, worker: FakeWorker) -> None:
    with TTSClient(settings) as client:
        rid = client.submit("", "carol")
        worker.complete(Completion(request_id=rid, user_id="carol", status="failed",
                                   error=ErrorInfo(code="empty_text", message="text is empty after normalization")))
        with pytest.raises(RequestFailed) as ei:
            client.wait(rid, timeout=30)
        assert ei.value.code == "empty_text" and "empty" in ei.value.message
        # the raw completion is still there for callers that want it
        rid2 = client.submit("", "carol")
        worker.complete(Completion(request_id=rid2, user_id="carol", status="failed",
                                   error=ErrorInfo(code="empty_text", message="x")))
        c = client.wait(rid2, timeout=30, raise_on_failure=False)
        assert c.status == "failed"
        with pytest.raises(RequestFailed):
            client.fetch(c)


def test_fetch_rejects_audio_whose_sha256_does_not_match(settings: Settings, worker: FakeWorker) -> None:
    with TTSClient(settings) as client:
        rid = client.submit("x", "dave")
        worker.ok(rid, "dave", b"real bytes", sha="0" * 64)
        c = client.wait(rid, timeout=30)
        with pytest.raises(AudioFetchError, match="sha256"):
            client.fetch(c)


def test_completion_published_just_before_the_client_started_is_seen(settings: Settings,
                                                                      worker: FakeWorker) -> None:
    rid = f"early-{uuid.uuid4().hex[:8]}"
    worker.ok(rid, "erin", b"early audio")
    with TTSClient(settings, lookback_s=60) as client:
        assert client.wait(rid, timeout=30).request_id == rid


def test_many_waiters_share_one_reader(settings: Settings, worker: FakeWorker) -> None:
    with TTSClient(settings) as client:
        ids = [client.submit(f"t{i}", f"u{i % 5}", block=False) for i in range(40)]
        assert client.flush(30) == 0
        for i, rid in enumerate(ids):
            worker.complete(Completion(request_id=rid, user_id=f"u{i % 5}", status="ok",
                                       audio=worker.audio(rid, rid.encode())))
        got = [client.wait(rid, timeout=30) for rid in reversed(ids)]
        assert [c.request_id for c in got] == list(reversed(ids))


def test_async_client(settings: Settings, worker: FakeWorker) -> None:
    async def run() -> tuple[bytes, bool]:
        async with await AsyncTTSClient.connect(settings) as client:
            rid = await client.submit("async", "frank")
            waiter = asyncio.ensure_future(client.wait(rid, timeout=30))
            await asyncio.get_running_loop().run_in_executor(None, worker.ok, rid, "frank", b"async audio")
            c = await waiter
            data = await client.fetch(c)
            try:
                await client.wait("never-" + rid, timeout=0.5)
            except CompletionTimeout:
                timed_out = True
            else:
                timed_out = False
            return data, timed_out

    data, timed_out = asyncio.run(run())
    assert data == b"async audio" and timed_out


def test_find_completion_scans_every_partition(settings: Settings, worker: FakeWorker) -> None:
    want = f"find-{uuid.uuid4().hex[:8]}"
    for i in range(8):
        worker.ok(f"other-{i}-{want}", f"user{i}", b"x")
    worker.ok(want, "zed", b"the one")
    c = find_completion(settings, want, timeout=30)
    assert c is not None and c.request_id == want and c.user_id == "zed"
    assert find_completion(settings, "no-such-id", timeout=30) is None


def test_tail_completions_yields_what_commits(settings: Settings, worker: FakeWorker) -> None:
    import threading

    stop = threading.Event()
    seen: list[str] = []
    rid = f"tail-{uuid.uuid4().hex[:8]}"
    worker.ok(rid, "tina", b"t")
    for c, _m in tail_completions(settings, lookback_s=60, stop=stop):
        seen.append(c.request_id)
        if c.request_id == rid:
            stop.set()
    assert rid in seen


def test_stack_down_is_one_typed_error(settings: Settings) -> None:
    down = settings.replace(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(StackUnavailable, match=r"127\.0\.0\.1:1"):
        TTSClient(down, connect_timeout=1.0)
