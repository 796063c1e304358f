# ruff: noqa: RUF001 - Chinese punctuation is the subject here
"""Word timings, the pure part: words as written, phonemes traced back to them, times from durations."""

from __future__ import annotations

import numpy as np
import pytest

from engine.timing import plan_words, word_times, words_of


def _words(text: str) -> list[str]:
    return [text[s:e] for s, e in words_of(text)]


@pytest.mark.parametrize(("text", "words"), [
    ("Hello, world!", ["Hello", "world"]),
    ("It costs $9.99 (42%) today...", ["It", "costs", "$9.99", "42%", "today"]),
    ("Dr. Smith won't go -- at -5 degrees.", ["Dr", "Smith", "won't", "go", "at", "-5", "degrees"]),
    ("  ...  ", []),
])
def test_words_are_cut_as_written_with_edge_punctuation_trimmed(text: str, words: list[str]) -> None:
    assert _words(text) == words


def test_mandarin_is_cut_by_jieba_and_latin_runs_stay_whole() -> None:
    words = _words("您的iPhone15订单已经发货，请注意查收。")
    assert "iPhone15" in words and "订单" in words and "发货" in words
    assert all(w not in ("，", "。") for w in words)
    assert "".join(words) == "您的iPhone15订单已经发货请注意查收"
    assert "-5℃" in _words("今天气温-5℃。")


# A toy front end: each letter is a phoneme; digits read as words (so "42" has two spoken words).
_DIGITS = {"4": "four", "2": "two"}


def _toy(word: str) -> str:
    return " ".join(_DIGITS[c] if c in _DIGITS else c for c in word) if word.isdigit() else word.lower()


def test_a_number_is_one_word_spanning_everything_it_is_read_as() -> None:
    text = "I have 42 cats."
    chunk = "i have four two cats."  # what the "model" saw: normalized, with a pause symbol
    plan = plan_words(text, [chunk], _toy)
    owners = plan.owners[0]
    assert [text[s:e] for s, e in plan.words] == ["I", "have", "42", "cats"]
    spoken_42 = [chunk[i] for i in range(len(chunk)) if owners[i] == 2]
    assert "".join(spoken_42) == "four two"
    assert owners[chunk.index(".")] == -1  # the pause belongs to no word


def test_times_are_sums_of_durations_and_pauses_fall_between_words() -> None:
    text = "ab, cd"
    chunks = ["ab,", "cd"]  # two model calls, the second starting after a gap
    plan = plan_words(text, chunks, str)
    units = [np.asarray([10, 20, 30]), np.asarray([5, 5])]  # samples per phoneme
    starts = [0, 100]
    words = word_times(plan, plan.owners, units, starts, sample_rate=100, total_samples=110)
    assert [(w.text, w.start, w.end) for w in words] == [("ab", 0, 2), ("cd", 4, 6)]
    assert (words[0].start_s, words[0].end_s) == (0.0, 0.3)  # the comma's 30 samples are not in "ab"
    assert (words[1].start_s, words[1].end_s) == (1.0, 1.1)


def test_a_word_read_as_nothing_gets_an_empty_span_where_it_stands_and_starts_never_decrease() -> None:
    text = "a & b"
    plan = plan_words(text, ["a b"], lambda w: "" if w == "&" else w)
    words = word_times(plan, plan.owners, [np.asarray([4, 1, 4])], [0], sample_rate=10, total_samples=9)
    assert [w.text for w in words] == ["a", "&", "b"]
    assert words[1].start_s == words[1].end_s == words[0].end_s
    assert [w.start_s for w in words] == sorted(w.start_s for w in words)
    assert words[-1].end_s <= 0.9


def test_shifted_moves_a_word_into_a_longer_text_and_audio() -> None:
    plan = plan_words("hi", ["hi"], str)
    (w,) = word_times(plan, plan.owners, [np.asarray([50, 50])], [0], sample_rate=100, total_samples=100)
    s = w.shifted(10, 2.5)
    assert (s.start, s.end, s.start_s, s.end_s) == (10, 12, 2.5, 3.5)


_IPA = {"Hello": "həlˈoʊ", "big": "bˈɪɡ", "world": "wˈɜːld", "in": "ˈɪn", "the": "ðə", "box": "bˈɑks"}


def test_spoken_tokens_that_pair_off_with_the_words_give_each_its_own_and_punctuation_none() -> None:
    chunk = "həlˈoʊ, bˈɪɡ wˈɜːld."
    plan = plan_words("Hello, big world.", [chunk], _IPA.__getitem__)
    owners = plan.owners[0]
    assert [chunk[i] for i in range(len(chunk)) if owners[i] == 2] == list("wˈɜːld")
    assert owners[chunk.index(",")] == owners[chunk.index(".")] == -1
    assert [chunk[i] for i in range(len(chunk)) if owners[i] == 0] == list("həlˈoʊ")


def test_words_the_front_end_ran_together_are_still_traced_by_the_alignment() -> None:
    chunk = "ɪnðə bˈɑks"  # eSpeak reads "in the" as one run: the tokens do not pair off
    plan = plan_words("in the box", [chunk], _IPA.__getitem__)
    owners = plan.owners[0]
    assert "".join(chunk[i] for i in range(len(chunk)) if owners[i] == 1) == "ðə"
    assert "".join(chunk[i] for i in range(len(chunk)) if owners[i] == 2) == "bˈɑks"


def test_as_many_tokens_that_share_no_sound_are_not_taken_for_the_same_words() -> None:
    chunk = "cd ab"  # two tokens as the text has two words, but paired in order they share no sound
    plan = plan_words("ab cd", [chunk], str)
    owners = plan.owners[0]
    assert list(owners[3:5]) == [0, 0]  # "ab" is the first word wherever it was heard
    assert 1 not in owners[0:2]
