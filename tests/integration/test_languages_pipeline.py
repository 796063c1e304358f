# ruff: noqa: RUF001 - foreign scripts are the point
"""Text the English voice cannot speak, through the real stage and worker.

What a Chinese (Japanese, Korean, Russian) customer would notice: their request to the
English voice comes back once, failed, with ``unsupported_language`` and a message that
names the script, instead of ``ok`` with silence. A mostly English text with one Chinese
word is answered ok (the word is cut), and every ok completion names the voice that spoke.
Counted as a ``read_committed`` reader of the completed topic sees it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.support.pipeline import answer_requests, by_request, check_audio

pytestmark = pytest.mark.integration

UNSUPPORTED = {  # request id: (text, the script the message must name)
    "zh": ("您好，欢迎致电客户服务中心。请问有什么可以帮您？", "Han"),
    "ja": ("こんにちは、お元気ですか。今日はいい天気ですね。", "Hiragana"),
    "ko": ("안녕하세요, 고객 서비스 센터에 오신 것을 환영합니다.", "Hangul"),
    "ru": ("Здравствуйте, чем я могу вам помочь сегодня?", "Cyrillic"),
    "emoji": ("😀😀 👍🏽 🎉", "emoji"),
}
SUPPORTED = {
    "mixed": "Your order 订单 has shipped and will arrive tomorrow morning.",
    "english": "Please call me back as soon as you get this message.",
}


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, backend="hibari", voice="")


def test_text_the_voice_cannot_speak_fails_once_and_mixed_text_is_ok(settings: Settings, tmp_path: Path) -> None:
    reqs = [{"request_id": f"lang-{k}", "user_id": f"user-{i % 3}", "text": t}
            for i, (k, (t, _)) in enumerate(UNSUPPORTED.items())]
    reqs += [{"request_id": f"lang-{k}", "user_id": f"user-{i % 3}", "text": t} for i, (k, t) in enumerate(SUPPORTED.items())]
    expected = {r["request_id"] for r in reqs}
    cs = answer_requests(settings, tmp_path / "logs", reqs, timeout=240)
    print(json.dumps({c.request_id: {"status": c.status, "code": c.error.code if c.error else None,
                                     "voice": c.model.voice if c.model else None,
                                     "message": c.error.message if c.error else None} for c in cs},
                     ensure_ascii=False))
    assert by_request(cs) == Counter({rid: 1 for rid in expected})
    got = {c.request_id: c for c in cs}
    for k, (_, script) in UNSUPPORTED.items():
        c = got[f"lang-{k}"]
        assert c.status == "failed" and c.error is not None and c.error.code == "unsupported_language", (k, c)
        assert script in c.error.message and "'heart'" in c.error.message
        assert c.audio is None
    for k in SUPPORTED:
        c = got[f"lang-{k}"]
        assert c.status == "ok", (k, c.error)
        assert c.model is not None and c.model.voice == "heart" and c.model.name == "hibari"
        samples, sr = check_audio(settings, c)
        assert len(samples) / sr > 1.5  # the English words are spoken, not a blip
