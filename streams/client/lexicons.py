"""Pronunciation lexicons on their compacted topics: put, get, list, delete (SDK, CLI, gateway).

A lexicon is one record on ``tts.lexicons`` (key ``owner/name``; a user's) or ``tts.lexicons.global``
(key ``global/name``; operators'), whose value is a :class:`schemas.LexiconRecord` holding the W3C PLS
document; a tombstone deletes it. The stage reads both topics whole (:mod:`streams.stage.lexicons`).

Guarantees: a document is checked before it is written (:func:`engine.lexicon.parse_pls`, the stage's
bounds: bytes, entries; the guarded XML parser), so a bad one is refused here with its reason and
never reaches the stage; an owner holds at most ``TTS_LEXICONS_PER_USER`` lexicons (checked against the
topic as read now: two writers racing can pass it by one each, and the stage still serves them). A
put returns once the broker acknowledged the record. Reads scan the (compacted, small) topic from the
start to its end as of the call.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from engine.lexicon import LexiconError, parse_pls, version_of
from schemas import LexiconRecord, decode_lexicon, encode
from streams.settings import Settings
from streams.stage.lexicons import GLOBAL, lexicon_limits, watermarks

__all__ = ["LexiconError", "delete_lexicon", "get_lexicon", "list_lexicons", "put_lexicon"]

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _where(settings: Settings, owner: str, name: str) -> tuple[str, str, str]:
    """(topic, key, owner) of ``owner``'s lexicon ``name`` (``global/<name>``: a global one)."""
    if name.startswith(f"{GLOBAL}/"):
        owner, name = GLOBAL, name.split("/", 1)[1]
    if not _NAME.match(name):
        raise LexiconError(f"lexicon name {name!r} must be 1-64 characters of [A-Za-z0-9._-]")
    if not owner or "/" in owner:
        raise LexiconError(f"owner {owner!r} must be a user id without '/'")
    topic = settings.kafka.topic_lexicons_global if owner == GLOBAL else settings.kafka.topic_lexicons
    return topic, f"{owner}/{name}", owner


def _read_all(settings: Settings, topic: str) -> dict[str, bytes | None]:
    """The last value per key of ``topic`` (None: deleted), read from the start to its current end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from streams.kafka.config import reader_config

    c = Consumer(reader_config(settings.kafka))
    out: dict[str, bytes | None] = {}
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return out
        ends: dict[int, int] = {}
        parts = []
        for p in meta.partitions:
            lo, hi = watermarks(c, TopicPartition(topic, p))
            if hi > lo:
                ends[p] = hi
                parts.append(TopicPartition(topic, p, OFFSET_BEGINNING))
        c.assign(parts)
        while ends:
            msg = c.poll(5.0)
            if msg is None:
                break  # nothing more within the wait: what was read is the answer
            if msg.error():
                continue
            out[(msg.key() or b"").decode("utf-8", "replace")] = msg.value()
            part, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            if offset + 1 >= ends.get(part, 0):
                ends.pop(part, None)
    finally:
        c.close()
    return out


def _produce(settings: Settings, topic: str, key: str, value: bytes | None) -> None:
    from confluent_kafka import Producer

    from streams.kafka import producer_config

    p = Producer(producer_config(settings.kafka))
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str())

    p.produce(topic, key=key.encode(), value=value, on_delivery=delivered)
    if p.flush(30) or errors:
        raise LexiconError(f"lexicon {key} not written: {errors[0] if errors else 'no acknowledgement in 30 s'}")


def put_lexicon(settings: Settings, owner: str, name: str, pls: str) -> str:
    """Check and store a lexicon; returns ``owner/name@version``."""
    topic, key, owner = _where(settings, owner, name)
    lex = parse_pls(pls, key, limits=lexicon_limits(settings.stage))
    if owner != GLOBAL:
        mine = [k for k, v in _read_all(settings, topic).items() if v is not None and k.startswith(f"{owner}/")]
        if key not in mine and len(mine) >= settings.stage.lexicons_per_user:
            raise LexiconError(f"{owner} already has {len(mine)} lexicons, the limit (TTS_LEXICONS_PER_USER); "
                               "delete one first")
    rec = LexiconRecord(owner=owner, name=key.split("/", 1)[1], pls=pls, updated_at=datetime.now(UTC))
    _produce(settings, topic, key, encode(rec))
    return lex.ref


def get_lexicon(settings: Settings, owner: str, name: str) -> str | None:
    topic, key, _ = _where(settings, owner, name)
    raw = _read_all(settings, topic).get(key)
    return None if raw is None else decode_lexicon(raw).pls


def list_lexicons(settings: Settings, owner: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for topic, prefix in ((settings.kafka.topic_lexicons, f"{owner}/"), (settings.kafka.topic_lexicons_global,
                                                                          f"{GLOBAL}/")):
        for key, raw in sorted(_read_all(settings, topic).items()):
            if raw is None or not key.startswith(prefix):
                continue
            rec = decode_lexicon(raw)
            try:
                entries: int | str = len(parse_pls(rec.pls, key, limits=lexicon_limits(settings.stage)).entries)
            except LexiconError as e:
                entries = f"invalid: {e}"
            out.append({"key": key, "version": version_of(rec.pls), "entries": entries,
                        "updated_at": rec.updated_at.isoformat() if rec.updated_at else None})
    return out


def delete_lexicon(settings: Settings, owner: str, name: str) -> bool:
    topic, key, _ = _where(settings, owner, name)
    if _read_all(settings, topic).get(key) is None:
        return False
    _produce(settings, topic, key, None)
    return True
