"""The wire contract: every event round-trips, every bad field is named, nothing else escapes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import (
    AudioRef,
    Completion,
    ContentError,
    DeadLetter,
    ErrorInfo,
    InvalidField,
    InvalidJSON,
    ModelInfo,
    Request,
    SchemaError,
    Segment,
    Timings,
    check_content,
    decode_completion,
    decode_dead_letter,
    decode_request,
    decode_segment,
    encode,
    peek_request_id,
    request_hash,
    segment_hash,
)
from schemas.jsonschema import MESSAGES, SCHEMAS, render

SHA = "ab" * 32
NOW = datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=UTC)


def _request(**kw: object) -> dict[str, object]:
    return {"request_id": "req-1", "user_id": "user-1", "text": "Hello there.", **kw}


def _raw(obj: object) -> bytes:
    return json.dumps(obj).encode()


# --- round trips ------------------------------------------------------------------------------

FULL_EVENTS = [
    (Request(request_id="r.1:a-b_c", user_id="u", text="Hi. Ünïcødé ✓", voice="v1", format="flac", speed=1.5,
             sample_rate=22050, created_at=NOW), decode_request),
    (Request(request_id="r", user_id="u", text="minimal"), decode_request),
    (Segment(request_id="r", user_id="u", seq=2, total=3, text="last part", hash=SHA, request_hash="cd" * 32,
             voice="v1", format="wav", speed=0.5, sample_rate=16000, model="hibari", model_version="3",
             created_at=NOW, enqueued_at=NOW + timedelta(seconds=1), parts=[SHA, SHA, "ef" * 32]), decode_segment),
    (Completion(request_id="r", user_id="u", status="ok",
                audio=AudioRef(uri="s3://b/k", bucket="b", key="k", format="wav", sample_rate=22050,
                               duration_s=1.25, bytes=55_000, sha256=SHA),
                segments=3, cached_segments=1, model=ModelInfo(name="hibari", version="3", precision="fp32",
                                                               provider="CPUExecutionProvider", voice="heart"),
                timings=Timings(e2e_ms=120.5, synth_ms=80.0, queue_ms=3.0), completed_at=NOW), decode_completion),
    (Completion(request_id="r", user_id="u", status="failed",
                error=ErrorInfo(code="text_too_long", message="too long")), decode_completion),
    (DeadLetter(reason="invalid_json", message="not JSON", source_topic="tts.requests", source_partition=3,
                source_offset=42, key_b64=None, value_b64="/w==", timestamp_ms=1_700_000_000_000), decode_dead_letter),
]


@pytest.mark.parametrize(("event", "decode"), FULL_EVENTS, ids=lambda x: type(x).__name__)
def test_every_event_round_trips(event: object, decode: object) -> None:
    raw = encode(event)  # type: ignore[arg-type]
    assert decode(raw) == event  # type: ignore[operator]
    assert decode(raw.decode()) == event  # type: ignore[operator]  # str input too
    assert json.loads(raw)["schema_version"] == 1


def test_completion_wire_shape_has_the_documented_fields() -> None:
    ev = FULL_EVENTS[3][0]
    obj = json.loads(encode(ev))  # type: ignore[arg-type]
    assert {"request_id", "user_id", "status", "audio", "segments", "cached_segments", "model", "timings",
            "error"} <= set(obj)
    assert set(obj["audio"]) >= {"uri", "bucket", "key", "format", "sample_rate", "duration_s", "bytes", "sha256"}
    assert set(obj["model"]) == {"name", "version", "precision", "provider", "voice"}
    assert obj["model"]["voice"] == "heart"
    assert {"e2e_ms", "synth_ms"} <= set(obj["timings"])
    assert obj["error"] is None


def test_a_completion_without_model_voice_still_decodes() -> None:
    """``model.voice`` is optional: completions written before it existed stay valid v1."""
    obj = json.loads(encode(FULL_EVENTS[3][0]))  # type: ignore[arg-type]
    del obj["model"]["voice"]
    c = decode_completion(json.dumps(obj))
    assert c.model is not None and c.model.voice is None and c.model.name == "hibari"


def test_request_defaults_and_unknown_fields_ignored() -> None:
    r = decode_request(_raw(_request(future_field={"x": 1})))
    assert (r.voice, r.format, r.speed, r.sample_rate, r.created_at, r.schema_version) == (None, "wav", 1.0, None,
                                                                                             None, 1)


def test_created_at_without_offset_is_utc() -> None:
    r = decode_request(_raw(_request(created_at="2026-11-30T12:00:00")))
    assert r.created_at == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert r.created_at is not None and r.created_at.tzinfo is not None


def test_created_at_keeps_its_offset() -> None:
    r = decode_request(_raw(_request(created_at="2026-11-30T13:00:00+02:00")))
    assert r.created_at == datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    assert r.created_at is not None and r.created_at.utcoffset() == timedelta(hours=2)
    assert decode_request(encode(r)) == r


ids = st.from_regex(r"\A[A-Za-z0-9._:-]{1,128}\Z")


@given(rid=ids, user=st.text(min_size=1, max_size=256), text=st.text(max_size=500),
       speed=st.floats(min_value=0.25, max_value=4.0), sr=st.none() | st.integers(8000, 48000))
def test_any_valid_request_round_trips(rid: str, user: str, text: str, speed: float, sr: int | None) -> None:
    req = Request(request_id=rid, user_id=user, text=text, speed=speed, sample_rate=sr)
    assert decode_request(encode(req)) == req
    assert peek_request_id(encode(req)) == rid


# --- invalid fields: each names its field ---------------------------------------------------------

INVALID_REQUESTS = [
    ("missing request_id", {"user_id": "u", "text": "t"}, "request_id"),
    ("missing user_id", {"request_id": "r", "text": "t"}, "user_id"),
    ("missing text", {"request_id": "r", "user_id": "u"}, "text"),
    ("request_id with space", _request(request_id="a b"), "request_id"),
    ("request_id with slash", _request(request_id="a/b"), "request_id"),
    ("request_id empty", _request(request_id=""), "request_id"),
    ("request_id 129 chars", _request(request_id="a" * 129), "request_id"),
    ("request_id a number", _request(request_id=12), "request_id"),
    ("user_id empty", _request(user_id=""), "user_id"),
    ("user_id a list", _request(user_id=["u"]), "user_id"),
    ("text a number", _request(text=5), "text"),
    ("text null", _request(text=None), "text"),
    ("speed too high", _request(speed=4.01), "speed"),
    ("speed too low", _request(speed=0.2), "speed"),
    ("speed zero", _request(speed=0), "speed"),
    ("speed a string", _request(speed="fast"), "speed"),
    ("speed a bool", _request(speed=True), "speed"),
    ("sample_rate too low", _request(sample_rate=7999), "sample_rate"),
    ("sample_rate too high", _request(sample_rate=48001), "sample_rate"),
    ("sample_rate a float", _request(sample_rate=22050.5), "sample_rate"),
    ("sample_rate a string", _request(sample_rate="22050"), "sample_rate"),
    ("created_at not a date", _request(created_at="yesterday"), "created_at"),
    ("created_at a number", _request(created_at=1700000000), "created_at"),
    ("created_at date only", _request(created_at="2026-11-30"), "created_at"),
    ("voice a number", _request(voice=3), "voice"),
    ("voice empty", _request(voice=""), "voice"),
    ("voice 129 chars", _request(voice="v" * 129), "voice"),  # a 4-voice mix fits in 128
    ("format a number", _request(format=1), "format"),
    ("schema_version 2", _request(schema_version=2), "schema_version"),
    ("schema_version a string", _request(schema_version="1"), "schema_version"),
]


@pytest.mark.parametrize(("obj", "field"), [(o, f) for _, o, f in INVALID_REQUESTS],
                         ids=[n for n, _, _ in INVALID_REQUESTS])
def test_invalid_request_field_is_named(obj: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidField) as e:
        decode_request(_raw(obj))
    assert e.value.field == field
    assert e.value.code == "invalid_field"
    assert field in e.value.message


INVALID_JSON = [
    ("array", b"[1, 2]"),
    ("string", b'"hello"'),
    ("number", b"42"),
    ("null", b"null"),
    ("empty", b""),
    ("truncated", b'{"request_id": "r"'),
    ("not json", b"request please"),
    ("non-utf8 in a string", b'{"request_id": "r", "user_id": "u", "text": "\xff\xfe"}'),
    ("non-utf8 bytes only", b"\xff\xfe\x00\x01"),
    ("deep array", b"[" * 100_000 + b"]" * 100_000),
    ("deep nesting inside an object", b'{"request_id": "r", "user_id": "u", "text": "t", "x": '
     + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("deep objects", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
]


@pytest.mark.parametrize("raw", [r for _, r in INVALID_JSON], ids=[n for n, _ in INVALID_JSON])
def test_not_a_json_object_is_invalid_json(raw: bytes) -> None:
    with pytest.raises(InvalidJSON) as e:
        decode_request(raw)
    assert e.value.code == "invalid_json"
    assert e.value.field is None


@pytest.mark.parametrize("decode", [decode_request, decode_segment, decode_completion, decode_dead_letter])
@pytest.mark.parametrize("raw", [b"[]", b"\xff", b"{", b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
def test_decoders_raise_only_schema_errors(decode: object, raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode(raw)  # type: ignore[operator]


def test_segment_and_completion_fields_are_named() -> None:
    seg = json.loads(encode(FULL_EVENTS[2][0]))  # type: ignore[arg-type]
    for field, bad in (("seq", -1), ("total", 0), ("hash", "XYZ"), ("text", ""), ("parts", ["nothex"])):
        with pytest.raises(InvalidField) as e:
            decode_segment(_raw({**seg, field: bad}))
        assert e.value.field == field
    comp = json.loads(encode(FULL_EVENTS[3][0]))  # type: ignore[arg-type]
    for field, bad in (("status", "maybe"), ("segments", -1), ("audio", {"uri": "x"})):
        with pytest.raises(InvalidField) as e:
            decode_completion(_raw({**comp, field: bad}))
        assert e.value.field == field


# --- peek_request_id ----------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [
    (b'{"request_id": "ok-1", "text": 5}', "ok-1"),          # readable id, bad elsewhere: failed completion
    (b'{"request_id": "bad id", "user_id": "u"}', None),     # unreadable id: dead letter
    (b'{"request_id": 7}', None),
    (b'{"user_id": "u"}', None),
    (b"[\"request_id\"]", None),
    (b"\xff\xfe", None),
    (b"{", None),
    (b"[" * 100_000, None),
    (None, None),
    ('{"request_id": "as-str"}', "as-str"),
])
def test_peek_request_id(raw: bytes | str | None, expected: str | None) -> None:
    assert peek_request_id(raw) == expected


# --- check_content --------------------------------------------------------------------------------

def test_check_content_codes() -> None:
    ok = Request(request_id="r", user_id="u", text="Hello.", voice="a")
    check_content(ok, max_text_chars=100, voices=("a", "b"))  # no error
    cases = [
        (Request(request_id="r", user_id="u", text="   \n\t"), {}, "empty_text", "text"),
        (Request(request_id="r", user_id="u", text="x" * 11), {}, "text_too_long", "text"),
        (Request(request_id="r", user_id="u", text="hi", format="mp3"), {}, "unsupported_format", "format"),
        (Request(request_id="r", user_id="u", text="hi", voice="zz"), {"voices": ("a",)}, "unknown_voice", "voice"),
        (ok, {"text": "  "}, "empty_text", "text"),  # the normalized text decides
    ]
    for req, kw, code, field in cases:
        with pytest.raises(ContentError) as e:
            check_content(req, max_text_chars=10, **kw)  # type: ignore[arg-type]
        assert (e.value.code, e.value.field) == (code, field)
    check_content(Request(request_id="r", user_id="u", text="x" * 10), max_text_chars=10)  # the limit itself is fine


# --- hashes ---------------------------------------------------------------------------------------

def test_segment_hash_changes_with_every_input() -> None:
    base = {"voice": "v", "model": "m", "model_version": "1", "speed": 1.0, "sample_rate": 22050, "format": "wav"}
    h = segment_hash("hello", **base)  # type: ignore[arg-type]
    assert h == segment_hash("hello", **base)  # type: ignore[arg-type]
    variants = [segment_hash("hello!", **base)]  # type: ignore[arg-type]
    for k, v in (("voice", "w"), ("model", "n"), ("model_version", "2"), ("speed", 1.1), ("sample_rate", 16000),
                 ("format", "flac")):
        variants.append(segment_hash("hello", **{**base, k: v}))  # type: ignore[arg-type]
    assert len({h, *variants}) == len(variants) + 1
    # Length-prefixed parts: moving characters between fields changes the hash.
    assert segment_hash("ab", **{**base, "voice": "c"}) != segment_hash("a", **{**base, "voice": "bc"})  # type: ignore[arg-type]


def test_request_hash_depends_on_order_and_format() -> None:
    a, b = "11" * 32, "22" * 32
    assert request_hash([a, b], format="wav") == request_hash([a, b], format="wav")
    assert request_hash([a, b], format="wav") != request_hash([b, a], format="wav")
    assert request_hash([a, b], format="wav") != request_hash([a, b], format="flac")


# --- JSON Schema files ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_files_match_the_types(name: str) -> None:
    path = Path(__file__).resolve().parents[2] / "schemas" / "json" / f"{name}.schema.json"
    assert path.read_text() == render(name), f"{path} is stale: run python -m schemas.jsonschema"


def test_request_schema_file_states_the_request_id_rule() -> None:
    schema = json.loads(render("request.v1"))
    props = schema["$defs"]["Request"]["properties"] if "$defs" in schema else schema["properties"]
    assert props["request_id"]["pattern"] == "^[A-Za-z0-9._:-]{1,128}$"


def test_asyncapi_documents_every_topic_and_existing_schema_files() -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    from streams.settings import Settings

    here = Path(__file__).resolve().parents[2] / "schemas"
    doc = yaml.safe_load((here / "asyncapi.yaml").read_text())
    s = Settings()
    assert set(doc["channels"]) == {s.kafka.topic_requests, s.kafka.topic_segments, s.kafka.topic_completed, s.kafka.topic_dlq, s.kafka.topic_done,
                                     s.kafka.topic_chunks, s.kafka.topic_lexicons, s.kafka.topic_lexicons_global}
    refs = {m["payload"]["$ref"] for m in doc["components"]["messages"].values() if "$ref" in m["payload"]}
    assert refs == {f"./json/{name}.schema.json" for name in MESSAGES}
    for ref in refs:
        assert (here / ref).is_file()
    assert doc["channels"][s.kafka.topic_done]["bindings"]["kafka"]["topicConfiguration"]["cleanup.policy"] == ["compact", "delete"]


def test_every_stable_error_code_is_documented_in_schema_asyncapi_and_user_docs() -> None:
    root = Path(__file__).resolve().parents[2]
    codes = {"invalid_json", "invalid_field", "empty_text", "text_too_long", "unknown_voice", "unsupported_format",
             "unsupported_language", "internal_error", "synthesis_failed", "engine_error", "part_missing",
             "audio_too_long", "storage_failed", "join_failed", "invalid_ssml", "unknown_lexicon",
             "too_many_lexicons"}
    completion = json.loads((root / "schemas" / "json" / "completion.v1.schema.json").read_text())
    described = completion["$defs"]["ErrorInfo"]["properties"]["code"]["description"]
    for where, text in (("completion schema", described), ("asyncapi", (root / "schemas" / "asyncapi.yaml").read_text()),
                        ("docs/using/kafka.md", (root / "docs" / "using" / "kafka.md").read_text())):
        missing = sorted(c for c in codes if f"{c}" not in text)
        assert missing == [], f"{where} does not list {missing}"
