# ruff: noqa: RUF001 - Chinese text is the subject here
"""Pronunciation lexicons without services: PLS parsing (safe, bounded), whole-word application in
order, the stage's materialized view and what a request with lexicons turns into."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.lexicon import LexiconError, LexiconLimits, apply, parse_pls
from schemas import LexiconRecord, Span, decode_segment, decode_segment_event, encode
from streams.settings import Settings
from streams.stage.core import StageCore
from streams.stage.lexicons import LexiconStore


def pls(*lexemes: str, alphabet: str = "ipa", lang: str = "en-US") -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?><lexicon version="1.0" '
            f'xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="{alphabet}" xml:lang="{lang}">'
            + "".join(lexemes) + "</lexicon>")


def alias(g: str, a: str) -> str:
    return f"<lexeme><grapheme>{g}</grapheme><alias>{a}</alias></lexeme>"


def phoneme(g: str, p: str) -> str:
    return f"<lexeme><grapheme>{g}</grapheme><phoneme>{p}</phoneme></lexeme>"


def test_pls_alias_and_phoneme_entries() -> None:
    lex = parse_pls(pls(alias("W3C", "World Wide Web Consortium"), phoneme("tomato", "təˈmɑːtoʊ")), "u/x")
    assert lex.entries["W3C"].alias == "World Wide Web Consortium"
    assert lex.entries["tomato"].phoneme == "təˈmɑːtoʊ" and lex.alphabet == "ipa"
    assert lex.ref == f"u/x@{lex.version}" and len(lex.version) == 16


@pytest.mark.parametrize(("doc", "reason"), [
    ('<!DOCTYPE l [<!ENTITY x SYSTEM "file:///etc/passwd">]><lexicon>&x;</lexicon>', "DTDs"),
    ("<lexicon><lexeme><grapheme>a</grapheme></lexeme></lexicon>", "needs a <grapheme> and an <alias>"),
    ('<lexicon alphabet="x-sampa"/>', "alphabet"),
    ("<speak/>", "root element"),
    ("<lexicon>", "no element found"),
])
def test_bad_lexicons_are_refused_with_a_reason(doc: str, reason: str) -> None:
    with pytest.raises(LexiconError, match=reason):
        parse_pls(doc, "u/x")


def test_lexicon_bounds() -> None:
    with pytest.raises(LexiconError, match="limit is 1024"):
        parse_pls(pls(alias("a", "b" * 2000)), "u/x", limits=LexiconLimits(max_bytes=1024))
    with pytest.raises(LexiconError, match="more than 3 entries"):
        parse_pls(pls(*(alias(f"w{i}", "x") for i in range(4))), "u/x", limits=LexiconLimits(max_entries=3))


def _said(spans: list[Span]) -> str:
    return "".join(f"[{s.ph}]" if s.ph else s.text for s in spans)


def test_whole_words_only_case_as_written_first_lexicon_wins() -> None:
    a = parse_pls(pls(alias("W3C", "World Wide Web Consortium"), alias("New York", "the big apple")), "u/a")
    b = parse_pls(pls(alias("W3C", "double you three see"), phoneme("nice", "naɪs")), "u/b")
    used: set[str] = set()
    out = apply(Span(text="W3C and W3Cx in New York, w3c is nice. Nice."), (a, b), used)
    assert _said(out) == "World Wide Web Consortium and W3Cx in the big apple, w3c is [naɪs]. Nice."
    assert used == {a.ref, b.ref}
    assert _said(apply(Span(text="New-York"), (a,))) == "New-York"  # not two words


def test_han_graphemes_match_where_they_stand() -> None:
    zh = parse_pls(pls(phoneme("重庆", "zhong4 qing4"), alphabet="x-pinyin", lang="zh-CN"), "u/zh")
    out = apply(Span(text="我住在重庆。"), (zh,))
    assert [s.ph for s in out] == [None, "zhong4 qing4", None] and out[1].alphabet == "x-pinyin"


def _record(owner: str, name: str, doc: str) -> bytes:
    return encode(LexiconRecord(owner=owner, name=name, pls=doc))


def test_store_follows_records_and_refuses_global_keys_on_the_users_topic() -> None:
    st = LexiconStore()
    st.put("alice/brand", _record("alice", "brand", pls(alias("ACME", "ack me"))))
    st.put("global/brand", _record("global", "brand", pls(alias("ACME", "A C M E"))))  # forged on users' topic
    st.put("global/common", _record("global", "common", pls(alias("SQL", "sequel"))), global_topic=True)
    st.put("alice/bad", _record("alice", "bad", "<lexicon>"))
    assert st.keys() == ["alice/bad", "alice/brand", "global/common"] and st.ignored == 1
    assert [x.key for x in st.resolve("alice", ["brand", "global/common"])] == ["alice/brand", "global/common"]
    with pytest.raises(Exception, match="not stored") as e:
        st.resolve("bob", ["brand"])
    assert getattr(e.value, "code", None) == "unknown_lexicon"
    with pytest.raises(Exception, match="invalid"):
        st.resolve("alice", ["bad"])
    st.put("alice/brand", None)  # tombstone
    assert st.get("alice/brand") is None


S = Settings().replace(max_segment_chars=60, max_text_chars=500, dedup_window_s=100)


def _stage(store: LexiconStore) -> StageCore:
    return StageCore(S.stage, S.kafka, S.engine, voices=("heart",), clock=lambda: 1e9, lexicons=store)


def _run(c: StageCore, **fields: Any) -> Any:
    body = {"request_id": "r-1", "user_id": "alice", **fields}
    return c.handle(b"alice", json.dumps(body).encode(), partition=0, offset=1, timestamp_ms=None, seen={})


def test_a_request_with_lexicons_is_spoken_and_keyed_by_their_versions() -> None:
    st = LexiconStore()
    st.put("alice/brand", _record("alice", "brand", pls(alias("ACME", "ack me"), phoneme("tomato", "təˈmɑːtoʊ"))))
    v1 = st.get("alice/brand")
    c = _stage(st)
    segs = [decode_segment(r.value) for r in _run(c, text="ACME sells tomato.", lexicons=["brand"]).records]
    assert segs[0].text == "ack me sells tomato." and segs[-1].lexicons == [v1.ref]  # type: ignore[union-attr]
    assert any(s.ph == "təˈmɑːtoʊ" for s in segs[0].spans or ())
    plain = [decode_segment(r.value) for r in _run(c, text="ACME sells tomato.").records]
    assert plain[0].text == "ACME sells tomato." and plain[0].hash != segs[0].hash and plain[-1].lexicons is None
    # a new version of the lexicon: a new hash for the same text, even where the spoken text is the same
    st.put("alice/brand", _record("alice", "brand", pls(alias("ACME", "ack me"), phoneme("tomato", "təˈmeɪtoʊ"))))
    again = [decode_segment(r.value) for r in _run(c, text="ACME sells tomato.", lexicons=["brand"]).records]
    assert again[0].hash != segs[0].hash and again[-1].lexicons != segs[-1].lexicons
    # SSML: lexicons apply to plain runs, not inside sub/phoneme
    ssml = '<speak>ACME <sub alias="ACME">x</sub> <phoneme alphabet="ipa" ph="a">ACME</phoneme></speak>'
    s2 = decode_segment(_run(c, text=ssml, text_type="ssml", lexicons=["brand"]).records[0].value)
    assert s2.text.startswith("ack me ACME ")


def test_unknown_lexicon_is_one_rejection() -> None:
    out = _run(_stage(LexiconStore()), text="Hello.", lexicons=["nope"])
    assert out.kind == "failed" and out.code == "unknown_lexicon"
    assert decode_segment_event(out.records[0].value).error.code == "unknown_lexicon"  # type: ignore[union-attr]


def test_more_than_five_lexicons_is_an_invalid_field() -> None:
    out = _run(_stage(LexiconStore()), text="Hello.", lexicons=[f"l{i}" for i in range(6)])
    assert out.code == "invalid_field" and "lexicons" in decode_segment_event(out.records[0].value).error.message  # type: ignore[union-attr]


def test_an_owner_past_its_lexicon_limit_is_refused_at_the_stage_whatever_wrote_it() -> None:
    # a raw producer bypasses the writers' check: the stage serves an owner's first 2 by last write
    st = LexiconStore(per_owner=2)
    for name in ("a", "b", "c"):
        st.put(f"alice/{name}", _record("alice", name, pls(alias("ACME", name))))
    st.put("bob/a", _record("bob", "a", pls(alias("ACME", "bob"))))  # other owners are counted apart
    for n in range(3):  # global lexicons are the operators': not counted
        st.put(f"global/g{n}", _record("global", f"g{n}", pls(alias("SQL", "sequel"))), global_topic=True)
    assert st.refused == 1
    assert [x.key for x in st.resolve("alice", ["a", "b", "global/g2"])] == ["alice/a", "alice/b", "global/g2"]
    assert [x.key for x in st.resolve("bob", ["a"])] == ["bob/a"]
    c = _stage(st)
    out = _run(c, text="ACME ships.", lexicons=["a", "c"])
    assert out.kind == "failed" and out.code == "too_many_lexicons"
    err = decode_segment_event(out.records[0].value).error  # type: ignore[union-attr]
    assert err.code == "too_many_lexicons" and "alice/c" in err.message and "TTS_LEXICONS_PER_USER" in err.message
    st.put("alice/a", _record("alice", "a", pls(alias("ACME", "a2"))))  # an update moves it last: now past
    with pytest.raises(Exception, match="refused") as e:
        st.resolve("alice", ["a"])
    assert getattr(e.value, "code", None) == "too_many_lexicons"
    assert [x.key for x in st.resolve("alice", ["b", "c"])] == ["alice/b", "alice/c"]
    st.put("alice/b", None)  # a delete serves the next one
    assert _run(c, text="ACME ships.", lexicons=["a", "c"]).kind == "segments"
