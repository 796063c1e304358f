# ruff: noqa: RUF001 - full-width punctuation is the subject here
"""The streaming-input benchmark's Mandarin texts and its helpers (pure: no stack)."""

from __future__ import annotations

import random
import re

import pytest

from streams.bench.corpus import _ZH_OPENERS
from streams.bench.harness import redis_db_url
from streams.bench.streaming_input import ZH_FIRST_KINDS, _first_clause, _zh_first, phase_sustained


@pytest.mark.parametrize("kind", ZH_FIRST_KINDS)
def test_zh_texts_have_a_first_sentence_of_about_60_characters_then_another(kind: str) -> None:
    rng = random.Random(7)
    for _ in range(50):
        text = _zh_first(rng, kind)
        first, _, rest = text.partition("。")
        assert 55 <= len(first) <= 90, first
        assert rest, text


def test_zh_first_clause_is_an_opener_or_a_numbered_notice() -> None:
    rng = random.Random(3)
    openers = {_first_clause(_zh_first(rng, "openers")) for _ in range(200)}
    assert openers == {f"{o}，" for o in _ZH_OPENERS}  # every opening drawn, nothing else
    numbered = [_first_clause(_zh_first(rng, "numbered")) for _ in range(50)]
    assert all(re.fullmatch(r"第\d{3,5}号通知，", c) for c in numbered), numbered


def test_first_clause_ends_at_the_first_mark_but_not_inside_a_number() -> None:
    assert _first_clause("您好，欢迎致电。") == "您好，"
    assert _first_clause("Pi is 3.14, roughly. Yes") == "Pi is 3.14,"
    assert _first_clause("Order 42. Then") == "Order 42."
    assert _first_clause("no mark at all") == "no mark at all"


def test_redis_db_url_points_at_the_database() -> None:
    assert redis_db_url("redis://127.0.0.1:6379/0", 4) == "redis://127.0.0.1:6379/4"
    assert redis_db_url("redis://127.0.0.1:6379", 4) == "redis://127.0.0.1:6379/4"
    assert redis_db_url("rediss://u:p@host:6380/", 2) == "rediss://u:p@host:6380/2"


def test_a_phase_is_sustained_when_chunks_keep_up_and_latency_stays_flat() -> None:
    flat = [(float(t), 0.2 + 0.01 * (t % 3)) for t in range(30)]
    ok = phase_sustained(flat, offered=10.0, answered=9.8, missing=0)
    assert ok["sustained"] is True
    assert ok["first_third_p50_ms"] == 210.0 and ok["last_third_p50_ms"] == 210.0


def test_a_growing_backlog_a_missing_chunk_or_a_slow_answer_rate_is_not_sustained() -> None:
    growing = [(float(t), 0.2 + 0.1 * t) for t in range(30)]  # the last third waits 2-3 s, the first 0.2-1.1
    assert phase_sustained(growing, offered=10.0, answered=9.8, missing=0)["sustained"] is False
    # judged by publish time, not by the order given
    flat = [(float(t), 0.2) for t in range(30)]
    assert phase_sustained(list(reversed(flat)), offered=10.0, answered=9.8, missing=0)["sustained"] is True
    assert phase_sustained(flat, offered=10.0, answered=9.8, missing=1)["sustained"] is False
    assert phase_sustained(flat, offered=10.0, answered=8.0, missing=0)["sustained"] is False
    assert phase_sustained([], offered=0.0, answered=0.0, missing=0)["sustained"] is False
