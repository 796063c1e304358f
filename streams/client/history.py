"""What ops and the gateway ask the pipeline without a client: is Kafka there, is anyone
serving, and what happened to a request (``tts.completed`` read from the log).

Guarantees: ``probe_kafka`` raises :class:`StackUnavailable` (retriable) or
:class:`AccessDenied` (fatal), never a librdkafka error; ``find_completion`` reads up to
each partition's end as of the call and answers None only when it saw all of it
(:class:`CompletionTimeout` otherwise); ``tail_completions`` skips undecodable records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from schemas import Completion, SchemaError, decode_completion
from streams.client.errors import AccessDenied, CompletionTimeout, StackUnavailable
from streams.client.readers import partitions, reader, start_offsets
from streams.kafka.consumer import consume_ready
from streams.settings import KafkaSettings, Settings

__all__ = ["find_completion", "pipeline_problems", "probe_kafka", "tail_completions"]


def probe_kafka(kafka: KafkaSettings, timeout: float = 3.0) -> None:
    """Raise :class:`StackUnavailable` unless the broker answers a metadata request in time, and
    :class:`~streams.errors.KafkaAccessError` at once when it refuses this client (login, TLS)."""
    from streams.errors import KafkaAccessError, RetriableError
    from streams.kafka.access import connect

    try:
        connect(kafka, timeout_s=timeout)
    except KafkaAccessError as e:
        raise AccessDenied(str(e)) from None
    except RetriableError as e:
        raise StackUnavailable(f"{e}; is the stack up? (ttsflow stack up)") from None


def pipeline_problems(settings: Settings, timeout: float = 3.0) -> list[str]:
    """What stops a request from being answered now, one sentence each: no active member in the
    stage's group or the worker group (empty: both have members). Costs two admin requests."""
    from streams.kafka.admin import group_members

    out = []
    for group, what, start in ((settings.stage.stage_app_id, "stage", "ttsflow stage"),
                               (settings.kafka.worker_group, "worker", "ttsflow worker")):
        if group_members(settings.kafka, group, timeout) == 0:
            out.append(f"no {what} is running (consumer group {group!r} has no active members; start one: {start}, "
                       f"or everything at once: ttsflow run)")
    return out


def tail_completions(kafka: KafkaSettings, *, from_beginning: bool = False, lookback_s: float = 0.0,
                     stop: threading.Event | None = None, poll_s: float = 0.5) -> Iterator[tuple[Completion, Any]]:
    """Yield (completion, message) as they commit, from the end of every partition (or the
    beginning, or ``lookback_s`` back) until ``stop`` is set. Undecodable records are skipped."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    probe_kafka(kafka)
    c = reader(kafka)
    try:
        parts = partitions(c, kafka.topic_completed, 10)
        if from_beginning:
            c.assign([TopicPartition(kafka.topic_completed, p, OFFSET_BEGINNING) for p in parts])
        else:
            since = int((time.time() - lookback_s) * 1000)
            c.assign(start_offsets(c, kafka.topic_completed, parts, since, 10))
        while stop is None or not stop.is_set():
            for m in consume_ready(c, 500, poll_s):
                if m.error() is not None:
                    continue
                try:
                    yield decode_completion(m.value()), m
                except SchemaError:
                    continue
    finally:
        c.close()


def find_completion(kafka: KafkaSettings, request_id: str, *, timeout: float = 60.0, user_id: str | None = None,
                    since_s: float | None = None) -> Completion | None:
    """Scan every partition of ``tts.completed`` (it is keyed by user, not request) from the
    beginning to its current end; the completion of ``request_id`` or None.

    ``user_id`` narrows the scan to that user's partition (murmur2, as every ttsflow producer
    maps it), ``since_s`` to the records of the last ``since_s`` seconds: what the gateway reads
    for a retry whose completion it no longer holds in memory."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    from streams.kafka.partitioner import partition_for

    probe_kafka(kafka)
    c = reader(kafka, **{"enable.partition.eof": True})
    try:
        parts = partitions(c, kafka.topic_completed, 10)
        if user_id is not None:
            parts = [partition_for(user_id.encode(), len(parts))]
        ends = {}
        for p in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(kafka.topic_completed, p), timeout=10, cached=False)
            if hi > lo:
                ends[p] = hi
        if not ends:
            return None
        if since_s is None:
            c.assign([TopicPartition(kafka.topic_completed, p, OFFSET_BEGINNING) for p in ends])
        else:
            since = int((time.time() - since_s) * 1000)
            starts = start_offsets(c, kafka.topic_completed, sorted(ends), since, 10)
            from confluent_kafka import OFFSET_END

            starts = [tp for tp in starts if tp.offset != OFFSET_END and tp.offset < ends[tp.partition]]  # else nothing newer
            if not starts:
                return None
            ends = {tp.partition: ends[tp.partition] for tp in starts}
            c.assign(starts)
        found: Completion | None = None
        pending = set(ends)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in consume_ready(c, 1000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    continue
                if m.offset() + 1 >= ends.get(m.partition(), 0):
                    pending.discard(m.partition())
                if request_id.encode() not in (m.value() or b""):
                    continue
                try:
                    comp = decode_completion(m.value())
                except SchemaError:
                    continue
                if comp.request_id == request_id:
                    found = comp
        if pending and found is None:
            raise CompletionTimeout(request_id, timeout)
        return found
    finally:
        c.close()
