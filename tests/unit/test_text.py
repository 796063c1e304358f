# ruff: noqa: RUF001 - full-width and CJK punctuation is the subject here
"""Normalizer and splitter: properties (hypothesis) and one example per rule."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.stage.text import normalize, split_segments

_WS = re.compile(r"\s+")


def _squash(s: str) -> str:
    return _WS.sub("", s)


# Text that looks like what users send: English and Chinese words, digits, the
# punctuation the splitter cares about, odd whitespace and invisible characters.
_pieces = st.sampled_from(
    [
        "Dr.", "Mr.", "e.g.", "i.e.", "U.S.", "etc.", "3.14", "...", "…", "……", "。", "！", "？", "；",
        "，", "、", "：", ".", "!", "?", ",", ";", ":", " ", "  ", "\t", "\n", "\u3000", "\u200b", "\ufeff",
        "\u2060", "\u200d", "\u00ad", "\x07", "Ｈｅｌｌｏ", "１２３", "hello", "world", "The", "cat", "sat",
        "我们", "今天", "天气", "很好", "中文句子", "\"", "“", "”", "」", "e\u0301", "ﬁ", "①",
        "supercalifragilisticexpialidocious", "http://example.com/a,b", "1,000", "10:30",
    ]
)
_texts = st.one_of(
    st.lists(_pieces, max_size=80).map("".join),
    st.text(max_size=200),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=120),
)


@given(_texts)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_normalize_is_idempotent(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


@given(_texts)
@settings(max_examples=300)
def test_normalize_leaves_no_controls_runs_or_edges(text: str) -> None:
    out = normalize(text)
    assert out == out.strip()
    assert "  " not in out
    assert not any(ch in out for ch in "\u200b\u200c\u200d\u2060\ufeff\t\n\r\x00\x07")
    out.encode("utf-8")  # no lone surrogates left: the event can always be encoded


@given(_texts, st.integers(min_value=1, max_value=60))
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
def test_split_holds_limit_loses_nothing_keeps_order(text: str, max_chars: int) -> None:
    norm = normalize(text)
    segs = split_segments(norm, max_chars)
    assert all(1 <= len(s) <= max_chars for s in segs)
    assert all(s == s.strip() for s in segs)
    assert _squash("".join(segs)) == _squash(norm)
    assert (segs == []) == (norm == "")


@given(st.lists(st.sampled_from(["Hello there.", "How are you?", "你好。", "今天很好！", "Fine!"]), min_size=1, max_size=10))
def test_short_sentences_become_one_segment_each(sentences: list[str]) -> None:
    assert split_segments(" ".join(sentences), 300) == sentences


# --- normalize examples ----------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Ｈｅｌｌｏ　Ｗｏｒｌｄ！１２３", "Hello World!123"),  # full-width letters, digits, space, punctuation
        ("你好，世界！", "你好,世界!"),
        ("zero\u200bwidth\u200c\u200d\u2060\ufeffgone", "zerowidthgone"),
        ("soft\u00adhyphen and \u202ebidi\u202c", "softhyphen and bidi"),
        ("bell\x07 and nul\x00", "bell and nul"),
        ("  many \t\n\r spaces\u3000here  ", "many spaces here"),
        ("e\u0301", "é"),
        ("e\u200b\u0301", "é"),  # removal happens before composition
        ("…", "..."),
        ("", ""),
        ("\u200b \ufeff", ""),
    ],
)
def test_normalize_examples(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_normalize_keeps_meaningful_format_characters() -> None:
    # U+0600 ARABIC NUMBER SIGN is a prepended concatenation mark: it changes how the
    # following number is read, so it stays.
    assert normalize("\u0600123") == "\u0600123"


# --- split examples --------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith arrived. He sat down.", ["Dr. Smith arrived.", "He sat down."]),
        ("Mr. and Mrs. Lee met Prof. Wu.", ["Mr. and Mrs. Lee met Prof. Wu."]),
        ("Use tools, e.g. a hammer, i.e. this one. Next.", ["Use tools, e.g. a hammer, i.e. this one.", "Next."]),
        ("The U.S. economy grew. Good.", ["The U.S. economy grew.", "Good."]),
        ("Pi is 3.14 today. Yes.", ["Pi is 3.14 today.", "Yes."]),
        ("Apples, pears, etc. are fruit.", ["Apples, pears, etc. are fruit."]),
        ("J. K. Rowling wrote it. Really.", ["J. K. Rowling wrote it.", "Really."]),
        ("Wait... what happened? I don't know... Then we left.",
         ["Wait... what happened?", "I don't know...", "Then we left."]),
        ("Really?! Yes!", ["Really?!", "Yes!"]),
        ('He said "Stop." Then left.', ['He said "Stop."', "Then left."]),
        ("你好。今天天气很好！我们去公园吧？好的；再见……", ["你好。", "今天天气很好！", "我们去公园吧？", "好的；", "再见……"]),
        # after NFKC the Chinese marks are ASCII and are still sentence ends between CJK
        ("你好!今天好吗?好的;再见......然后", ["你好!", "今天好吗?", "好的;", "再见......", "然后"]),
        ("我说：“好。”然后走了。", ["我说：“好。”", "然后走了。"]),
        ("Visit example.com now. OK.", ["Visit example.com now.", "OK."]),
        ("Hello 世界。English again.", ["Hello 世界。", "English again."]),
    ],
)
def test_sentence_ends(text: str, expected: list[str]) -> None:
    assert split_segments(text, 300) == expected


def test_long_sentence_falls_back_to_clause_marks() -> None:
    text = "We went to the park, then to the market, and finally home; it was late."
    assert split_segments(text, 30) == ["We went to the park,", "then to the market,",
                                        "and finally home; it was late."]


def test_chinese_clause_marks() -> None:
    text = normalize("我们今天去公园，然后去超市，再去图书馆、博物馆，最后回家。")
    assert split_segments(text, 14) == ["我们今天去公园,然后去超市,", "再去图书馆、博物馆,", "最后回家。"]
    assert split_segments(text, 8) == ["我们今天去公园,", "然后去超市,", "再去图书馆、", "博物馆,", "最后回家。"]


def test_clause_marks_inside_numbers_and_urls_are_not_cuts() -> None:
    text = "It cost 1,000 dollars at 10:30 on http://a.b/c today"
    segs = split_segments(text, 20)
    assert "1,000" in " ".join(segs) and all("10:30" in s or "10" not in s for s in segs)


def test_word_boundary_hard_cut() -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta"
    segs = split_segments(text, 12)
    assert segs == ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]


def test_cjk_without_spaces_cut_between_characters() -> None:
    assert split_segments("中" * 25, 10) == ["中" * 10, "中" * 10, "中" * 5]


def test_mixed_cjk_and_english_prefers_cjk_boundary_over_mid_word() -> None:
    segs = split_segments("这是一个很长的句子" + "abcdefgh" + "我们继续", 12)
    assert "abcdefgh" in "".join(segs) and any("abcdefgh" in s for s in segs)


def test_word_longer_than_limit_is_cut_and_combining_mark_stays_with_base() -> None:
    assert split_segments("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]
    segs = split_segments("abcdefghi" + "e\u0301" + "xyz", 10)
    assert segs[0] == "abcdefghi" and segs[1].startswith("e\u0301")


def test_empty_and_whitespace_give_no_segments() -> None:
    assert split_segments("", 10) == []
    assert split_segments("   ", 10) == []


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        split_segments("x", 0)
