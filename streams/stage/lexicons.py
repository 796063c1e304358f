"""Pronunciation lexicons at the stage: the compacted topics materialized in memory.

Every stage process reads ``tts.lexicons`` (users', key ``owner/name``) and ``tts.lexicons.global``
(operators', key ``global/name``) whole, from the start, on a reader of its own (group-less, committed
records only), and follows them: a record replaces a lexicon, a tombstone deletes it. Nothing else
stores them: a restarted stage reads them back (compaction keeps one record per lexicon).

Guarantees:

* :meth:`LexiconStore.put` parses a document once per version (:func:`engine.lexicon.parse_pls`, the
  guarded XML parser, bounds from the stage's settings); a document that does not parse is kept as
  its reason, so a request naming it fails with ``unknown_lexicon`` saying why, never the stage.
* A key on ``tts.lexicons`` that starts ``global/``, or whose ``owner/name`` is not its record's, is
  ignored (counted): users cannot write global lexicons, even by forging a key; on a secured cluster
  only the operators' principal may write ``tts.lexicons.global`` (ACL).
* An owner's lexicons are bounded (``TTS_LEXICONS_PER_USER``) here too, not only by the writers (SDK,
  CLI, gateway), whose check a raw producer bypasses: the stage serves an owner's first that many in
  the order of their last write on the topic (one partition: every stage, and every restarted one,
  reads the same order; an update moves a lexicon last); one past them is refused, logged with its
  reason and counted, and a request naming it fails with ``too_many_lexicons``. Deleting one of the
  served ones serves the next.
* :meth:`LexiconStore.resolve` is what a request sees: its own lexicons by name and the global ones
  as ``global/<name>``, in the order named; a missing one raises ``unknown_lexicon``.
* The stage starts answering requests once the reader has reached the topics' ends as they were at
  start (bounded wait), so a lexicon stored before a stage started is seen by its first request; an
  update made later is seen within the reader's poll interval (eventual: a request processed before
  it uses the previous version, and its completion names the version it used).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from engine.lexicon import Lexicon, LexiconError, LexiconLimits, parse_pls
from schemas import SchemaError, decode_lexicon
from schemas.errors import ContentError
from streams.settings import KafkaSettings

__all__ = ["LexiconReader", "LexiconStore", "lexicon_key", "lexicon_limits", "lexicon_store", "watermarks"]

_log = logging.getLogger("ttsflow.stage")
GLOBAL = "global"


_GLOBAL_PREFIX = f"{GLOBAL}/"


def lexicon_key(user_id: str, name: str) -> str:
    """The topic key a request's lexicon name refers to: ``global/x`` as is, else ``<user>/<name>``."""
    return name if name.startswith(_GLOBAL_PREFIX) else f"{user_id}/{name}"


def watermarks(consumer: Any, tp: Any, *, attempts: int = 20) -> tuple[int, int]:
    """(low, high) offsets of ``tp``, retried while the broker is still electing a new topic's leader."""
    from confluent_kafka import KafkaException

    for i in range(attempts):
        try:
            lo, hi = consumer.get_watermark_offsets(tp, timeout=10)
            return int(lo), int(hi)
        except KafkaException:  # NOT_LEADER / LEADER_NOT_AVAILABLE right after a topic is made
            if i == attempts - 1:
                raise
            time.sleep(0.25)
    raise AssertionError("unreachable")


def lexicon_limits(stage: Any) -> LexiconLimits:
    return LexiconLimits(max_bytes=stage.lexicon_max_bytes, max_entries=stage.lexicon_max_entries)


def lexicon_store(stage: Any) -> LexiconStore:
    """The stage's store with its settings' bounds (bytes, entries, lexicons per owner)."""
    return LexiconStore(lexicon_limits(stage), per_owner=stage.lexicons_per_user)


class LexiconStore:
    """Lexicons by key (``owner/name``): parsed, or the reason they could not be. Written by one reader
    thread, read by the stage's agent (a dict assignment per change: safe under the GIL)."""

    def __init__(self, limits: LexiconLimits | None = None, *, per_owner: int = 100) -> None:
        self.limits = limits or LexiconLimits()
        self.per_owner = per_owner
        self._by_key: dict[str, Lexicon | str] = {}
        self._owned: dict[str, dict[str, None]] = {}  # owner -> its keys, in the order of their last write
        self._over: frozenset[str] = frozenset()  # keys past their owner's limit (refused)
        self.ignored = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self._by_key)

    def put(self, key: str, value: bytes | None, *, global_topic: bool = False) -> None:
        """One record of a lexicon topic (``value`` None: a tombstone)."""
        if global_topic != key.startswith(f"{GLOBAL}/"):
            self.ignored += 1
            _log.warning("event=lexicon_ignored key=%s reason=%s", key,
                         "global key on the users' topic" if not global_topic else "not a global key")
            return
        if value is None:
            self._by_key.pop(key, None)
            self._count(key, stored=False)
            return
        try:
            rec = decode_lexicon(value)
            if f"{rec.owner}/{rec.name}" != key:
                raise LexiconError(f"lexicon {key}: the record names {rec.owner}/{rec.name}")
            self._by_key[key] = parse_pls(rec.pls, key, limits=self.limits)
        except (SchemaError, LexiconError) as e:
            self._by_key[key] = str(e)
            _log.warning("event=lexicon_invalid key=%s error=%s", key, e)
        self._count(key, stored=True)

    def _count(self, key: str, *, stored: bool) -> None:
        """``key`` written (moved last in its owner's order) or deleted; the owner's keys past
        ``per_owner`` are refused (a user's only: global lexicons are the operators')."""
        owner = key.split("/", 1)[0]
        if owner == GLOBAL:
            return
        mine = self._owned.setdefault(owner, {})
        mine.pop(key, None)
        if stored:
            mine[key] = None
        elif not mine:
            self._owned.pop(owner, None)
        keys = list(mine)
        over = set(keys[self.per_owner:])
        was = {k for k in self._over if k.startswith(f"{owner}/")}
        for k in sorted(over - was):
            self.refused += 1
            _log.warning("event=lexicon_refused key=%s reason=%s", k, self._refusal(k))
        if over != was:
            self._over = frozenset((self._over - was) | over)

    def _refusal(self, key: str) -> str:
        owner = key.split("/", 1)[0]
        return (f"{owner} has {len(self._owned.get(owner, ()))} lexicons and the stage serves the first "
                f"{self.per_owner} (TTS_LEXICONS_PER_USER) by their last write; {key} came after them: "
                "delete one of yours and write it again")

    def get(self, key: str) -> Lexicon | str | None:
        return self._by_key.get(key)

    def keys(self, owner: str | None = None) -> list[str]:
        return sorted(k for k in self._by_key if owner is None or k.startswith(f"{owner}/"))

    def resolve(self, user_id: str, names: list[str] | None) -> tuple[Lexicon, ...]:
        """The lexicons a request names, in order. Raises ``ContentError`` ``unknown_lexicon``."""
        out: list[Lexicon] = []
        for name in names or ():
            key = lexicon_key(user_id, name)
            lex = self._by_key.get(key)
            if lex is None:
                raise ContentError(f"lexicon {name!r} ({key}) is not stored; `ttsflow lexicon list` shows yours",
                                   field="lexicons", code="unknown_lexicon")
            if isinstance(lex, str):
                raise ContentError(f"lexicon {name!r} is stored but invalid: {lex}", field="lexicons",
                                   code="unknown_lexicon")
            if key in self._over:
                raise ContentError(f"lexicon {name!r} is refused: {self._refusal(key)}", field="lexicons",
                                   code="too_many_lexicons")
            if all(lex is not o for o in out):  # (named twice: applied once; identity, not a deep compare)
                out.append(lex)
        return tuple(out)


class LexiconReader:
    """A thread that reads both lexicon topics into a :class:`LexiconStore` and follows them."""

    def __init__(self, kafka: KafkaSettings, store: LexiconStore, *,
                 consumer_factory: Callable[[dict[str, Any]], Any] | None = None, poll_s: float = 0.2) -> None:
        from streams.kafka.config import reader_config

        self.kafka, self.store, self.poll_s = kafka, store, poll_s
        self._conf = reader_config(kafka, **{"client.id": "ttsflow-stage-lexicons"})
        self._factory = consumer_factory
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lexicons", daemon=True)
        self.error: BaseException | None = None

    def start(self, *, wait_s: float = 30.0) -> bool:
        """Start reading; True once the topics' ends as of now are read (False after ``wait_s``)."""
        self._thread.start()
        return self._caught_up.wait(wait_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _consumer(self) -> Any:
        if self._factory is not None:
            return self._factory(self._conf)
        from confluent_kafka import Consumer

        from streams.kafka.config import reader_config

        return Consumer(reader_config(self.kafka, **{"client.id": "ttsflow-stage-lexicons"}))

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        topics = {self.kafka.topic_lexicons: False, self.kafka.topic_lexicons_global: True}
        c = self._consumer()
        try:
            parts: list[Any] = []
            ends: dict[tuple[str, int], int] = {}
            meta = c.list_topics(timeout=10)
            for topic in topics:
                t = meta.topics.get(topic)
                for p in (t.partitions if t is not None and t.error is None else {}):
                    parts.append(TopicPartition(topic, p, OFFSET_BEGINNING))
                    lo, hi = watermarks(c, TopicPartition(topic, p))
                    if hi > lo:
                        ends[(topic, p)] = hi
            c.assign(parts)
            if not ends:
                self._caught_up.set()
            while not self._stop.is_set():
                msg = c.poll(self.poll_s)
                if msg is None:
                    continue
                if msg.error():
                    _log.warning("event=lexicon_read_error error=%s", msg.error())
                    continue
                key = (msg.key() or b"").decode("utf-8", "replace")
                self.store.put(key, msg.value(), global_topic=topics.get(msg.topic(), False))
                end = ends.get((msg.topic(), msg.partition()))
                if end is not None and msg.offset() + 1 >= end:
                    ends.pop((msg.topic(), msg.partition()))
                    if not ends:
                        self._caught_up.set()
                        _log.info("event=lexicons_loaded count=%d", len(self.store))
        except BaseException as e:  # the stage keeps serving with what it has; the error is logged
            self.error = e
            _log.error("event=lexicon_reader_failed error=%r", e)
            self._caught_up.set()
        finally:
            c.close()

