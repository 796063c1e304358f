"""The gateway with the official ``openai`` SDK, against a real stage, worker and gateway
(three processes) on per-test topics of the shared stack.

Checked: every response format decodes (PyAV and Debian's ffmpeg), lasts as long as the
text needs and is intelligible to the offline recognizer; ``with_streaming_response``; an
``Idempotency-Key`` retried (concurrently, after completion, after a gateway restart)
yields one completion on ``tts.completed`` and the same audio; a wait that runs out answers
504 with the request id and a later retry collects the audio; two replicas on one port both
answer; with no stage or worker running the gateway says so.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from schemas import decode_completion
from streams.bench.harness import isolated
from streams.devstack.procs import Proc, Supervisor, free_port
from streams.devstack.stack import ensure_topics
from streams.settings import Settings
from tests.integration.conftest import TEST_PARTITIONS, _cleanup, drain_topic
from tests.support.asr import SENTENCES, word_error
from tests.support.gateway import decode_av, decode_ffmpeg, decode_pcm, http, wait_http
from tests.support.stack import require_stack

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

openai = pytest.importorskip("openai")

TEXT = SENTENCES[0]  # "The quick brown fox jumps over the lazy dog."
CHARS_PER_S = 12.7  # the heart voice's median rate (engine/voices.py)


@dataclass
class Rig:
    settings: Settings
    sup: Supervisor
    gateway: Proc
    url: str
    clients: list[Any] = field(default_factory=list)

    def client(self, **kw: object) -> openai.OpenAI:
        """An SDK client, closed at the end of the module: one left to the garbage collector
        closes its pooled sockets late, and the ResourceWarning lands in whichever test runs then."""
        c = openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused-open-gateway", max_retries=0, timeout=180, **kw)
        self.clients.append(c)
        return c

    def completions_of(self, rid: str) -> int:
        msgs = drain_topic(self.settings.kafka.bootstrap_servers, self.settings.kafka.topic_completed, timeout=30)
        return sum(1 for m in msgs if decode_completion(m.value()).request_id == rid)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    unique = f"gw-{uuid.uuid4().hex[:8]}"
    s = isolated(require_stack(), unique).replace(partitions=TEST_PARTITIONS, gateway_probe_s=1.0,
                                                               max_segment_chars=64)
    ensure_topics(s, partitions=TEST_PARTITIONS)
    try:
        with Supervisor(tmp_path_factory.mktemp("gw-logs")) as sup:
            sup.stage("stage", s)
            sup.worker("worker", s)
            gw = sup.gateway("gateway", s)
            sup.wait_ready(gw, timeout=120)
            sup.wait_ready("stage", timeout=240)
            sup.wait_ready("worker", timeout=240)
            rig = Rig(s, sup, gw, f"http://127.0.0.1:{gw.settings.gateway.gateway_port}")
            try:
                yield rig
            finally:
                for c in rig.clients:
                    c.close()
            sup.check_alive()
    finally:
        _cleanup(s, unique)


def _check(data: bytes, fmt: str, text: str, *, speed: float = 1.0, hear: bool = True) -> float:
    """Decode ``data`` two ways; both agree on its length, which suits ``text``; it is intelligible
    (unless ``hear`` is off: the recognizer costs ~1 s per sentence on 2 cores)."""
    x, rate = decode_pcm(data) if fmt == "pcm" else decode_av(data)
    dur = len(x) / rate
    spoken = sum(ch.isalnum() for ch in text)
    expect = spoken / CHARS_PER_S / speed
    assert 0.5 * expect < dur < 2.0 * expect + 0.5, (fmt, dur, expect)
    if fmt != "pcm":
        other = decode_ffmpeg(data)
        if other is not None:
            assert abs(len(other[0]) / other[1] - dur) < 0.15, (fmt, dur, len(other[0]) / other[1])
    if hear:
        wer = word_error(x, rate, text)
        assert wer <= 0.35, (fmt, wer)
    return dur


@pytest.mark.parametrize("fmt", ["wav", "mp3", "opus", "aac", "flac", "pcm"])
def test_every_format_through_the_openai_sdk(rig: Rig, fmt: str) -> None:
    r = rig.client().audio.speech.with_raw_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                            response_format=fmt)
    assert r.http_response.status_code == 200
    assert r.headers["content-type"].startswith({"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
                                                 "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}[fmt])
    assert r.headers["x-request-id"].startswith("gw-")
    _check(r.content, fmt, TEXT)


def test_speed_and_our_own_voice_name(rig: Rig) -> None:
    text = SENTENCES[5]
    slow = rig.client().audio.speech.create(model="tts-1", voice="heart", input=text, response_format="wav", speed=0.7)
    fast = rig.client().audio.speech.create(model="tts-1", voice="heart", input=text, response_format="wav", speed=1.5)
    d_slow, d_fast = _check(slow.read(), "wav", text, speed=0.7), _check(fast.read(), "wav", text, speed=1.5)
    assert d_slow > 1.5 * d_fast


def test_with_streaming_response_receives_the_audio(rig: Rig, tmp_path: Path) -> None:
    out = tmp_path / "s.mp3"
    with rig.client().audio.speech.with_streaming_response.create(
            model="tts-1", voice="nova", input=SENTENCES[2], response_format="mp3") as r:
        assert r.http_response.status_code == 200
        pieces = list(r.iter_bytes(4096))
        r.stream_to_file  # noqa: B018 - the SDK's documented helper exists on this object
    assert len(pieces) >= 1
    out.write_bytes(b"".join(pieces))
    _check(out.read_bytes(), "mp3", SENTENCES[2])


LONG = " ".join(SENTENCES[12:17])  # five sentences: five segments of at most 64 characters


def fresh(sentences: list[str] | tuple[str, ...]) -> str:
    """``sentences`` with a random number in each, so no segment is a cache hit (Redis is shared by runs)."""
    import random

    return " ".join(f"{t[:-1]}, number {random.randint(100, 999)}{t[-1]}" for t in sentences)


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_streaming_sends_bytes_before_the_completion(rig: Rig, fmt: str) -> None:
    import time
    from datetime import UTC, datetime

    # twenty fresh segments: the worker answers segment by segment and commits every few tens of
    # ms, so a short request can be wholly done before its first chunk reaches the caller
    text = fresh(SENTENCES[4:24])
    t0 = time.time()
    first_at = None
    pieces = []
    with rig.client().audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format=fmt, extra_body={"stream_format": "audio"}) as r:
        assert r.http_response.status_code == 200 and r.headers["x-ttsflow-streamed"] == "true"
        rid = r.headers["x-request-id"]
        for piece in r.iter_bytes():
            if first_at is None and piece:
                first_at = time.time()
            pieces.append(piece)
    msgs = drain_topic(rig.settings.kafka.bootstrap_servers, rig.settings.kafka.topic_completed, timeout=30)
    done = [decode_completion(m.value()) for m in msgs if decode_completion(m.value()).request_id == rid]
    assert len(done) == 1 and done[0].segments >= 16 and done[0].completed_at is not None
    assert first_at is not None
    completed = done[0].completed_at.astimezone(UTC).timestamp()
    print(f"stream {fmt}: first byte {first_at - t0:.2f}s, completion {completed - t0:.2f}s after the call")
    assert first_at < completed, (first_at - t0, completed - t0)
    # twenty sentences heard once (pcm) is enough: every format's encoder is heard by
    # test_every_format_through_the_openai_sdk, and the streamed mp3's two decoders must agree on its length
    _check(b"".join(pieces), fmt, text, hear=fmt == "pcm")
    assert datetime.now(UTC).timestamp() >= completed


def test_sse_streams_deltas_then_done(rig: Rig) -> None:
    import base64
    import json

    status, headers, raw = http("POST", f"{rig.url}/v1/audio/speech",
                                {"model": "gpt-4o-mini-tts", "input": LONG, "voice": "alloy",
                                 "response_format": "pcm", "stream_format": "sse"})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 4  # one per segment at least
    _check(b"".join(base64.b64decode(e["audio"]) for e in deltas), "pcm", LONG)


def test_an_idempotency_key_retried_is_answered_once(rig: Rig) -> None:
    key = f"retry-{uuid.uuid4().hex}"
    text = f"{SENTENCES[3]}"
    client = rig.client()

    def call() -> tuple[str, bytes, str]:
        r = client.audio.speech.with_raw_response.create(model="tts-1", voice="alloy", input=text,
                                                        response_format="wav", extra_headers={"Idempotency-Key": key})
        return r.headers["x-request-id"], r.content, r.headers["x-ttsflow-found"]

    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # a client that gave up and retried, twice, at once
        first = list(pool.map(lambda _: call(), range(3)))
    later = call()  # after completion: from this replica's memory
    assert {rid for rid, _, _ in [*first, later]} == {first[0][0]}
    assert first[0][0].startswith("idem-") and key not in first[0][0]
    assert len({audio for _, audio, _ in [*first, later]}) == 1
    assert later[2] == "memory"
    # a new replica whose reader starts now: nothing in memory, the stage drops the repeat,
    # so only the look-up in the caller's partition of tts.completed can answer
    fresh = rig.sup.gateway(f"fresh-{uuid.uuid4().hex[:4]}", rig.settings.replace(gateway_reader_lookback_s=0.0))
    rig.sup.wait_ready(fresh, timeout=120)
    r = http("POST", f"http://127.0.0.1:{fresh.settings.gateway.gateway_port}/v1/audio/speech",
             {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"}, {"Idempotency-Key": key})
    assert r[0] == 200 and (r[1]["x-request-id"], r[2]) == (first[0][0], first[0][1])
    assert r[1]["x-ttsflow-found"] == "topic"
    rig.sup.remove(fresh.name)
    assert rig.completions_of(first[0][0]) == 1
    _check(first[0][1], "wav", text)


def test_a_wait_that_runs_out_answers_504_and_a_retry_collects_the_audio(rig: Rig) -> None:
    impatient = rig.sup.gateway(f"impatient-{uuid.uuid4().hex[:4]}", rig.settings.replace(gateway_wait_s=0.1))
    rig.sup.wait_ready(impatient, timeout=120)
    key = f"slow-{uuid.uuid4().hex}"
    # 24 segments no cache holds: far more than the 0.1 s wait on any machine (twelve at a 0.3 s wait
    # were answered in time on a fast one)
    text = fresh(list(SENTENCES[6:18]) * 2)
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "flac"}
    status, headers, raw = http("POST", f"http://127.0.0.1:{impatient.settings.gateway.gateway_port}/v1/audio/speech", body,
                                {"Idempotency-Key": key})
    assert status == 504, raw
    import json

    err = json.loads(raw)["error"]
    assert err["code"] == "timeout" and headers["x-request-id"] in err["message"]
    status, headers2, audio = http("POST", f"{rig.url}/v1/audio/speech", body, {"Idempotency-Key": key})
    assert status == 200 and headers2["x-request-id"] == headers["x-request-id"]
    _check(audio, "flac", text)
    assert rig.completions_of(headers["x-request-id"]) == 1
    rig.sup.remove(impatient.name)


def test_two_replicas_on_one_port_both_answer(rig: Rig) -> None:
    port = free_port()
    s = rig.settings.replace(gateway_port=port, gateway_reuse_port=True)
    a = rig.sup.gateway(f"replica-a-{port}", s, keep_port=True)
    b = rig.sup.gateway(f"replica-b-{port}", s, keep_port=True)
    rig.sup.wait_ready(a, timeout=120)
    rig.sup.wait_ready(b, timeout=120)

    def call(i: int) -> tuple[str, bytes]:
        # a fresh connection per call, so the kernel spreads them over both listeners
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=180) as c:
            r = c.audio.speech.with_raw_response.create(model="tts-1", voice="echo", input=SENTENCES[i % 4],
                                                        response_format="pcm")
            return r.headers["x-ttsflow-replica"], r.content

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(call, range(16)))
    replicas = {rep for rep, _ in got}
    assert len(replicas) == 2, replicas
    for i, (_, audio) in enumerate(got):
        x, rate = decode_pcm(audio)
        assert len(x) / rate > 1.0, i
    rig.sup.remove(a.name)
    rig.sup.remove(b.name)


def test_with_no_stage_or_worker_the_gateway_says_so(rig: Rig) -> None:
    unique = f"gw-empty-{uuid.uuid4().hex[:8]}"
    s = isolated(rig.settings, unique).replace(gateway_wait_s=4.0, gateway_probe_s=1.0)
    ensure_topics(s, partitions=TEST_PARTITIONS)
    try:
        lonely = rig.sup.gateway(f"lonely-{unique}", s)
        rig.sup.wait_ready(lonely, timeout=120)
        status, _, raw = http("POST", f"http://127.0.0.1:{lonely.settings.gateway.gateway_port}/v1/audio/speech",
                                    {"model": "tts-1", "input": "Hello.", "voice": "alloy"})
        assert status == 504
        msg = raw.decode().lower()
        assert "no stage is running" in msg and "no worker is running" in msg, msg
        rig.sup.remove(lonely.name)
    finally:
        _cleanup(s, unique)


def test_models_voices_health_and_metrics(rig: Rig) -> None:
    status, _, raw = http("GET", f"{rig.url}/v1/models")
    assert status == 200 and b"tts-1" in raw
    models = [m.id for m in rig.client().models.list()]
    assert "tts-1" in models and "gpt-4o-mini-tts" in models
    status, _, raw = http("GET", f"{rig.url}/v1/audio/voices")
    assert status == 200 and b'"alloy":"heart"' in raw.replace(b" ", b"")
    wait_http(f"{rig.url}/healthz")
    status, _, raw = http("GET", f"{rig.url}/metrics")
    assert status == 200 and b"ttsflow_gateway_requests_total" in raw and b"ttsflow_gateway_in_flight_requests" in raw


def test_bad_input_gets_openai_errors(rig: Rig) -> None:
    client = rig.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(model="tts-1", voice="nobody", input="Hello.")
    assert e.value.body["code"] == "unknown_voice" and e.value.body["param"] == "voice"
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="tts-1", voice="alloy", input="   ")
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", speed=9.0)
    with pytest.raises(openai.APIStatusError) as big:
        client.audio.speech.create(model="tts-1", voice="alloy", input="a" * 5000)
    assert big.value.status_code == 413


def test_say_and_submit_say_when_no_stage_or_worker_runs(settings: Settings, tmp_path: Path) -> None:
    """The new user's trap: ``ttsflow say`` after ``make up`` alone used to wait in silence."""
    import subprocess
    import sys
    import time

    from streams.devstack.procs import settings_env

    env = {**settings_env(settings.replace(gateway_probe_s=1.0)), "PATH": "/usr/bin:/bin"}
    (tmp_path / "in.txt").write_text("Hello there.\n")
    for argv in (["say", "Hello", "-o", str(tmp_path / "x.wav"), "--timeout", "8"],
                 ["submit", str(tmp_path / "in.txt"), "--out", str(tmp_path / "out"), "--timeout", "8"]):
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "streams.cli", *argv], env=env, stderr=subprocess.PIPE, text=True)
        assert p.stderr is not None
        with p.stderr:
            first = p.stderr.readline()
            while first and not first.startswith("ttsflow"):  # submit's progress bar comes first
                first = p.stderr.readline()
            noticed = time.monotonic() - t0  # the notice comes before the timeout, not with it
            rest = p.stderr.read()
        assert p.wait(60) == 1
        assert "no stage is running" in first, first + rest
        assert "no worker is running" in rest or "no worker is running" in first
        assert noticed < 7.5, noticed


def test_partition_for_is_where_murmur2_random_puts_a_key(settings: Settings) -> None:
    from confluent_kafka import Producer

    from streams.kafka import producer_config
    from streams.kafka.partitioner import partition_for

    got: dict[str, int] = {}
    p = Producer(producer_config(settings.kafka))
    users = [f"user-{i}" for i in range(40)] + ["alice", "é-ü", "x" * 300]
    for u in users:
        p.produce(settings.kafka.topic_requests, key=u.encode(), value=b"{}",
                  on_delivery=lambda err, m, u=u: got.__setitem__(u, m.partition()))
    assert p.flush(30) == 0
    assert got == {u: partition_for(u.encode(), TEST_PARTITIONS) for u in users}
