# ruff: noqa: RUF001 - foreign scripts and full-width punctuation are the subject here
"""Script detection, the voice registry, the stage's language check and its metric."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.scripts import census, runs, script_of, strip
from engine.voices import (
    DEFAULT_MAX_CHARS_PER_S,
    VOICES,
    VoiceInfo,
    backend_voices,
    choose,
    installed_voices,
    judge,
    voice_info,
)
from schemas import Rejection, decode_segment, decode_segment_event
from streams.settings import Settings
from streams.stage.core import StageCore
from streams.stage.metrics import StageMetrics
from streams.stage.text import normalize


def _voice(name: str) -> VoiceInfo:
    v = voice_info(name)
    assert v is not None, name
    return v


HEART = _voice("heart")
S = Settings().replace(max_segment_chars=80, max_text_chars=5000, dedup_window_s=100)

CASES = {  # name: (text, the script the English voice cannot speak)
    "chinese": ("您好，欢迎致电客户服务中心。请问有什么可以帮您？", "Han"),
    "japanese": ("こんにちは、お元気ですか。今日はいい天気ですね。", "Hiragana"),
    "korean": ("안녕하세요, 고객 서비스 센터에 오신 것을 환영합니다.", "Hangul"),
    "cyrillic": ("Здравствуйте, чем я могу вам помочь сегодня?", "Cyrillic"),
    "emoji": ("😀😀 👍🏽 🎉", "Emoji"),
}


@pytest.mark.parametrize(("ch", "script"), [
    ("a", "Latin"), ("é", "Latin"), ("Ｚ", "Latin"), ("中", "Han"), ("𠀀", "Han"), ("あ", "Hiragana"),
    ("カ", "Katakana"), ("ｶ", "Katakana"), ("ー", "Katakana"), ("한", "Hangul"), ("ж", "Cyrillic"),
    ("ب", "Arabic"), ("λ", "Greek"), ("ש", "Hebrew"), ("क", "Devanagari"), ("ก", "Thai"), ("😀", "Emoji"),
    ("🇫", "Emoji"), ("★", "Emoji"), ("7", None), ("٣", None), (".", None), ("°", None), ("©", None), ("€", None),
    (" ", None), ("µ", None), ("ª", None), ("ⴰ", "Tifinagh"), ("\u0301", "M"), ("\ufe0f", "M"), ("\u200d", "M"),
])
def test_script_of_each_kind_of_character(ch: str, script: str | None) -> None:
    assert script_of(ch) == script


def test_runs_keep_marks_with_their_letter_and_cover_the_text() -> None:
    text = "Cafe\u0301 中文 ok👍🏽!"
    got = list(runs(text))
    assert "".join(r for _, r in got) == text
    assert got[0] == ("Latin", "Cafe\u0301")
    assert ("Han", "中文") in got and ("Emoji", "👍🏽") in got


def test_census_weighs_spoken_units() -> None:
    assert census("The quick brown fox") == {"Latin": 6}  # the 1, quick 2, brown 2, fox 1 (ASCII fast path)
    assert census("Thé quick brown fox") == {"Latin": 6}  # the same without it
    assert census("您的iPhone订单") == {"Han": 4, "Latin": 2}
    assert census("Привет мир") == {"Cyrillic": 3}
    assert census("👨\u200d👩\u200d👧 🇫🇷") == {"Emoji": 3}  # a ZWJ family is one emoji, a flag two indicators
    assert census("12345, 67%!") == {}


@given(st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), max_size=60))
def test_strip_keeps_every_latin_letter_and_removes_every_foreign_one(raw: str) -> None:
    text = normalize(raw)  # what the stage hands it
    out, cut = strip(text, ["Latin"])
    assert [c for c in out if script_of(c) == "Latin"] == [c for c in text if script_of(c) == "Latin"]
    assert all(script_of(c) in (None, "Latin", "M") for c in out)
    assert sum(cut.values()) == sum(n for s, n in census(text).items() if s != "Latin")
    assert out == out.strip() and "  " not in out


@pytest.mark.parametrize(("text", "spoken"), [
    ("Hello there. How are you today? 你好。", "Hello there. How are you today?"),
    ("Please check your 订单 status.", "Please check your status."),
    ("Your iPhone你好. Thanks!", "Your iPhone. Thanks!"),
    ("😀 Great job! 👍🏽", "Great job!"),
    ("Order 订单号: 123 shipped", "Order 123 shipped"),
])
def test_a_few_foreign_words_are_cut_cleanly(text: str, spoken: str) -> None:
    j = judge(text, HEART)
    assert j.speakable and j.text == spoken and sum(j.dropped.values()) > 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_text_mostly_in_another_script_is_not_speakable(name: str) -> None:
    text, script = CASES[name]
    j = judge(text, HEART)
    assert not j.speakable and j.foreign == script and j.foreign_share == 1.0


def test_the_foreign_share_decides_and_ascii_is_free() -> None:
    assert not judge("您的iPhone订单", HEART).speakable  # 4 of 6 units are Han
    assert not judge("Hello, Москва!", HEART).speakable  # half: not "a few"
    assert judge("Hello there, welcome to Москва!", HEART).speakable
    j = judge("Plain ASCII text, nothing to do.", HEART)
    assert j.speakable and j.text == "Plain ASCII text, nothing to do." and not j.dropped
    assert judge("12345", HEART).speakable  # digits are every voice's


def test_registry_is_data_known_without_a_model() -> None:
    assert backend_voices("hibari") == ("heart",) and backend_voices("piper") == ("joe",)
    assert backend_voices("nobody") is None
    for v in VOICES:
        d = v.as_dict()
        assert {"voice", "backend", "languages", "scripts", "sample_rate"} <= set(d)
        assert v.max_chars_per_s > 0 and all(s[0].isupper() for s in v.scripts)
        json.dumps(d)
    names = {v.voice for v in installed_voices()}
    assert "heart" in names  # hibari-tts is a core dependency
    code = ("import sys, engine.voices as v; v.installed_voices(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hibari', 'piper', 'onnxruntime', 'ChatTTS')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"  # nothing imported, let alone loaded
    assert DEFAULT_MAX_CHARS_PER_S >= max(v.max_chars_per_s for v in VOICES if v.chars_per_s is not None)


def test_choose_takes_another_served_voice_only_when_none_is_named() -> None:
    served = (_voice("heart"), _voice("chattts"))
    zh = CASES["chinese"][0]
    assert choose(zh, None, "heart", served).voice.voice == "chattts"
    named = choose(zh, "heart", "heart", served)
    assert named.voice.voice == "heart" and not named.speakable
    assert choose("Hello.", None, "heart", served).voice.voice == "heart"


# -- the stage ---------------------------------------------------------------------------

def _req(text: str, **fields: Any) -> bytes:
    return json.dumps({"request_id": "r-1", "user_id": "alice", "text": text, **fields}).encode()


def _handle(c: StageCore, value: bytes) -> Any:
    return c.handle(b"alice", value, partition=0, offset=0, timestamp_ms=None, seen={})


@pytest.mark.parametrize("name", sorted(CASES))
def test_stage_answers_unsupported_language_naming_the_script_and_the_speakers(name: str) -> None:
    text, script = CASES[name]
    out = _handle(StageCore(S.stage, S.kafka, S.engine, voices=("heart",), clock=lambda: 1.0), _req(text))
    assert out.kind == "failed" and out.code == "unsupported_language" and out.remember == "r-1"
    c = decode_segment_event(out.records[0].value)  # a rejection: the worker answers it
    assert isinstance(c, Rejection) and c.error.code == "unsupported_language"
    msg = c.error.message
    assert "'heart'" in msg and "Latin" in msg
    if script == "Emoji":
        assert "emoji" in msg
    else:
        assert script in msg and (("chattts" in msg) == (script == "Han" and "chattts" in
                                                          {v.voice for v in installed_voices()}))


def test_stage_cuts_a_foreign_word_and_counts_it() -> None:
    m = StageMetrics(0)
    c = StageCore(S.stage, S.kafka, S.engine, voices=("heart",), clock=lambda: 1.0, on_dropped=m.foreign_dropped)
    out = _handle(c, _req("Your order 订单 has shipped and will arrive tomorrow. 😀"))
    assert out.kind == "segments"
    assert [decode_segment(r.value).text for r in out.records] == ["Your order has shipped and will arrive tomorrow."]
    assert m.registry.get_sample_value("ttsflow_stage_foreign_units_dropped_total", {"script": "Han"}) == 2
    assert m.registry.get_sample_value("ttsflow_stage_foreign_units_dropped_total", {"script": "Emoji"}) == 1
    m.close()


def test_stage_picks_a_served_voice_that_speaks_the_text_when_none_is_named() -> None:
    c = StageCore(S.stage, S.kafka, S.engine, voices=("heart", "chattts"), clock=lambda: 1.0)
    zh = CASES["chinese"][0]
    segs = [decode_segment(r.value) for r in _handle(c, _req(zh)).records]
    assert segs and {s.voice for s in segs} == {"chattts"}
    assert _handle(c, _req(zh, voice="heart")).code == "unsupported_language"  # named: kept, refused
    assert {decode_segment(r.value).voice for r in _handle(c, _req("Hello.")).records} == {"heart"}


def test_stage_does_not_judge_voices_it_has_no_data_for() -> None:
    c = StageCore(S.stage, S.kafka, S.engine, voices=("a", "b"), clock=lambda: 1.0)
    assert _handle(c, _req(CASES["chinese"][0])).kind == "segments"
    c = StageCore(S.stage, S.kafka, S.engine, voices=None, clock=lambda: 1.0)
    assert _handle(c, _req(CASES["korean"][0], voice="whatever")).kind == "segments"


def test_latin_fast_path_agrees_with_the_slow_path() -> None:
    from engine.scripts import latin_only

    text = "Crème brûlée costs €5 — “really” ½ price… Ångström, Łódź, naïve façade."
    assert latin_only(text) and judge(text, HEART).text == text
    assert set(census(text)) == {"Latin"}
    assert not latin_only("Hello 😀") and not latin_only("Hello 中")
