# ruff: noqa: RUF001 - Chinese text is the subject here
"""SSML without services: the safe parser, say-as, the stage's span cutting and the pause arithmetic."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import pron
from engine.sayas import expand
from engine.ssml import BOUNDARY, Limits, parse, plain_text
from schemas import InvalidSSML, Span, decode_segment, decode_segment_event, segment_hash, spans_key
from streams.settings import Settings
from streams.stage.core import StageCore
from streams.stage.spans import cut_spans

# -- the parser: what each element becomes ---------------------------------------------------


def test_elements_become_spans_in_order() -> None:
    spans = parse('<speak>Hi <break time="1.5s"/>there. <sub alias="World Wide Web">WWW</sub> '
                  '<phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme> <prosody rate="slow">slow '
                  '<mark name="m"/>now</prosody> <lang xml:lang="zh-CN">你好</lang> <emphasis>kept</emphasis></speak>')
    assert Span(break_ms=1500) in spans and Span(mark="m") in spans
    assert "World Wide Web" in plain_text(spans) and "WWW" not in plain_text(spans)
    assert Span(text="tomato", ph="təˈmɑːtoʊ", alphabet="ipa") in spans
    assert Span(text="slow ", rate=0.75) in spans and Span(text="now", rate=0.75) in spans
    assert Span(text="你好", lang="zh-cn") in spans
    assert "kept" in plain_text(spans) and "emphasis" not in plain_text(spans)


@pytest.mark.parametrize(("attrs", "ms"), [('time="500ms"', 500), ('time="2s"', 2000), ('time="0.25s"', 250),
                                           ('strength="none"', 0), ('strength="x-strong"', 1000), ("", 500)])
def test_break_lengths(attrs: str, ms: int) -> None:
    assert parse(f"<speak>a<break {attrs}/>b</speak>")[1] == Span(break_ms=ms)


@pytest.mark.parametrize(("rate", "value"), [("x-slow", 0.5), ("fast", 1.25), ("150%", 1.5), ("+20%", 1.2),
                                             ("-20%", 0.8), ("1.1", 1.1)])
def test_prosody_rates(rate: str, value: float) -> None:
    assert parse(f'<speak><prosody rate="{rate}">x</prosody></speak>')[0].rate == pytest.approx(value)


def test_nested_rates_multiply_and_p_s_are_boundaries() -> None:
    spans = parse('<speak><p><s><prosody rate="200%"><prosody rate="50%">a</prosody>'
                  '<prosody rate="fast">b</prosody></prosody></s></p></speak>')
    assert spans[0] is BOUNDARY and spans[-1] is BOUNDARY
    texts = {s.text: s.rate for s in spans if s.text}
    assert texts == {"a": None, "b": 2.5}


HOSTILE = {
    "billion laughs": ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>'
                       '<speak>&lol2;</speak>', "DTDs"),
    "external entity": ('<!DOCTYPE foo [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>', "DTDs"),
    "100,000 nested": ("<speak>" + "<s>" * 100_000 + "x" + "</s>" * 100_000 + "</speak>", "nested deeper"),
    "unclosed": ("<speak>Hello <prosody rate='slow'>world</speak>", "mismatched tag"),
    "1 MB of attributes": ('<speak><prosody rate="slow" x="' + "a" * 1_000_000 + '">x</prosody></speak>', "attribute"),
    "undefined entity": ("<speak>&nbsp;</speak>", "undefined entity"),
    "not speak": ("<p>hi</p>", "root element"),
    "break too long": ('<speak><break time="20s"/></speak>', "over 10 s"),
    "bad pinyin": ('<speak><phoneme alphabet="x-pinyin" ph="chong qing">重庆</phoneme></speak>', "pinyin"),
    "unknown alphabet": ('<speak><phoneme alphabet="x-sampa" ph="t@">t</phoneme></speak>', "alphabet"),
    "elements in sub": ('<speak><sub alias="a"><break/></sub></speak>', "text only"),
    "not xml": ("speak to me", "syntax error"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_documents_are_refused_quickly_with_a_position(name: str) -> None:
    doc, reason = HOSTILE[name]
    t0 = time.perf_counter()
    with pytest.raises(InvalidSSML) as e:
        parse(doc, limits=Limits(max_chars=2_000_000))
    assert time.perf_counter() - t0 < 1.0
    assert e.value.code == "invalid_ssml" and reason in e.value.reason
    assert e.value.message.startswith(f"line {e.value.line}, column {e.value.column}: ")
    assert e.value.line >= 1 and e.value.column >= 1


def test_position_points_at_the_bad_element() -> None:
    with pytest.raises(InvalidSSML) as e:
        parse('<speak>\n  ok\n  <break time="forever"/></speak>')
    assert (e.value.line, e.value.column) == (3, 3)


def test_size_and_element_limits() -> None:
    with pytest.raises(InvalidSSML, match="limit is 100"):
        parse("<speak>" + "a" * 200 + "</speak>", limits=Limits(max_chars=100))
    with pytest.raises(InvalidSSML, match="more than 5 elements"):
        parse("<speak>" + "<mark name='a'/>" * 6 + "</speak>", limits=Limits(max_elements=5))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("<>/&;!?[]=\"' abspeakbrti:xml-DOCTYPE重1")), max_size=200))
def test_any_input_parses_or_raises_invalid_ssml(doc: str) -> None:
    try:
        spans = parse(doc)
    except InvalidSSML as e:
        assert e.code == "invalid_ssml" and e.line >= 1
    else:
        assert all(isinstance(s, Span) for s in spans)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="ab .,重。", min_size=1, max_size=12), min_size=1, max_size=6),
       st.lists(st.sampled_from(["", '<break time="300ms"/>', "<s>", '<mark name="m"/>']), min_size=6, max_size=6))
def test_cutting_keeps_every_character_and_the_breaks(words: list[str], tags: list[str]) -> None:
    body = ""
    for w, t in zip(words, tags, strict=False):
        body += w + (t if t != "<s>" else "")
    doc = f"<speak>{body}</speak>"
    spans = parse(doc)
    pieces = cut_spans(spans, 16)
    if not pieces:  # nothing to say: the stage answers empty_text
        assert not plain_text(spans).strip()
        return
    joined = "".join(p.text for p in pieces)
    assert "".join(joined.split()) == "".join("".join(s.text for s in spans if s is not BOUNDARY).split())
    assert all(len(p.text) <= 16 for p in pieces)
    breaks = sum(1 for s in spans if s.break_ms is not None)
    assert sum(1 for p in pieces for s in p.spans or () if s.break_ms is not None) == breaks


def test_a_break_keeps_its_sentences_in_one_segment() -> None:
    pieces = cut_spans(parse('<speak>One. Two. <break time="500ms"/> Three. Four.</speak>'), 300)
    assert [p.text.split() for p in pieces] == [["One."], ["Two.", "Three."], ["Four."]]
    assert pieces[0].spans is None and pieces[2].spans is None  # plain: same hash as plain text
    assert pieces[1].spans is not None and Span(break_ms=500) in pieces[1].spans


def test_phoneme_spans_are_never_cut() -> None:
    ph = '<phoneme alphabet="ipa" ph="x">a b c d e f g h</phoneme>'
    pieces = cut_spans(parse(f"<speak>{ph} {ph} {ph}</speak>"), 16)
    assert all(s.text == "a b c d e f g h" for p in pieces for s in p.spans or () if s.ph)


# -- say-as ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kind", "fmt", "lang", "said"), [
    ("415-555-0123", "telephone", "", "en", "four one five, five five five, zero one two three"),
    ("AB12", "characters", "", "en", "eigh bee one two"),
    ("1,234", "cardinal", "", "en", "one thousand two hundred thirty-four"),
    ("21", "ordinal", "", "en", "twenty-first"),
    ("007", "digits", "", "en", "zero zero seven"),
    ("2024-03-15", "date", "ymd", "en", "March fifteenth, twenty twenty-four"),
    ("15/03/2024", "date", "dmy", "en", "the fifteenth of March, twenty twenty-four"),
    ("10:05", "time", "", "en", "ten oh five"),
    ("$12.50", "currency", "", "en", "twelve dollars and fifty cents"),
    ("13812345678", "telephone", "", "zh", "幺三八幺二三四五六七八"),
    ("A1", "characters", "", "zh", "eigh 一"),
    ("1234", "cardinal", "", "zh", "一千二百三十四"),
    ("3", "ordinal", "", "zh", "第三"),
    ("2024-03-15", "date", "", "zh", "二零二四年三月十五日"),
    ("10:30", "time", "", "zh", "十点三十分"),
    ("¥12.50", "currency", "", "zh", "十二点五元"),
    ("abc", "cardinal", "", "en", "abc"),  # unreadable: kept
    ("abc", "no-such-kind", "", "en", "abc"),
])
def test_say_as(text: str, kind: str, fmt: str, lang: str, said: str) -> None:
    assert expand(text, kind, format=fmt, lang=lang) == said


# -- pauses ----------------------------------------------------------------------------------

def test_join_counts_the_edge_silences_into_the_pause() -> None:
    sr = 1000
    a = np.concatenate([np.ones(100, np.float32) * 0.5, np.zeros(200, np.float32)])  # 200 ms of its own tail
    b = np.concatenate([np.zeros(50, np.float32), np.ones(100, np.float32) * 0.5])   # 50 ms of its own head
    out, starts = pron.join([a, b], pron.Shape((1.0, 1.0), (None, 1500)), sr, 0.0)
    loud = np.flatnonzero(np.abs(out) >= pron.SILENCE_PEAK)
    gap = int(np.diff(loud).max()) - 1
    assert gap == 1500 and starts == [0, 300 + 1250]
    out, _ = pron.join([a, b], pron.Shape((1.0, 1.0), (None, 100)), sr, 0.0)  # shorter than the voice's own
    assert len(out) == len(a) + len(b)


def test_runs_split_at_breaks_and_rate_changes_and_place_marks() -> None:
    spans = [Span(text="a b"), Span(text="c", ph="C", alphabet="ipa"), Span(mark="m"), Span(break_ms=300),
             Span(text="d", rate=2.0), Span(break_ms=200)]
    rs, trail = pron.runs(spans, lambda s: s.ph or s.text.upper())
    assert [(r.phonemes, r.rate, r.pause_ms) for r in rs] == [("A B C", 1.0, None), ("D", 2.0, 300)]
    assert rs[0].marks == (("m", 6),) and trail == 200


# -- the stage -------------------------------------------------------------------------------

S = Settings().replace(max_segment_chars=40, max_text_chars=500, dedup_window_s=100)


def _run(text: str, **fields: Any) -> Any:
    c = StageCore(S.stage, S.kafka, S.engine, voices=("heart",), clock=lambda: 1e9)
    body = {"request_id": "r-1", "user_id": "alice", "text": text, "text_type": "ssml", **fields}
    return c.handle(b"alice", json.dumps(body).encode(), partition=0, offset=1, timestamp_ms=None, seen={})


def test_stage_turns_ssml_into_segments_whose_hash_covers_the_spans() -> None:
    out = _run('<speak>Wait <break time="1s"/> here. Plain sentence.</speak>')
    segs = [decode_segment(r.value) for r in out.records]
    assert [s.text for s in segs] == ["Wait here.", "Plain sentence."]
    assert segs[0].spans is not None and Span(break_ms=1000) in segs[0].spans
    assert segs[0].hash == segment_hash(segs[0].text, voice="heart", model=S.engine.backend,
                                        model_version=S.engine.model_version, speed=1.0, sample_rate=None,
                                        format="wav", pronunciation=spans_key(segs[0].spans))
    plain = segment_hash("Plain sentence.", voice="heart", model=S.engine.backend,
                         model_version=S.engine.model_version, speed=1.0, sample_rate=None, format="wav")
    assert segs[1].spans is None and segs[1].hash == plain  # plain text in SSML shares the plain cache


def test_text_type_text_keeps_tags_as_text() -> None:
    out = _run("<speak>a &lt; b</speak>", text_type="text")
    assert decode_segment(out.records[0].value).text == "<speak>a &lt; b</speak>"


@pytest.mark.parametrize("text", [
    '<speak>Wait <break time="1s"/> here.</speak>',
    '<?xml version="1.0" encoding="UTF-8"?>\n<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" '
    'xml:lang="en-US">Wait <break time="1s"/> here.</speak >\n',
    '\ufeff<speak>Wait <break time="1s"/> here.</speak>',
    '\n  <speak>Wait <break time="1s"/> here.</speak>\n\n',
])
def test_a_whole_speak_document_without_text_type_is_read_as_ssml(text: str) -> None:
    """A producer that sends SSML and no text_type (most TTS APIs' users would) gets it spoken, not its tags."""
    segs = [decode_segment(r.value) for r in _run_untyped(text).records]
    assert [s.text for s in segs] == ["Wait here."]
    assert segs[0].spans is not None and Span(break_ms=1000) in segs[0].spans


@pytest.mark.parametrize("text", ["a <speak> tag </speak> in a sentence", "<speak>unfinished", "<b>bold</b>",
                                  "Say </speak>", "<speaker>it</speaker>"])
def test_text_that_is_not_one_speak_document_is_read_as_it_is(text: str) -> None:
    out = _run_untyped(text)
    assert out.kind != "failed" and decode_segment(out.records[0].value).text == text


def test_a_malformed_speak_document_without_text_type_is_invalid_ssml_not_read_aloud() -> None:
    for text in ("<speak><prosody rate='fast'>unclosed</speak>",
                 '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>'
                 "<speak>&lol2;</speak>"):
        out = _run_untyped(text)
        assert out.kind == "failed" and out.code == "invalid_ssml", text


def _run_untyped(text: str) -> Any:
    c = StageCore(S.stage, S.kafka, S.engine, voices=("heart",), clock=lambda: 1e9)
    body = {"request_id": "r-1", "user_id": "alice", "text": text}
    return c.handle(b"alice", json.dumps(body).encode(), partition=0, offset=1, timestamp_ms=None, seen={})


def test_invalid_ssml_is_one_rejection_with_line_and_column() -> None:
    out = _run("<speak>\n<break time='x'/></speak>")
    assert out.kind == "failed" and out.code == "invalid_ssml"
    rej = decode_segment_event(out.records[0].value)
    assert rej.error.code == "invalid_ssml" and rej.error.message.startswith("line 2, column 1: ")  # type: ignore[union-attr]


def test_ssml_size_limit_is_a_setting() -> None:
    c = StageCore(S.stage.__class__(**{**{f: getattr(S.stage, f) for f in S.stage.__dataclass_fields__},
                                      "ssml_max_chars": 50}), S.kafka, S.engine, voices=("heart",), clock=lambda: 1e9)
    body = {"request_id": "r-1", "user_id": "a", "text": "<speak>" + "x" * 60 + "</speak>", "text_type": "ssml"}
    out = c.handle(b"a", json.dumps(body).encode(), partition=0, offset=1, timestamp_ms=None, seen={})
    assert out.code == "invalid_ssml"


def test_marks_are_bounded_since_they_travel_inline() -> None:
    with pytest.raises(InvalidSSML, match="more than 3 marks"):
        parse("<speak>" + "a<mark name='m'/>" * 4 + "</speak>", limits=Limits(max_marks=3))
    with pytest.raises(InvalidSSML, match="limit is 256"):
        parse(f"<speak>a<mark name='{'n' * 257}'/></speak>")
    assert Span(mark="n" * 256) in parse(f"<speak>a<mark name='{'n' * 256}'/></speak>")
