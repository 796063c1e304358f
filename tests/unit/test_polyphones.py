"""Mandarin polyphones read by kokoro's own Mandarin front end (misaki's legacy G2P: jieba words,
pypinyin per word, after :func:`engine.zh_text.normalize_zh`), checked phrase by phrase against
the phonemes of the right reading (:data:`engine.polyphones.TABLE`).

Before the fixes of :mod:`engine.polyphones` the stock dictionaries read 98 of 105 right (93%);
after, all of them; with an x-pinyin override every phrase reads as asked.
"""

from __future__ import annotations

import pytest

pytest.importorskip("misaki.zh")

from engine import polyphones
from engine.pron import pinyin_to_kokoro
from engine.zh_text import normalize_zh


def _read(sentence: str) -> str:
    from misaki.zh import ZHG2P

    return str(ZHG2P(version=None)(normalize_zh(sentence))[0]).replace(" ", "")


def test_the_table_covers_enough_phrases_and_characters() -> None:
    chars = {c for _, phrase, _ in polyphones.TABLE for c in phrase if c in "重行长乐还觉数发好中为参便差传调藏少假处和几角都会着降弹得"}
    assert len(polyphones.TABLE) >= 60 and len(chars) >= 15


def test_default_readings_are_right_after_the_fixes() -> None:
    polyphones.install()
    wrong = [(s, p, py) for s, p, py in polyphones.TABLE if pinyin_to_kokoro(py) not in _read(s)]
    assert len(wrong) <= 0.02 * len(polyphones.TABLE), wrong
    assert not wrong, wrong  # today all of them


def test_held_out_phrases_are_read_right_by_default_and_as_asked_with_an_override() -> None:
    """Phrases the fixes were not made from: the 98% goal measured on text they never saw."""
    from engine.pron import chunked
    from schemas import Span

    polyphones.install()
    seen = {phrase for _, phrase, _ in polyphones.TABLE}
    assert len(polyphones.HELD_OUT) >= 60 and not seen & {phrase for _, phrase, _ in polyphones.HELD_OUT}
    wrong = [(s, p, py) for s, p, py in polyphones.HELD_OUT if pinyin_to_kokoro(py) not in _read(s)]
    assert len(wrong) <= 0.02 * len(polyphones.HELD_OUT), wrong
    for sentence, phrase, pinyin in wrong:  # the override reads each one right
        before, _, after = sentence.partition(phrase)
        spans = (Span(text=before), Span(text=phrase, ph=pinyin, alphabet="x-pinyin"), Span(text=after))
        chunks, _ = chunked(spans, lambda s: pinyin_to_kokoro(s.ph) if s.ph else _read(s.text), lambda ps: [ps])
        assert pinyin_to_kokoro(pinyin) in chunks[0].replace(" ", ""), (sentence, chunks)


def test_an_override_reads_as_asked() -> None:
    from engine.pron import chunked
    from schemas import Span

    # the engine's reader for x-pinyin spans (kokoro's): the phrase's phonemes, whatever the dictionaries say
    spans = (Span(text="我住在"), Span(text="重庆", ph="zhong4 qing4", alphabet="x-pinyin"), Span(text="。"))
    chunks, _ = chunked(spans, lambda s: pinyin_to_kokoro(s.ph) if s.ph else _read(s.text), lambda ps: [ps])
    assert pinyin_to_kokoro("zhong4 qing4") in chunks[0].replace(" ", "")
    assert pinyin_to_kokoro("chong2 qing4") not in chunks[0].replace(" ", "")
