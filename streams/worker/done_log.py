"""The worker's done log, ``tts.worker.done``: the durable record that a request was answered.

Invariants:

* A request's :class:`~schemas.Done` record goes to partition p of the done topic, p being
  the partition of its segments, in the transaction of its completion (:func:`done_record`
  gives what to produce; the checkpoint produces it), so a completion is committed if and
  only if its done record is. The done topic has at least as many partitions as the
  segments topic (:meth:`DoneLog.ensure` creates it and says how many).
* On assignment of partition p, :meth:`load` reads partition p of the done topic
  (``read_committed``) from ``dedup_window_s`` ago to its end: every request answered within
  the stage's dedup window is known before the first segment of p is admitted, so a
  restarted worker or a new owner never answers twice. Redis is never this record.
* A segment of a request sent in pieces has its own record (key ``<request id>/<seq>``,
  :func:`piece_done_record`) in the transaction of its chunk, deleted (a tombstone) in the
  transaction of its request's completion; :meth:`load` applies tombstones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from schemas import Done, encode
from streams.errors import FatalError, RetriableError, classify
from streams.kafka import retry as kafka_retry
from streams.kafka.consumer import consume_ready
from streams.settings import KafkaSettings
from streams.worker.ledger import Answer, piece_key

__all__ = ["DoneLog", "done_record"]

_log = logging.getLogger("ttsflow.worker")

_LOAD_TIMEOUT_S = 120.0  # reading the done partitions to their end; past it the loop retries
_OP_TIMEOUT_S = 30.0


def piece_done_record(topic: str, partition: int, request_id: str, seq: int, *,
                      delete: bool = False) -> tuple[str, bytes, bytes | None, int]:
    """``(topic, key, value, partition)`` of the done record of a piece's segment (None: its tombstone)."""
    value = None if delete else encode(Done(request_id=request_id, status="ok"))
    return topic, piece_key(request_id, seq).encode(), value, partition


def done_record(topic: str, a: Answer) -> tuple[str, bytes, bytes, int]:
    """``(topic, key, value, partition)`` of the done record of answer ``a``."""
    done = Done(request_id=a.request_id, status=a.completion.status, completed_at=a.completion.completed_at)
    return topic, a.request_id.encode(), encode(done), a.partition


class DoneLog:
    """Reads done records back on assignment (they are written by the checkpoint's transaction)."""

    def __init__(self, topic: str, dedup_window_s: int, reader: Any, *, stopping: Callable[[], bool]) -> None:
        self.topic = topic
        self.dedup_window_s = dedup_window_s
        self._reader = reader  # a group-less read_committed Consumer with enable.partition.eof
        self._stopping = stopping
        self.partitions = 1 << 30  # known after ensure(); a test that skips it has no limit

    def _retry(self, what: str, fn: Callable[[], Any]) -> Any:
        return kafka_retry.call_with_retry(what, fn, stopping=self._stopping)

    def ensure(self, kafka: KafkaSettings) -> None:
        """Create the done topic if it is missing and learn its partition count."""
        from streams.kafka import ensure_done_topic

        self.partitions = self._retry("ensure_done_topic", lambda: ensure_done_topic(kafka, self.dedup_window_s))

    def load(self, partitions: set[int]) -> dict[int, dict[str, float]]:
        """Per partition: request id -> answered at (epoch seconds), for the dedup window."""
        from confluent_kafka import KafkaError, TopicPartition

        if not partitions:
            return {}
        since_ms = int((time.time() - self.dedup_window_s) * 1000)
        starts = self._retry("offsets_for_times", lambda: self._reader.offsets_for_times(
            [TopicPartition(self.topic, p, since_ms) for p in sorted(partitions)], _OP_TIMEOUT_S))
        todo = [TopicPartition(self.topic, tp.partition, tp.offset) for tp in starts if tp.offset >= 0]
        done: dict[int, dict[str, float]] = {p: {} for p in partitions}
        if not todo:
            return done
        t0 = time.monotonic()
        self._reader.assign(todo)
        open_parts = {tp.partition for tp in todo}
        n = 0
        deadline = time.monotonic() + _LOAD_TIMEOUT_S
        while open_parts:
            if time.monotonic() > deadline:
                raise RetriableError(f"reading {self.topic} partitions {sorted(open_parts)} did not reach the end")
            for m in consume_ready(self._reader, 1000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(m.partition())
                        continue
                    exc = classify(err)
                    if isinstance(exc, FatalError):
                        raise exc
                    continue
                key, part = m.key(), m.partition()
                if key and part is not None and m.value() is None:  # a piece's record deleted
                    done[part].pop(key.decode("utf-8", "replace"), None)
                elif key and part is not None:
                    _, ts_ms = m.timestamp()
                    done[part][key.decode("utf-8", "replace")] = ts_ms / 1000 if ts_ms > 0 else time.time()
                    n += 1
        self._reader.unassign()
        _log.info("event=done_set_loaded partitions=%s records=%d seconds=%.2f", sorted(partitions), n,
                  time.monotonic() - t0)
        return done

    def close(self) -> None:
        self._reader.close()
