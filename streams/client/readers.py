"""Group-less ``read_committed`` readers of ttsflow's output topics, positioned by time.

A reader never joins a group nor commits: it is assigned every partition it reads.
``start_offsets`` turns "from ``since_ms`` on" into concrete offsets before the caller
publishes anything, so an answer that commits right after the call is never skipped
(a logical end offset would be resolved later, when the fetcher starts).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from streams.client.errors import StackUnavailable
from streams.settings import KafkaSettings

__all__ = ["librdkafka_logger", "partitions", "reader", "start_offsets"]


def librdkafka_logger() -> logging.Logger:
    lg = logging.getLogger("ttsflow.client.librdkafka")
    lg.propagate = False
    lg.addHandler(logging.NullHandler())
    return lg


def reader(kafka: KafkaSettings, **extra: Any) -> Any:
    from confluent_kafka import Consumer

    from streams.kafka.config import reader_config

    return Consumer(reader_config(kafka, **{"group.id": f"ttsflow-client-{uuid.uuid4().hex[:12]}",  # never joins
                                            "logger": librdkafka_logger(), **extra}))


def partitions(consumer: Any, topic: str, timeout: float) -> list[int]:
    md = consumer.list_topics(topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise StackUnavailable(f"topic {topic} does not exist on the broker (ttsflow stack up creates it)")
    return sorted(t.partitions)


def start_offsets(consumer: Any, topic: str, parts: list[int], since_ms: int, timeout: float) -> list[Any]:
    from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

    want = [TopicPartition(topic, p, since_ms) for p in parts]
    deadline = time.monotonic() + timeout
    while True:  # a topic created a moment ago may not have a leader yet
        try:
            got = consumer.offsets_for_times(want, timeout=max(deadline - time.monotonic(), 0.1))
            break
        except KafkaException as e:
            if time.monotonic() >= deadline:
                raise StackUnavailable(f"could not look up offsets of {topic}: {e.args[0].str()}") from None
            time.sleep(0.1)  # back-off between retries of a retriable broker answer
    # -1: nothing at or after the timestamp in that partition: start at its end as of now, a concrete
    # offset (the last stable one: read_committed). A logical OFFSET_END would be resolved only when
    # the fetcher starts, after the caller may have published, and an answer landing in between
    # would never be seen (a fast pipeline on a fresh topic, a loaded machine).
    out = []
    for tp in got:
        offset = tp.offset
        if offset < 0:
            try:
                marks = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                       timeout=max(deadline - time.monotonic(), 1.0), cached=False)
            except KafkaException:
                marks = None
            offset = marks[1] if marks is not None else OFFSET_END  # None: timed out
        out.append(TopicPartition(topic, tp.partition, offset))
    return out
