# ruff: noqa: RUF001 - Chinese punctuation is the subject here
"""Caption files from word timings: cut at word boundaries, within the line limits, valid VTT and SRT."""

from __future__ import annotations

import itertools

from engine.captions import cues, to_srt, to_vtt
from engine.timing import Word, words_of


def _timed(text: str, per_word_s: float = 0.4, pause_after: dict[int, float] | None = None) -> list[Word]:
    out, t = [], 0.0
    for k, (s, e) in enumerate(words_of(text)):
        out.append(Word(text[s:e], s, e, round(t, 4), round(t + per_word_s * 0.9, 4)))
        t += per_word_s + (pause_after or {}).get(k, 0.0)
    return out


def test_lines_hold_at_most_42_characters_two_lines_per_cue_and_no_word_is_cut() -> None:
    text = ("The committee met on Tuesday to discuss the proposed changes to the regional transport plan, "
            "including new bus routes, longer opening hours for stations and a simpler fare system for everyone.")
    words = _timed(text)
    cs = cues(text, words)
    assert len(cs) > 2
    for c in cs:
        assert 1 <= len(c.lines) <= 2
        assert all(len(line) <= 42 for line in c.lines)
    shown = " ".join(" ".join(c.lines) for c in cs).split()
    assert [w.strip(",.") for w in shown] == [w.text for w in words]  # every word once, in order, whole
    assert all(a.end_s <= b.start_s for a, b in itertools.pairwise(cs))


def test_a_sentence_end_or_a_long_pause_starts_a_new_cue() -> None:
    text = "Hello there. How are you today"
    cs = cues(text, _timed(text, pause_after={3: 2.0}))
    assert [c.lines for c in cs] == [("Hello there.",), ("How are",), ("you today",)]


def test_an_abbreviation_or_an_initial_does_not_end_the_cue() -> None:
    text = "Dr. Smith met J. K. Rowling. Then he left."
    cs = cues(text, _timed(text, per_word_s=0.2))
    assert [c.lines for c in cs] == [("Dr. Smith met J. K. Rowling.",), ("Then he left.",)]


def test_mandarin_cues_keep_the_text_as_written_without_added_spaces() -> None:
    text = "您的订单已经发货，请注意查收。"
    cs = cues(text, _timed(text))
    assert "".join("".join(c.lines) for c in cs) == text


def test_vtt_and_srt_render_times_and_numbering() -> None:
    text = "One two. Three."
    cs = cues(text, [Word("One", 0, 3, 0.0, 0.3), Word("two", 4, 7, 0.35, 0.8), Word("Three", 9, 14, 3661.5, 3662.25)])
    vtt = to_vtt(cs)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:00.800\nOne two.\n\n")
    assert "01:01:01.500 --> 01:01:02.250\nThree.\n" in vtt
    srt = to_srt(cs)
    assert srt.startswith("1\n00:00:00,000 --> 00:00:00,800\nOne two.\n\n2\n01:01:01,500 --> 01:01:02,250\nThree.\n")
