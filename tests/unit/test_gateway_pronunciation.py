# ruff: noqa: RUF001 - IPA stress marks are the subject here
"""The gateway's pronunciation surface without Kafka: SSML and lexicons passed to the pipeline, the
Kokoro-FastAPI phoneme routes (hibari's front end, loaded in process), global lexicons refused."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_gateway_unit import BODY, _client


def test_speech_passes_text_type_and_lexicons_to_the_pipeline(tmp_path: Path) -> None:
    c, stub = _client(tmp_path)
    with c:
        r = c.post("/v1/audio/speech", json={**BODY, "input": "<speak>Hi</speak>", "text_type": "ssml",
                                              "lexicons": ["brand", "global/common"]})
        bad = c.post("/v1/audio/speech", json={**BODY, "text_type": "html"})
        many = c.post("/v1/audio/speech", json={**BODY, "lexicons": [f"l{i}" for i in range(6)]})
    assert r.status_code == 200
    assert stub.calls[0]["text_type"] == "ssml" and stub.calls[0]["lexicons"] == ["brand", "global/common"]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text_type"
    assert many.status_code == 400 and many.json()["error"]["param"] == "lexicons" and len(stub.calls) == 1


def test_dev_phonemize_in_kokoro_fastapi_shape(tmp_path: Path) -> None:
    c, _ = _client(tmp_path)
    with c:
        r = c.post("/dev/phonemize", json={"text": "Call 555.", "language": "a"})
        empty = c.post("/dev/phonemize", json={"text": " ", "language": "a"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"phonemes", "tokens"} and "kˈɔl" in body["phonemes"]
    assert len(body["tokens"]) >= len(body["phonemes"].replace(" ", "")) // 2 and all(isinstance(t, int) for t in
                                                                                        body["tokens"])
    assert empty.status_code == 400


def test_generate_from_phonemes_goes_through_the_pipeline_as_ssml(tmp_path: Path) -> None:
    c, stub = _client(tmp_path)
    with c:
        r = c.post("/dev/generate_from_phonemes", json={"phonemes": 'həlˈO "wˈɜɹld"', "voice": "heart"})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    call = stub.calls[0]
    assert call["text_type"] == "ssml" and call["voice"] == "heart"
    assert call["text"] == '<speak><phoneme alphabet="x-voice" ph=\'həlˈO "wˈɜɹld"\'></phoneme></speak>'


def test_global_lexicons_are_not_written_through_the_gateway(tmp_path: Path) -> None:
    c, _ = _client(tmp_path)
    with c:
        r = c.put("/v1/lexicons/global", content=b"<lexicon/>")
        d = c.delete("/v1/lexicons/global")
    assert r.status_code == 403 and d.status_code == 403


def test_the_timestamps_answer_carries_the_ssml_marks_in_the_audio(tmp_path: Path) -> None:
    from schemas import AudioRef, Completion, MarkTime
    from streams.gateway.audio import RATE
    from tests.unit.test_gateway_unit import StubPipeline

    class Marked(StubPipeline):
        async def words(self, c: Completion) -> None:
            return None

    marked = Completion(request_id="r", user_id="u", status="ok", segments=1,
                        audio=AudioRef(uri="s3://b/k", bucket="b", key="k", format="wav", sample_rate=RATE,
                                       duration_s=1.0, bytes=1, sha256="0" * 64),
                        marks=[MarkTime(name="a", time_s=0.4), MarkTime(name="b", time_s=0.8)])
    c, _ = _client(tmp_path, stub=Marked(marked))
    with c:
        r = c.post("/v1/audio/speech", json={**BODY, "input": "<speak>Hi <mark name='a'/> there <mark name='b'/>"
                                              "</speak>", "text_type": "ssml", "timestamps": True})
    assert r.status_code == 200, r.text
    assert r.json()["marks"] == [{"name": "a", "time_s": 0.4}, {"name": "b", "time_s": 0.8}]
    c, _ = _client(tmp_path, stub=Marked())
    with c:
        plain = c.post("/v1/audio/speech", json={**BODY, "timestamps": True})
    assert plain.status_code == 200 and "marks" not in plain.json()  # none: the field is absent


def test_streamed_chunks_carry_their_marks_into_the_answers_time() -> None:
    from schemas import AudioRef, Chunk, MarkTime
    from streams.gateway.words import Carry

    def chunk(seq: int, marks: list[MarkTime] | None) -> Chunk:
        return Chunk(request_id="r", user_id="u", seq=seq, total=2, marks=marks,
                     audio=AudioRef(uri="s3://b/k", bucket="b", key="k", format="wav", sample_rate=24000,
                                    duration_s=1.5, bytes=1, sha256="0" * 64))

    carry = Carry()
    carry.add(chunk(0, None))
    assert carry.take_marks() == []
    carry.add(chunk(1, [MarkTime(name="a", time_s=0.25)]))  # played end to end: after 1.5 s of chunk 0
    assert carry.take_marks() == [{"name": "a", "time_s": 1.75}] and carry.take_marks() == []
