"""TTSClient against the real broker and S3.

Except in the last test (a real ``ttsflow stage`` and ``ttsflow worker``: say, stream, the CLI), the
stage and worker are stood in for by this test: it reads the client's requests from
the requests topic and answers with completion events produced in Kafka transactions,
with audio uploaded to S3, so what is checked is the client's own contract: keys and
partitioning, one shared read_committed reader, completions that arrive before wait(),
typed errors, sha256-checked fetch, the asyncio forms and the fetch-by-scan helper.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from schemas import AudioRef, Completion, ErrorInfo, decode_request, encode
from streams.client import AsyncTTSClient, TTSClient, find_completion, tail_completions
from streams.client.errors import AudioFetchError, CompletionTimeout, RequestFailed, StackUnavailable
from streams.kafka.partitioner import partition_for
from streams.settings import Settings

pytestmark = pytest.mark.integration


class FakeWorker:
    """Answers requests with transactional completions and real S3 objects."""

    def __init__(self, settings: Settings, s3: Any) -> None:
        self.s = settings
        self.s3 = s3
        self.p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random",
                           "transactional.id": f"fake-worker-{uuid.uuid4().hex[:8]}"})
        self.p.init_transactions(30)

    def audio(self, rid: str, data: bytes, *, sha: str | None = None) -> AudioRef:
        key = f"test-client/{rid}.wav"
        self.s3.put_object(Bucket=self.s.s3.s3_bucket, Key=key, Body=data)
        return AudioRef(uri=f"s3://{self.s.s3.s3_bucket}/{key}", bucket=self.s.s3.s3_bucket, key=key, format="wav",
                        sample_rate=22050, duration_s=0.1, bytes=len(data),
                        sha256=sha or hashlib.sha256(data).hexdigest())

    def complete(self, c: Completion, *, abort: bool = False) -> None:
        self.p.begin_transaction()
        self.p.produce(self.s.kafka.topic_completed, key=c.user_id.encode(), value=encode(c))
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
    msgs = drain(settings.kafka.topic_requests, count=len(users) + 1)
    assert len(msgs) == len(users) + 1
    for m in msgs:
        req = decode_request(m.value())
        assert m.key() == req.user_id.encode()
        assert m.partition() == partition_for(m.key(), 4), req.user_id
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
    c = find_completion(settings.kafka, want, timeout=30)
    assert c is not None and c.request_id == want and c.user_id == "zed"
    assert find_completion(settings.kafka, "no-such-id", timeout=30) is None


def test_tail_completions_yields_what_commits(settings: Settings, worker: FakeWorker) -> None:
    import threading

    stop = threading.Event()
    seen: list[str] = []
    rid = f"tail-{uuid.uuid4().hex[:8]}"
    worker.ok(rid, "tina", b"t")
    for c, _m in tail_completions(settings.kafka, lookback_s=60, stop=stop):
        seen.append(c.request_id)
        if c.request_id == rid:
            stop.set()
    assert rid in seen


def test_stack_down_is_one_typed_error(settings: Settings) -> None:
    down = settings.replace(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(StackUnavailable, match=r"127\.0\.0\.1:1"):
        TTSClient(down, connect_timeout=1.0)


# --- the CLI, with a stand-in pipeline that answers every request ---------------------------

class FakePipeline:
    """A thread that answers each request on the requests topic: text "FAIL..." gets a failed
    completion, anything else ok with the text's bytes as audio. Counts what it answered."""

    def __init__(self, settings: Settings, s3: Any) -> None:
        import threading

        from confluent_kafka import Consumer

        self.worker = FakeWorker(settings, s3)
        self.s = settings
        self.answered: list[str] = []
        self.stop = threading.Event()
        self.c = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": f"fake-{uuid.uuid4().hex[:8]}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.c.subscribe([settings.kafka.topic_requests])
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                m = self.c.poll(0.2)
                if m is None or m.error():
                    continue
                req = decode_request(m.value())
                self.answered.append(req.request_id)
                if req.text.startswith("FAIL"):
                    self.worker.complete(Completion(request_id=req.request_id, user_id=req.user_id, status="failed",
                                                    error=ErrorInfo(code="empty_text", message="nothing to say")))
                else:
                    self.worker.ok(req.request_id, req.user_id, req.text.encode())
        finally:
            self.c.close()

    def close(self) -> None:
        self.stop.set()
        self.t.join(10)


@pytest.fixture
def pipeline(settings: Settings, s3: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("topic_requests", "topic_completed", "topic_segments"):
        monkeypatch.setenv(f"TTS_{name.upper()}", getattr(settings.kafka, name))
    p = FakePipeline(settings, s3)
    yield p
    p.close()


def test_cli_say_watch_fetch(pipeline: FakePipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from streams.client.cli import main_fetch, main_say, main_watch

    assert main_say(["hello from the cli", "-o", str(tmp_path / "a.wav"), "--user", "u1", "--timeout", "60"]) == 0
    assert (tmp_path / "a.wav").read_bytes() == b"hello from the cli"
    out = capsys.readouterr().out
    rid = out.split("request_id=")[1].split()[0]
    assert main_watch(["--json", "--from-beginning", "--count", "1"]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["request_id"] == rid and line["status"] == "ok"
    assert main_fetch([rid, "-o", str(tmp_path / "b.wav")]) == 0
    assert (tmp_path / "b.wav").read_bytes() == b"hello from the cli"
    assert main_fetch(["not-there", "-o", str(tmp_path / "c.wav")]) == 1
    assert "no completion" in capsys.readouterr().err
    assert main_say(["FAIL please", "-o", str(tmp_path / "d.wav"), "--timeout", "60"]) == 1
    assert "empty_text" in capsys.readouterr().err


def test_cli_submit_is_resumable(pipeline: FakePipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from streams.client.cli import STATE_FILE, main_submit

    src = tmp_path / "in.txt"
    lines = [f"line number {i}" for i in range(12)]
    lines.insert(3, json.dumps({"text": "from json", "request_id": "json-rid-1", "user_id": "j"}))
    lines.insert(5, "FAIL this one")
    src.write_text("\n".join(lines) + "\n\n")
    out = tmp_path / "out"
    rc = main_submit([str(src), "--out", str(out), "--json", "--timeout", "60"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1  # one request failed
    assert (summary["ok"], summary["failed"], summary["failed_by_code"]) == (13, 1, {"empty_text": 1})
    assert (out / "json-rid-1.wav").read_bytes() == b"from json"
    assert len(list(out.glob("*.wav"))) == 13
    answered = len(pipeline.answered)

    # a second run submits nothing: every id is done (ok or recorded as failed)
    rc = main_submit([str(src), "--out", str(out), "--json", "--timeout", "60"])
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and again["skipped"] == 14 and again["submitted"] == 0
    assert len(pipeline.answered) == answered

    # losing two audio files: only those two run again
    (out / "json-rid-1.wav").unlink()
    state = (out / STATE_FILE).read_text().splitlines()
    victim = next(json.loads(s)["request_id"] for s in state
                  if json.loads(s).get("status") == "ok" and json.loads(s)["request_id"] != "json-rid-1")
    (out / f"{victim}.wav").unlink()
    rc = main_submit([str(src), "--out", str(out), "--json", "--timeout", "60"])
    third = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and third["submitted"] == 2 and third["ok"] == 2
    assert (out / "json-rid-1.wav").read_bytes() == b"from json"


# --- against the real pipeline: `ttsflow stage` and `ttsflow worker` as processes -------------

STREAM_TEXT = ("The first sentence is short. The second one says a little more than the first. "
               "And the third sentence ends the request.")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_client_say_stream_and_cli_against_real_stage_and_worker(settings: Settings, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``say``, ``stream`` (sync and async) and ``ttsflow say --stream`` against a real ``ttsflow stage``
    and ``ttsflow worker`` (processes) on the shared stack: a failed request raises its code; the chunks
    of a streaming request come once each, in ``seq`` order, before its completion, each in S3 with its
    sha256; the completion's audio is the whole request; afterwards nothing waits for the worker group."""
    import time

    from schemas import Chunk
    from streams.client.cli import chunk_path, main_say
    from streams.devstack.procs import Supervisor, settings_env
    from streams.ops.lag import LagReader

    with Supervisor(tmp_path / "logs") as sup:
        stage = sup.stage("stage", settings)
        worker = sup.worker("worker-0", settings)
        sup.wait_ready(stage, timeout=120)
        sup.wait_ready(worker, timeout=300)
        with TTSClient(settings) as client:
            c = client.say("Hello from the ttsflow client. This is a test.", "alice", tmp_path / "a.wav",
                           timeout=180)
            data = (tmp_path / "a.wav").read_bytes()
            assert c.status == "ok" and c.audio is not None
            assert data[:4] == b"RIFF" and hashlib.sha256(data).hexdigest() == c.audio.sha256
            assert c.audio.duration_s > 1.0
            bad = client.submit("   ", "bob")
            with pytest.raises(RequestFailed) as ei:
                client.wait(bad, timeout=120)
            assert ei.value.code == "empty_text"

            t0 = time.monotonic()
            seen: list[tuple[float, Chunk | Completion]] = [(time.monotonic() - t0, x) for x in
                                                            client.stream(STREAM_TEXT, "alice", timeout=240)]
            chunks = [x for _, x in seen if isinstance(x, Chunk)]
            c = seen[-1][1]
            assert isinstance(c, Completion) and c.status == "ok" and c.segments == 3
            assert [ch.seq for ch in chunks] == [0, 1, 2] and {ch.total for ch in chunks} == {3}
            assert all(ch.request_id == c.request_id and ch.user_id == "alice" for ch in chunks)
            for ch in chunks:
                data = client.fetch_chunk(ch)
                assert data[:4] == b"RIFF" and hashlib.sha256(data).hexdigest() == ch.audio.sha256
                assert len(data) == ch.audio.bytes and ch.audio.duration_s > 0.3
            total = sum(ch.audio.duration_s for ch in chunks)
            assert c.audio is not None and c.audio.duration_s >= 0.9 * total
            first_chunk_s, completion_s = seen[0][0], seen[-1][0]
            print(f"\nstream: first chunk {first_chunk_s:.2f} s, completion {completion_s:.2f} s after publish")
            assert first_chunk_s <= completion_s

            async def run_async() -> list[Chunk | Completion]:
                a = AsyncTTSClient(client)
                return [x async for x in a.stream(STREAM_TEXT + " Once more, asynchronously.", "bob", timeout=240)]

            got = asyncio.run(run_async())
            assert [x.seq for x in got if isinstance(x, Chunk)] == [0, 1, 2, 3]
            assert isinstance(got[-1], Completion) and got[-1].status == "ok"

        for k, v in settings_env(settings).items():  # the CLI reads its settings from the environment
            monkeypatch.setenv(k, v)
        out = tmp_path / "say.wav"
        capsys.readouterr()
        assert main_say([STREAM_TEXT + " Said by the command line.", "-o", str(out), "--user", "carol", "--stream",
                         "--timeout", "240"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert [ln.split()[1] for ln in lines[:-1]] == ["1/4", "2/4", "3/4", "4/4"], lines
        assert lines[-1].startswith(f"saved {out}")
        for seq in range(4):
            assert chunk_path(out, seq).read_bytes()[:4] == b"RIFF"
        assert out.read_bytes()[:4] == b"RIFF"
        # everything answered: no segment waits for the worker group (markers aside)
        with LagReader(settings.kafka, settings.scaling) as reader:
            g = reader.read(settings.kafka.worker_group, settings.kafka.topic_segments)
        assert g.members == 1 and g.records_waiting == 0 and g.status == "OK"
