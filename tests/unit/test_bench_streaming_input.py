# ruff: noqa: RUF001 - full-width punctuation is the subject here
"""The streaming-input benchmark's Mandarin texts and its helpers (pure: no stack)."""

from __future__ import annotations

import random
import re

import pytest

from streams.bench.corpus import _ZH_OPENERS
from streams.bench.harness import redis_db_url
from streams.bench.streaming_input import ZH_FIRST_KINDS, _first_clause, _zh_first


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
