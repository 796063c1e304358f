"""The demo and generated corpora: deterministic, varied, and with the answers they must get."""

from __future__ import annotations

import itertools

from schemas import decode_request, peek_request_id
from schemas.errors import SchemaError
from streams.bench.corpus import (
    DEMO_ZH_VOICE,
    LONG_TEXT,
    LONG_TEXT_ZH,
    bench_texts,
    chaos_requests,
    demo_corpus,
    encode_request,
    sentences,
)
from streams.stage.text import normalize, split_segments


def test_demo_corpus_has_every_case_the_readme_promises() -> None:
    items = demo_corpus("run1")
    by = {i.label: i for i in items}
    assert len(LONG_TEXT) > 2000 and by["long"].text == LONG_TEXT
    assert sum(1 for i in items if i.expect == "ok") >= 7
    # a repeated text under a new id, published after the first is answered: a cache hit
    rep = by["hello-repeat"]
    assert rep.text == by["hello"].text and rep.request_id != by["hello"].request_id and rep.after == "hello"
    # the same id twice
    dup = by["fox-again"]
    assert dup.expect == "duplicate" and dup.request_id == by["fox"].request_id
    # bad input without a readable id -> DLQ; with one -> failed completion
    dlq = [i for i in items if i.expect == "dlq"]
    assert len(dlq) == 1 and peek_request_id(dlq[0].raw) is None
    failed = [i for i in items if i.expect == "failed"]
    assert len(failed) == 1 and peek_request_id(failed[0].raw) == failed[0].request_id
    assert failed[0].error_code == "empty_text"
    assert decode_request(failed[0].raw).text.strip() == ""  # well-formed, only its content is bad
    try:
        decode_request(dlq[0].raw)  # type: ignore[arg-type]
        raise AssertionError("the DLQ item must not decode")
    except SchemaError:
        pass


def test_demo_corpus_has_mandarin_for_a_kokoro_voice() -> None:
    """A short sentence, one with numbers for engine/zh_text.py, and a long text the stage splits into many."""
    by = {i.label: i for i in demo_corpus("run1")}
    zh = [i for i in by.values() if i.label.startswith("zh-")]
    assert [i.label for i in zh] == ["zh-hello", "zh-numbers", "zh-long"]
    for i in zh:
        assert i.expect == "ok" and i.backend == "kokoro" and i.request is not None
        assert i.request.voice == DEMO_ZH_VOICE
    assert by["zh-long"].text == LONG_TEXT_ZH and len(LONG_TEXT_ZH) > 1000 and by["zh-long"].min_segments > 1
    segments = split_segments(normalize(LONG_TEXT_ZH), 300)
    assert len(segments) >= 10 and len(set(segments)) == len(segments)  # distinct: order is checkable
    numbers = by["zh-numbers"].text
    for written in ("2024年3月15日", "¥1,299.00", "15%", "13812345678"):
        assert written in numbers
    # English items are left to the default voice
    assert by["long"].request is not None and by["long"].request.voice is None and by["long"].backend is None


def test_demo_ids_are_unique_per_run_and_valid() -> None:
    a = {i.request_id for i in demo_corpus("a1") if i.request_id}
    b = {i.request_id for i in demo_corpus("b2") if i.request_id}
    assert not a & b
    for i in demo_corpus("a1"):
        if i.request is not None:
            assert decode_request(encode_request(i.request)).request_id == i.request_id


def test_sentences_are_deterministic_distinct_and_seed_dependent() -> None:
    a = list(itertools.islice(sentences(42), 2000))
    assert a == list(itertools.islice(sentences(42), 2000))
    assert len(set(a)) == len(a)
    b = set(itertools.islice(sentences(43), 2000))
    assert len(set(a) & b) < 20
    assert all(20 <= len(s) <= 120 and s[0].isupper() and s[-1] in ".?" for s in a)
    assert not any(ch.isdigit() for s in a for ch in s)


def test_chaos_requests() -> None:
    reqs = chaos_requests(300, seed=5, run_id="x")
    assert reqs == chaos_requests(300, seed=5, run_id="x")
    assert len({r.request_id for r in reqs}) == 300
    assert len({r.text for r in reqs}) == 300
    assert 4 <= len({r.user_id for r in reqs}) <= 16


def test_bench_texts() -> None:
    t = bench_texts(50, seed=1)
    assert t == bench_texts(50, seed=1) and len(set(t)) == 50
    assert all(20 <= len(x) <= 400 for x in t)


def test_encode_request_stamps_created_at() -> None:
    r = chaos_requests(1, seed=1, run_id="x")[0]
    assert r.created_at is None
    assert decode_request(encode_request(r)).created_at is not None
