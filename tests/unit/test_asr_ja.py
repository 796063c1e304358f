
"""The Japanese intelligibility check itself: it scores readings (so spelling is not an error and a
misheard mora is), and it does not pass noise."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import asr_zh

pytest.importorskip("pyopenjtalk")

from streams.bench import asr_ja


def test_spelling_is_not_an_error_and_a_misheard_mora_is() -> None:
    assert asr_ja.reading("今日は3時です。") == asr_ja.reading("きょうは三時です")  # kanji/kana, digits
    assert asr_ja.reading("¥1,299") == asr_ja.reading("千二百九十九円")
    assert asr_ja.corpus_cer(["今日は3時です。"], ["きょうは、三時です"]) == 0.0
    assert 0.0 < asr_ja.corpus_cer(["今日は3時です。"], ["今日は4時です。"]) < 0.35  # さん -> よ
    assert asr_ja.corpus_cer(["今日は3時です。"], [""]) == 1.0  # nothing heard: all wrong


@pytest.mark.slow
def test_noise_does_not_pass() -> None:
    if not asr_zh.available():
        pytest.skip("needs the asr-zh extra (Whisper base)")
    rng = np.random.default_rng(7)
    noise = (0.1 * rng.standard_normal(16000 * 3)).astype(np.float32)
    ref = asr_ja.SENTENCES[0]
    assert asr_ja.corpus_cer([ref], [asr_ja.recognize(noise, 16000)]) > 0.5
