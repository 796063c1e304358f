# ruff: noqa: RUF001 - Chinese text and IPA are the subject here
"""Mandarin through the stage and several backends behind one engine: voice registry, stage routing,
and engine.router.BackendRouter's rules (fake engines: pure logic, no model)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from engine.base import Audio, Failure, ModelInfo, Prepared, SynthItem
from engine.engine import Engine
from engine.errors import BackendError
from engine.router import BackendRouter
from engine.voices import judge, voice_info
from schemas import Rejection, decode_segment, decode_segment_event, segment_hash
from streams.settings import Settings, SettingsError, load_settings
from streams.stage.core import StageCore, served_voices

ZH = "您好，您的订单已经发货，预计明天下午送达。"
S = Settings().replace(backends="hibari,kokoro")


def _handle(c: StageCore, text: str, **fields: Any) -> Any:
    raw = json.dumps({"request_id": "r-1", "user_id": "alice", "text": text, **fields}).encode()
    return c.handle(b"alice", raw, partition=0, offset=0, timestamp_ms=None, seen={})


def test_kokoro_voices_speak_chinese_japanese_and_english_and_heart_does_not_speak_chinese() -> None:
    v = voice_info("jf_alpha")
    assert v is not None and v.backend == "kokoro" and v.sample_rate == 24_000
    assert v.languages == ("ja-JP", "zh-CN", "en-US") and set(v.scripts) == {"Han", "Hiragana", "Katakana", "Latin"}
    assert judge(ZH, v).speakable and judge("您的iPhone订单", v).speakable and judge("今日はいい天気です。", v).speakable
    zm = voice_info("zm_yunjian")
    assert zm is not None and zm.languages[0] == "zh-CN" and "ja-JP" in zm.languages
    heart = voice_info("heart")
    assert heart is not None and not judge(ZH, heart).speakable


def test_backends_setting_orders_the_default_first_and_refuses_unknown_names() -> None:
    assert Settings().engine.served_backends == ("hibari",)
    assert S.engine.served_backends == ("hibari", "kokoro")
    assert Settings().replace(backend="kokoro", backends="hibari,kokoro").engine.served_backends == ("kokoro", "hibari")
    assert Settings().replace(backends="kokoro").engine.served_backends == ("kokoro",)
    with pytest.raises(SettingsError, match="TTS_BACKENDS"):
        load_settings(backends="hibari,espeak")


def test_stage_routes_chinese_to_kokoro_and_keeps_refusing_it_for_an_english_voice() -> None:
    voices = served_voices(S.engine)
    assert voices is not None and voices[0] == "heart" and "jf_alpha" in voices
    c = StageCore(S.stage, S.kafka, S.engine, voices=voices, clock=lambda: 1.0)
    segs = [decode_segment(r.value) for r in _handle(c, ZH, voice="jf_alpha").records]
    assert segs and {s.voice for s in segs} == {"jf_alpha"} and {s.model for s in segs} == {"kokoro"}
    assert segs[0].hash == segment_hash(segs[0].text, voice="jf_alpha", model="kokoro", model_version="",
                                        speed=1.0, sample_rate=None, format="wav")
    picked = [decode_segment(r.value) for r in _handle(c, ZH).records]  # no voice named: one that speaks it
    assert {s.voice for s in picked} == {"zm_yunjian"} and {s.model for s in picked} == {"kokoro"}
    english = [decode_segment(r.value) for r in _handle(c, "Hello there.").records]
    assert {s.voice for s in english} == {"heart"} and {s.model for s in english} == {"hibari"}
    out = _handle(c, ZH, voice="heart")
    assert out.kind == "failed" and out.code == "unsupported_language"
    rej = decode_segment_event(out.records[0].value)
    assert isinstance(rej, Rejection) and "zm_yunjian (backend kokoro" in rej.error.message


def test_stage_of_one_english_backend_still_refuses_chinese() -> None:
    s = Settings()
    c = StageCore(s.stage, s.kafka, s.engine, voices=served_voices(s.engine), clock=lambda: 1.0)
    assert _handle(c, ZH).code == "unsupported_language"


# -- the router, over fake engines ---------------------------------------------------------

class _Fake:
    """A backend that 'speaks' a constant tone and records every model call."""

    native_batching = True

    def __init__(self, name: str, voices: tuple[str, ...], sample_rate: int, calls: list[tuple[str, int]]) -> None:
        self.info = ModelInfo(name=name, version="1", precision="fp32", provider="CPUExecutionProvider")
        self.voices, self.default_voice, self.sample_rate = voices, voices[0], sample_rate
        self.calls = calls

    def prepare(self, item: SynthItem) -> Prepared:
        return Prepared(item=item, payload=item.text, length=len(item.text))

    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        self.calls.append((self.info.name, len(batch)))
        return [np.full(self.sample_rate // 10, 0.1, np.float32) for _ in batch]

    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        return np.asarray(raw, np.float32)

    def close(self) -> None:
        pass


def _router(calls: list[tuple[str, int]]) -> BackendRouter:
    return BackendRouter({"hibari": Engine(_Fake("hibari", ("heart",), 24_000, calls), max_batch=4),  # type: ignore[arg-type]
                          "piper": Engine(_Fake("piper", ("joe",), 22_050, calls), max_batch=4)})  # type: ignore[arg-type]


def test_router_never_mixes_backends_in_a_model_call_and_names_the_backend() -> None:
    calls: list[tuple[str, int]] = []
    r = _router(calls)
    seen: list[tuple[str, int, float]] = []
    r.on_batch = lambda b, n, s: seen.append((b, n, s))
    items = [SynthItem("hello there", v) for v in ("heart", "joe", "heart", "joe", "", "heart")]
    out = r.synthesize(items)
    assert all(isinstance(a, Audio) and a.sample_rate == 24_000 for a in out)  # piper's 22.05 kHz resampled
    assert abs(out[1].duration_s - 0.1) < 0.01  # type: ignore[union-attr]
    assert sorted(calls) == [("hibari", 4), ("piper", 2)]
    assert sorted((b, n) for b, n, _ in seen) == [("hibari", 4), ("piper", 2)]
    assert r.info.name == "hibari+piper" and r.info_for("joe").name == "piper" and r.info_for("heart").name == "hibari"
    assert r.voices == ("heart", "joe") and r.default_voice == "heart" and r.sample_rate == 24_000
    prepared = r.prepare_many(items)
    keys = {r.batch_key(p) for p in prepared if isinstance(p, Prepared)}
    assert {k[0] for k in keys} == {"hibari", "piper"}
    with pytest.raises(BackendError, match="mixes backends"):
        r.infer_batch([p for p in prepared if isinstance(p, Prepared)])


def test_router_reports_each_engines_measured_cost_by_voice() -> None:
    r = _router([])
    assert r.seconds_per_char == {}
    for e in r.engines.values():
        e.warm_up()
    assert set(r.seconds_per_char) == {"heart", "joe"} and all(v > 0 for v in r.seconds_per_char.values())


def test_router_fails_only_the_item_with_an_unknown_voice() -> None:
    r = _router([])
    out = r.synthesize([SynthItem("a b c", "nobody"), SynthItem("a b c", "joe")])
    assert isinstance(out[0], Failure) and out[0].code == "unknown_voice" and "heart, joe" in out[0].message
    assert isinstance(out[1], Audio)


def test_worker_metrics_count_segments_and_audio_per_backend() -> None:
    from streams.worker.metrics import WorkerMetrics

    m = WorkerMetrics(0)
    try:
        r = _router([])
        r.on_batch = m.backend_batch
        r.synthesize([SynthItem("a b c", "joe"), SynthItem("a b c", "heart"), SynthItem("a b c", "joe")])
        get = m.registry.get_sample_value
        assert get("ttsflow_worker_backend_segments_total", {"backend": "piper"}) == 2
        assert get("ttsflow_worker_backend_segments_total", {"backend": "hibari"}) == 1
        assert abs(get("ttsflow_worker_backend_audio_seconds_total", {"backend": "piper"}) - 0.2) < 0.01
    finally:
        m.close()
