"""The gateway's pure parts: API keys and limits, request ids, validation and error shapes
(through FastAPI's test client, with a stand-in pipeline that records what reached it),
the six encoders, and the murmur2 partitioner the completion look-up relies on."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from schemas import AudioRef, Completion, ErrorInfo
from schemas.events import REQUEST_ID_PATTERN
from streams.gateway.app import build_app
from streams.gateway.audio import RATE, encode, transcode
from streams.gateway.auth import Limiter, load_keys
from streams.gateway.errors import ApiError, KeyFileError
from streams.gateway.pipeline import failed_error, request_id_for
from streams.kafka.partitioner import partition_for
from streams.settings import load_settings


def _wav(seconds: float = 1.0) -> bytes:
    t = np.arange(int(RATE * seconds)) / RATE
    return encode((np.sin(2 * np.pi * 220 * t) * 9000).astype(np.int16), "wav")


class StubPipeline:
    """Answers every request with one second of tone, or the completion it was given."""

    healthy = True

    def __init__(self, completion: Completion | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = completion

    async def completion(self, **kw: Any) -> tuple[Completion, str]:
        self.calls.append(kw)
        c = self.answer or Completion(request_id=kw["rid"], user_id=kw["user"], status="ok", segments=1,
                                          audio=AudioRef(uri="s3://b/k", bucket="b", key="k", format="wav",
                                                         sample_rate=RATE, duration_s=1.0, bytes=1, sha256="0" * 64))
        return c, "new"

    async def events(self, **kw: Any) -> Any:  # a request answered before: its completion, no chunks
        yield (await self.completion(**kw))[0]

    async def audio(self, c: Completion) -> bytes:
        if c.status != "ok":
            raise failed_error(c)
        return _wav()

    async def run(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    def close(self) -> None:
        pass


def _client(tmp_path: Path, keys: dict[str, Any] | None = None, stub: StubPipeline | None = None,
            **env: str) -> tuple[TestClient, StubPipeline]:
    e = {"TTS_BACKEND": "hibari", **env}
    if keys is not None:
        f = tmp_path / "keys.json"
        f.write_text(json.dumps(keys))
        e["TTS_GATEWAY_KEYS_FILE"] = str(f)
    stub = stub or StubPipeline()
    return TestClient(build_app(load_settings(e), pipeline=stub)), stub  # type: ignore[arg-type]


BODY = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "wav"}


def test_open_gateway_speaks_as_the_open_user_and_maps_aliases(tmp_path: Path) -> None:
    c, stub = _client(tmp_path)
    with c:
        r = c.post("/v1/audio/speech", json={**BODY, "instructions": "whisper it", "speed": 1.25})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    assert stub.calls[0]["user"] == "local" and stub.calls[0]["voice"] == "heart" and stub.calls[0]["speed"] == 1.25
    assert r.headers["x-request-id"] == stub.calls[0]["rid"]


@pytest.mark.parametrize(("change", "status", "param"), [
    ({"input": ""}, 400, "input"), ({"input": "  \n"}, 400, "input"), ({"input": "a" * 4097}, 413, "input"),
    ({"voice": "nobody"}, 400, "voice"), ({"response_format": "ogg"}, 400, "response_format"),
    ({"speed": 0.2}, 400, "speed"), ({"speed": 4.5}, 400, "speed"), ({"model": "dall-e-3"}, 400, "model"),
    ({"stream_format": "video"}, 400, "stream_format"), ({"input": 5}, 422, "input"), ({"speed": "fast"}, 422, "speed"),
])
def test_bad_input_answers_openai_errors_and_reaches_no_pipeline(tmp_path: Path, change: dict[str, Any], status: int,
                                                                 param: str) -> None:
    c, stub = _client(tmp_path)
    with c:
        r = c.post("/v1/audio/speech", json={**BODY, **change})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param and err["message"]
    assert stub.calls == []


def test_missing_field_and_non_json_are_422(tmp_path: Path) -> None:
    c, _ = _client(tmp_path)
    with c:
        r = c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy"})
        assert r.status_code == 422 and r.json()["error"]["param"] == "input"
        r = c.post("/v1/audio/speech", content=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "error" in r.json()


def test_keys_401_and_users(tmp_path: Path) -> None:
    c, stub = _client(tmp_path, keys={"sk-alice": "alice", "sk-bob": {"user": "bob"}})
    with c:
        assert c.post("/v1/audio/speech", json=BODY).status_code == 401
        assert c.post("/v1/audio/speech", json=BODY, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.post("/v1/audio/speech", json=BODY, headers={"Authorization": "Basic sk-alice"}).status_code == 401
        assert c.get("/v1/models").status_code == 401
        assert c.post("/v1/audio/speech", json=BODY, headers={"Authorization": "Bearer sk-bob"}).status_code == 200
        assert c.get("/healthz").status_code == 200  # probes need no key
    assert [k["user"] for k in stub.calls] == ["bob"]


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    c, _ = _client(tmp_path, keys={"sk-a": {"user": "a", "rate_per_s": 0.1, "burst": 2}})
    h = {"Authorization": "Bearer sk-a"}
    with c:
        codes = [c.post("/v1/audio/speech", json=BODY, headers=h) for _ in range(3)]
    assert [r.status_code for r in codes] == [200, 200, 429]
    assert int(codes[2].headers["retry-after"]) >= 1 and codes[2].json()["error"]["type"] == "rate_limit_error"


def test_limiter_buckets_refill_and_concurrency_slots() -> None:
    now = [0.0]
    lim = Limiter(clock=lambda: now[0])
    ring = load_keys_from({"k": {"user": "u", "rate_per_s": 2, "burst": 2, "concurrency": 3}})
    key = ring.lookup("Bearer k")
    lim.enter(key)
    lim.enter(key)
    with pytest.raises(ApiError) as e:
        lim.enter(key)
    assert e.value.status == 429 and e.value.headers["Retry-After"] == "1"
    now[0] = 0.5  # one token back
    lim.enter(key)
    now[0] = 10.0
    with pytest.raises(ApiError) as e:  # three in flight
        lim.enter(key)
    assert e.value.code == "concurrency_limit_exceeded"
    lim.leave(key)
    lim.enter(key)


def load_keys_from(obj: Any, tmp: Path | None = None) -> Any:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(obj, f)
    return load_keys(f.name)


@pytest.mark.parametrize("bad", [[], {}, {"k": 5}, {"k": {"user": ""}}, {"k": {"user": "u", "rate_per_s": -1}}])
def test_bad_key_files_stop_the_gateway(bad: Any) -> None:
    with pytest.raises(KeyFileError):
        load_keys_from(bad)
    assert load_keys("") is None


def test_request_ids_are_scoped_derived_and_valid() -> None:
    import re

    a = request_id_for("alice", "key-1")
    assert a == request_id_for("alice", "key-1") != request_id_for("bob", "key-1")
    assert request_id_for("alice", None) != request_id_for("alice", None)
    hostile = request_id_for("alice", "../../etc/passwd\n\x00" + "é" * 100)
    for rid in (a, hostile, request_id_for("u", None)):
        assert re.match(REQUEST_ID_PATTERN, rid) and "/" not in rid


@pytest.mark.parametrize(("code", "status"), [("empty_text", 400), ("unknown_voice", 400), ("text_too_long", 413),
                                              ("storage_failed", 502), ("synthesis_failed", 500)])
def test_failed_completions_map_to_openai_errors(tmp_path: Path, code: str, status: int) -> None:
    failed = Completion(request_id="r1", user_id="local", status="failed", error=ErrorInfo(code=code, message="why"))
    c, _ = _client(tmp_path, stub=StubPipeline(failed))
    with c:
        r = c.post("/v1/audio/speech", json=BODY)
    assert r.status_code == status and r.json()["error"]["code"] == code and r.headers["x-request-id"] == "r1"


def test_sse_sends_deltas_then_done(tmp_path: Path) -> None:
    import base64

    c, _ = _client(tmp_path)
    with c:
        r = c.post("/v1/audio/speech", json={**BODY, "stream_format": "sse", "response_format": "pcm"})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert len(audio) == 2 * RATE


def test_voices_models_metrics_playground(tmp_path: Path) -> None:
    c, _ = _client(tmp_path, TTS_GATEWAY_VOICE_ALIASES="alloy,echo=heart,bogus")
    with c:
        v = c.get("/v1/audio/voices").json()
        assert v["aliases"] == {"alloy": "heart", "bogus": "heart", "echo": "heart"}
        assert {m["id"] for m in c.get("/v1/models").json()["data"]} >= {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"}
        c.post("/v1/audio/speech", json=BODY)
        m = c.get("/metrics").text
        assert 'ttsflow_gateway_requests_total{format="wav",status="200"} 1.0' in m
        assert "<audio" in c.get("/").text


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_format_round_trips_through_pyav(fmt: str) -> None:
    import av

    out, dur = transcode(_wav(1.5), fmt)
    assert abs(dur - 1.5) < 1e-6
    if fmt == "pcm":
        assert len(out) == 2 * int(1.5 * RATE)
        return
    with av.open(io.BytesIO(out)) as f:
        frames = list(f.decode(audio=0))
    got = sum(fr.samples for fr in frames) / frames[0].sample_rate
    assert abs(got - 1.5) < 0.1, (fmt, got)


def test_resampling_other_rates_to_24k() -> None:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros(22050, np.int16), 22050, format="WAV", subtype="PCM_16")
    out, dur = transcode(buf.getvalue(), "pcm")
    assert len(out) == 2 * RATE and abs(dur - 1.0) < 1e-3


def test_partition_for_spreads_and_is_stable() -> None:
    """(That it matches librdkafka's murmur2_random is checked against a real topic in
    tests/integration/test_gateway.py.)"""
    parts = [partition_for(f"user-{i}".encode(), 4) for i in range(200)]
    assert parts == [partition_for(f"user-{i}".encode(), 4) for i in range(200)]
    assert set(parts) == {0, 1, 2, 3}


def test_a_voice_mix_passes_in_its_one_spelling_and_a_bad_part_is_unknown_voice(tmp_path: Path) -> None:
    c, stub = _client(tmp_path, TTS_BACKEND="kokoro", TTS_BACKENDS="kokoro,hibari")
    with c:
        ok = c.post("/v1/audio/speech", json={**BODY, "voice": "zf_xiaobei (2)+zm_yunjian"})
        bad = [c.post("/v1/audio/speech", json={**BODY, "voice": v}) for v in
               ("zf_xiaobei+nobody", "zf_xiaobei+heart", "zf_xiaobei(0)+zm_yunjian")]
    assert ok.status_code == 200, ok.text
    assert [call["voice"] for call in stub.calls] == ["zf_xiaobei(2)+zm_yunjian(1)"]
    for r, part in zip(bad, ("'nobody'", "'heart'", "'zf_xiaobei(0)'"), strict=True):
        err = r.json()["error"]
        assert r.status_code == 400 and err["code"] == "unknown_voice" and err["param"] == "voice" and part in err["message"]


def test_every_served_backends_voices_are_known_by_name_and_listed_the_default_first(tmp_path: Path) -> None:
    """With TTS_BACKENDS=hibari,kokoro (what `make run` serves where kokoro is installed) a Mandarin or Japanese
    voice is asked for by name, and kokoro is a model name (Kokoro-FastAPI's clients send it); a voice no
    worker serves stays unknown."""
    c, stub = _client(tmp_path, TTS_BACKENDS="hibari,kokoro")
    with c:
        ok = [c.post("/v1/audio/speech", json={**BODY, "voice": v, **m}) for v, m in
              (("zf_xiaobei", {}), ("jf_alpha", {"model": "kokoro"}), ("heart", {}))]
        listed = c.get("/v1/audio/voices").json()["voices"]
        models = {m["id"] for m in c.get("/v1/models").json()["data"]}
    assert [r.status_code for r in ok] == [200, 200, 200], [r.text for r in ok]
    assert [call["voice"] for call in stub.calls] == ["zf_xiaobei", "jf_alpha", "heart"]
    names = [v["id"] for v in listed]
    assert names[0] == "heart" and {"zf_xiaobei", "zm_yunjian", "jf_alpha"} <= set(names)
    assert [v["id"] for v in listed if v["default"]] == ["heart"]
    assert {"hibari", "kokoro", "tts-1"} <= models
    alone, _ = _client(tmp_path / "alone")
    with alone:
        r = alone.post("/v1/audio/speech", json={**BODY, "voice": "zf_xiaobei"})
        m = alone.post("/v1/audio/speech", json={**BODY, "model": "kokoro"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_voice"
    assert m.status_code == 400 and m.json()["error"]["code"] == "model_not_found"


def test_a_voice_map_passes_resolved_and_a_bad_entry_is_a_400_naming_it(tmp_path: Path) -> None:
    """``voices`` (the OpenAI SDK sends it with extra_body): each voice resolved like ``voice`` (a served
    voice of another backend by name, a mix in its one spelling), languages those the stage cuts by."""
    c, stub = _client(tmp_path, TTS_BACKEND="kokoro", TTS_BACKENDS="kokoro,hibari")
    with c:
        ok = c.post("/v1/audio/speech", json={**BODY, "voice": "zf_xiaobei",
                                              "voices": {"ja": "jf_alpha (2)+jm_kumo", "en": "heart"}})
        bad = [c.post("/v1/audio/speech", json={**BODY, "voices": v}) for v in
               ({"ko": "zf_xiaobei"}, {"ja": "nobody"}, {"ja": "jf_alpha+heart"})]
        ssml = c.post("/v1/audio/speech", json={**BODY, "text_type": "ssml", "voices": {"ja": "jf_alpha"}})
        untyped = c.post("/v1/audio/speech", json={**BODY, "input": "<speak>Hi.</speak>", "voices": {"ja": "jf_alpha"}})
        calls = len(stub.calls)
        plain = c.post("/v1/audio/speech", json={**BODY, "input": "<speak>Hi.</speak>", "text_type": "text",
                                                 "voices": {"ja": "jf_alpha"}})
    assert ok.status_code == 200, ok.text
    assert stub.calls[0]["voices"] == {"ja": "jf_alpha(2)+jm_kumo(1)", "en": "heart"}
    for r, code, named in zip(bad, ("unsupported_language", "unknown_voice", "unknown_voice"),
                              ("'ko'", "voices.ja", "'heart'"), strict=True):
        err = r.json()["error"]
        assert r.status_code == 400 and err["code"] == code and err["param"] == "voices" and named in err["message"]
    assert ssml.status_code == 400 and ssml.json()["error"]["param"] == "voices"
    # no text_type: a whole <speak> document is SSML (the stage reads it so), so it takes no map either
    assert untyped.status_code == 400 and untyped.json()["error"]["param"] == "voices"
    assert plain.status_code == 200 and stub.calls[calls]["text_type"] == "text"


def test_a_voice_map_failed_by_the_stage_names_the_voices_param() -> None:
    c = Completion(request_id="r", user_id="u", status="failed",
                   error=ErrorInfo(code="unsupported_language", message="voices.zh: voice 'heart' speaks en-US"))
    e = failed_error(c)
    assert e.status == 400 and e.param == "voices"


def test_a_request_the_stage_rate_limited_is_a_429() -> None:
    c = Completion(request_id="r", user_id="u", status="failed",
                   error=ErrorInfo(code="rate_limited", message="this user (record key) started requests faster"))
    e = failed_error(c)
    assert e.status == 429 and e.type == "rate_limit_error" and e.code == "rate_limited"
    assert e.headers["Retry-After"] == "1"  # what OpenAI's SDK waits before retrying


class StreamingStub(StubPipeline):
    """Streams two chunks of half a second of tone, then the completion."""

    async def events(self, **kw: Any) -> Any:
        from schemas import Chunk

        self.calls.append(kw)
        for seq in range(2):
            yield Chunk(request_id=kw["rid"], user_id=kw["user"], seq=seq, total=2,
                        audio=AudioRef(uri=f"s3://b/p{seq}", bucket="b", key=f"p{seq}", format="wav", sample_rate=RATE,
                                       duration_s=0.5, bytes=1, sha256="0" * 64))
        yield (await self.completion(**kw))[0]

    async def part(self, ch: Any) -> bytes:
        return _wav(0.5)


def test_every_speaking_route_gives_its_concurrency_slot_back_streamed_or_not(tmp_path: Path) -> None:
    """One slot per key: each answer (whole, streamed, Kokoro's captioned lines, an error) must
    release it, or the next request of that key would get 429."""
    c, _ = _client(tmp_path, keys={"sk-a": {"user": "a", "rate_per_s": 100, "burst": 100, "concurrency": 1}},
                   stub=StreamingStub())
    h = {"Authorization": "Bearer sk-a"}
    captioned = {"input": "Hello there.", "voice": "alloy", "response_format": "wav", "return_timestamps": False}
    with c:
        answers = [c.post("/v1/audio/speech", json=BODY, headers=h),
                   c.post("/v1/audio/speech", json={**BODY, "stream_format": "audio", "response_format": "pcm"},
                          headers=h),
                   c.post("/dev/captioned_speech", json=captioned, headers=h),
                   c.post("/dev/captioned_speech", json={**captioned, "stream": False}, headers=h),
                   c.post("/v1/audio/speech", json={**BODY, "response_format": "ogg"}, headers=h),
                   c.post("/v1/audio/speech", json=BODY, headers=h)]
        m = c.get("/metrics").text
    assert [r.status_code for r in answers] == [200, 200, 200, 200, 400, 200]
    assert answers[1].headers["x-ttsflow-streamed"] == "true" and len(answers[1].content) == 2 * RATE
    lines = [json.loads(x) for x in answers[2].text.splitlines()]
    assert answers[2].headers["x-ttsflow-streamed"] == "true" and len(lines) >= 1
    assert all(x["audio_format"] == "audio/wav" for x in lines)
    assert "x-ttsflow-streamed" not in answers[3].headers and len(json.loads(answers[3].text)["audio"]) > 0
    assert 'ttsflow_gateway_requests_total{format="pcm",status="200"} 1.0' in m
    assert 'ttsflow_gateway_requests_total{format="invalid",status="400"} 1.0' in m


def test_a_streamed_wav_opens_with_a_header_of_unknown_length_then_raw_samples() -> None:
    import struct

    from streams.gateway.audio import StreamEncoder

    enc = StreamEncoder("wav")
    x = (np.arange(-5, 5) * 1000).astype(np.int16)
    first, second = enc.feed(x), enc.feed(x)
    riff, = struct.unpack_from("<I", first, 4)
    data_size, = struct.unpack_from("<I", first, 40)
    assert first[:4] == b"RIFF" and first[8:16] == b"WAVEfmt " and first[36:40] == b"data"
    assert riff == data_size == 0xFFFFFFFF and struct.unpack_from("<I", first, 24)[0] == RATE
    assert first[44:] == second == x.astype("<i2").tobytes()
