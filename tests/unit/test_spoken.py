# ruff: noqa: RUF001 - full-width letters are the subject here
"""Captions of SSML and of text a lexicon rewrote, the pure parts: where what is read was written
(engine.spoken through the SSML parser and the lexicon), the stage's segment sources, and the
worker's words placed in the request (a stretch read otherwise than written is one caption)."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.ssml import parse, parse_traced
from engine.timing import words_of
from schemas import LexiconRecord, SegmentSource, WordSpan, decode_segment, encode
from streams.settings import Settings
from streams.stage.core import StageCore
from streams.stage.lexicons import LexiconStore
from streams.worker.timings import PartWords, chunk_words, request_timings

DOC = ('<speak><s>Hello &amp; welcome to the <sub alias="World Wide Web">WWW</sub> today.</s>'
       '<break time="500ms"/> I ate <say-as interpret-as="cardinal">42</say-as> ripe '
       '<phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomatoes</phoneme><!-- a note -->, <mark name="m"/>'
       '<prosody rate="slow">slowly</prosody>.</speak>')


def _core(max_chars: int = 400, lexicons: LexiconStore | None = None) -> StageCore:
    s = Settings().replace(max_segment_chars=max_chars)
    return StageCore(s.stage, s.kafka, s.engine, voices=("heart",), clock=lambda: 1e9, lexicons=lexicons)


def _segments(core: StageCore, **body: Any) -> list[Any]:
    raw = json.dumps({"request_id": "r", "user_id": "u", "timestamps": True, **body}).encode()
    out = core.handle(b"u", raw, partition=0, offset=0, timestamp_ms=None, seen={})
    assert out.kind == "segments", out
    return [decode_segment(r.value) for r in out.records]


def _fake_words(text: str, t0: float = 0.0) -> list[WordSpan]:
    """What a voice's words look like: one per written word of the segment's text, 0.3 s apart."""
    return [WordSpan(word=text[a:b], start=a, end=b, start_s=round(t0 + 0.3 * k, 4), end_s=round(t0 + 0.3 * k + 0.25, 4))
            for k, (a, b) in enumerate(words_of(text))]


def _part(text: str) -> PartWords:
    words = _fake_words(text)
    return PartWords(text=text, samples=round(24000 * (0.3 * len(words) + 0.2)), sample_rate=24000, words=words)


def _timed(segs: list[Any], source: str) -> tuple[list[WordSpan], str]:
    """The request's words and WebVTT from fake part words, checked: offsets and times never go back,
    all inside the source and the audio."""
    parts = [_part(s.text) for s in segs]
    duration = sum(p.samples for p in parts) / 24000 + 0.15 * (len(parts) - 1)
    doc, vtt, _ = request_timings(parts, segs[-1].sources, duration)
    words = doc.words
    starts = [w.start for w in words]
    assert starts == sorted(starts), starts
    assert all(0 <= w.start <= w.end <= len(source) for w in words)
    assert [w.start_s for w in words] == sorted(w.start_s for w in words)
    assert all(0 <= w.start_s <= w.end_s <= duration + 1e-6 for w in words)
    return words, vtt


def test_ssml_words_point_at_the_document_and_a_replaced_stretch_is_one_caption() -> None:
    segs = _segments(_core(), text=DOC, text_type="ssml")
    assert all(s.source is not None for s in segs) and segs[-1].sources == [s.source for s in segs]
    words, vtt = _timed(segs, DOC)
    said = [w.word for w in words]
    assert said == ["Hello", "&", "welcome", "to", "the", "WWW", "today", "I", "ate", "42", "ripe", "tomatoes",
                    "slowly"], said
    for w in words:  # each caption points at what the user wrote (an entity: at its reference's first character)
        assert DOC[w.start:w.end] == w.word, (w, DOC[w.start:w.end])
    www = words[said.index("WWW")]
    assert www.end_s - www.start_s > 0.5  # the three spoken words of the alias, one caption
    assert "WWW today." in vtt and "World" not in vtt and "42 ripe tomatoes" in vtt


def test_a_word_glued_to_a_replaced_stretch_joins_its_caption() -> None:
    doc = '<speak>The <sub alias="World Wide Web">WWW</sub>\'s pages.</speak>'
    words, _ = _timed(_segments(_core(), text=doc, text_type="ssml"), doc)
    assert [w.word for w in words] == ["The", "WWW's", "pages"]
    assert doc[words[1].start:words[1].start + 3] == "WWW" and doc[words[1].end - 2:words[1].end] == "'s"


def test_a_stretch_cut_into_two_segments_stays_one_caption() -> None:
    doc = ('<speak>See <sub alias="Doctor Who. He travels in time. And space too.">DW</sub> now.</speak>')
    segs = _segments(_core(max_chars=16), text=doc, text_type="ssml")
    assert len(segs) > 1
    words, _ = _timed(segs, doc)
    assert [w.word for w in words] == ["See", "DW", "now"]


def _lexicons(*docs: tuple[str, str]) -> LexiconStore:
    store = LexiconStore()
    for key, pls in docs:
        owner, name = key.split("/")
        store.put(key, encode(LexiconRecord(owner=owner, name=name, pls=pls)))
    return store


def _pls(body: str) -> str:
    return ('<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" '
            f'xml:lang="en-US">{body}</lexicon>')


LEX = _pls("<lexeme><grapheme>Qzx</grapheme><alias>green apple pie</alias></lexeme>"
           "<lexeme><grapheme>New York</grapheme><phoneme>nuː jɔːk</phoneme></lexeme>")


def test_lexicon_words_are_one_caption_for_the_original_word() -> None:
    core = _core(lexicons=_lexicons(("u/brand", LEX)))
    text = "Ｉ  love Qzx in New York…  Qzx!"
    segs = _segments(core, text=text, lexicons=["brand"])
    words, vtt = _timed(segs, text)
    assert [w.word for w in words] == ["I", "love", "Qzx", "in", "New York", "Qzx"]
    assert [text[w.start:w.end] for w in words] == ["Ｉ", "love", "Qzx", "in", "New York", "Qzx"]
    assert "green" not in vtt and "I love Qzx in New York..." in vtt


def test_lexicon_inside_ssml() -> None:
    core = _core(lexicons=_lexicons(("u/brand", LEX)))
    doc = "<speak>Buy <emphasis>Qzx</emphasis> or Qzx today.</speak>"
    words, _ = _timed(_segments(core, text=doc, text_type="ssml", lexicons=["brand"]), doc)
    assert [(w.word, doc[w.start:w.end]) for w in words] == [("Buy", "Buy"), ("Qzx", "Qzx"), ("or", "or"),
                                                             ("Qzx", "Qzx"), ("today", "today")]


def test_chunk_words_make_the_same_captions() -> None:
    segs = _segments(_core(max_chars=30), text=DOC, text_type="ssml")
    parts = [_part(s.text) for s in segs]
    chunked: list[tuple[str, int, int]] = []
    for p, s in zip(parts, segs, strict=True):
        for w in chunk_words(p, s.source):  # (a stretch cut into two chunks is in each: one caption in the request)
            if not chunked or chunked[-1] != (w.word, w.start, w.end):
                chunked.append((w.word, w.start, w.end))
    assert len(segs) > 2 and chunked == [(w.word, w.start, w.end) for w in _timed(segs, DOC)[0]]


def test_the_trace_reads_what_the_parser_reads() -> None:
    spans, spoken = parse_traced(DOC)
    assert spans == parse(DOC) and spoken is not None
    assert "".join(spoken.text) == "".join(s.text for s in spans)
    assert [DOC[g.start:g.end] for g in spoken.groups] == ["WWW", "42", "tomatoes"]
    crlf = "<speak>a\r\nb <![CDATA[<c>]]> d</speak>"
    _, sp = parse_traced(crlf)
    assert sp is not None and "".join(sp.text) == "a\nb <c> d"
    assert [crlf[o] for o in sp.offsets] == ["a", "\r", "b", " ", "<", "c", ">", " ", "d"]


_ATOM = st.one_of(
    st.sampled_from(["Hello", "big", "world", "café", "Ｗｉｄｅ", "dog.", "cats,", "  ", "&amp;", "&#233;t&#233;", "x\r\ny"]),
    st.builds(lambda a, w: f'<sub alias="{a}">{w}</sub>', st.sampled_from(["World Wide Web", "one", "A. B. C."]),
              st.sampled_from(["WWW", "1", "abc", ""])),
    st.builds(lambda n: f'<say-as interpret-as="cardinal">{n}</say-as>', st.integers(0, 10_000)),
    st.builds(lambda w: f'<phoneme alphabet="ipa" ph="təˈmɑːtoʊ">{w}</phoneme>', st.sampled_from(["tomato", "to ma"])),
    st.sampled_from(['<break time="300ms"/>', '<mark name="m"/>', "<!-- c -->", "</s><s>", "<emphasis>so</emphasis>"]),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ATOM, min_size=1, max_size=14), st.sampled_from([16, 40, 400]))
def test_offsets_are_monotonic_and_inside_the_document(atoms: list[str], max_chars: int) -> None:
    doc = "<speak><s>" + " ".join(atoms) + " end.</s></speak>"
    segs = _segments(_core(max_chars=max_chars), text=doc, text_type="ssml")
    assert all(s.source is not None for s in segs)
    words, _ = _timed(segs, doc)
    assert words[-1].word == "end" and doc[words[-1].start:words[-1].end] == "end"
    for w in words:  # a caption never starts inside markup
        before = doc[:w.start]
        assert before.count("<") == before.count(">"), (w, doc)
    # every written word outside markup is covered by a caption (markup blanked, so offsets stay the document's)
    visible = re.sub(r"<[^>]*>", lambda m: " " * len(m.group(0)), doc)
    covered = {i for w in words for i in range(w.start, w.end)}
    for m in re.finditer(r"[A-Za-z]{2,}", visible):
        if not doc[:m.start()].endswith("&"):  # an entity's name is not a word
            assert any(i in covered for i in range(m.start(), m.end())), (m.group(0), doc, words)


def test_segment_source_without_groups_is_unchanged_on_the_wire() -> None:
    s = SegmentSource(start=3, map=[(2, 5)])
    assert s.groups is None and s.offset(4) == 3 + 5 + 2
