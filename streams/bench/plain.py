"""Plain (non-transactional) publishing, and reading whole topics as a ``read_committed`` reader.

What the benchmarks, the demo, the chaos run and the tests use to feed the pipeline and to
see what it committed. Not used by the stage or the worker (their clients are in
:mod:`streams.kafka.config`, :mod:`~streams.kafka.producer`, :mod:`~streams.kafka.consumer`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streams.kafka.config import client_config, producer_config, reader_config
from streams.kafka.consumer import consume_ready
from streams.settings import KafkaSettings

__all__ = ["Publisher", "Record", "TopicReader", "count_records", "raw_producer"]

# librdkafka's own log lines (a broker restart yields hundreds of "connection refused") go
# to this logger, not to stderr; errors that matter reach us as exceptions or delivery errors.
_kafka_log = logging.getLogger("ttsflow.harness.librdkafka")
_kafka_log.addHandler(logging.NullHandler())
_kafka_log.propagate = False


def raw_producer(kafka: KafkaSettings, **conf: Any) -> Any:
    """A plain confluent-kafka ``Producer`` on the cluster with ``conf`` (tools only)."""
    return Producer(client_config(kafka, **conf))


def config_producer(conf: dict[str, Any]) -> Any:
    """A confluent-kafka ``Producer`` from a finished config (e.g. ``streams.kafka.producer_config``)."""
    return Producer(conf)


def assigned_reader(kafka: KafkaSettings, topics: list[str], **conf: Any) -> Any:
    """A ``read_committed`` ``Consumer`` assigned every partition of ``topics`` from the beginning
    (no group joined, nothing committed): a tool's reader of several topics at once."""
    c = Consumer(reader_config(kafka, **conf))
    parts = []
    for topic in topics:
        md = c.list_topics(topic, timeout=10).topics[topic]
        parts += [TopicPartition(topic, p, -2) for p in md.partitions]
    c.assign(parts)
    return c


def count_records(kafka: KafkaSettings, topic: str, *, isolation: str = "read_uncommitted",
                  timeout: float = 60.0) -> int:
    """How many records ``topic`` holds now, as a reader with ``isolation`` sees them."""
    c = Consumer(client_config(kafka, **{"group.id": f"bench-{secrets.token_hex(4)}", "enable.auto.commit": False,
                                         "isolation.level": isolation, "enable.partition.eof": True}))
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, -2) for p in md.partitions])
        n, deadline = 0, time.monotonic() + timeout
        eof: set[int] = set()
        while eof != set(md.partitions) and time.monotonic() < deadline:
            for m in consume_ready(c, 5000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition() or 0)
                    continue
                n += 1
        return n
    finally:
        c.close()


class Publisher:
    """Idempotent producer of requests (or any bytes) keyed by user id."""

    def __init__(self, kafka: KafkaSettings, **conf: Any) -> None:
        self._p = Producer(producer_config(kafka, **{"linger.ms": 2, "message.timeout.ms": 300_000,
                                                        "logger": _kafka_log, **conf}))
        self._errors: list[str] = []
        self.sent = 0

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def publish(self, topic: str, key: bytes | None, value: bytes) -> float:
        """Queue one record; returns ``time.time()`` at the call (the request's send time)."""
        t = time.time()
        while True:
            try:
                self._p.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                self._p.poll(0.1)
        self._p.poll(0)
        self.sent += 1
        return t

    def flush(self, timeout: float = 60.0) -> None:
        """Wait for every queued record; raises ``RuntimeError`` on any delivery failure."""
        left = self._p.flush(timeout)
        if self._errors:
            raise RuntimeError(f"{len(self._errors)} records not delivered: {self._errors[0]}")
        if left:
            raise RuntimeError(f"{left} records still undelivered after {timeout:.0f}s")


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes | None
    value: bytes
    partition: int
    offset: int
    received: float  # time.time() when this process read it


class TopicReader:
    """A ``read_committed`` reader of every partition of one topic (assigned, no group)."""

    def __init__(self, kafka: KafkaSettings, topic: str, *, start: Literal["beginning", "end"] = "beginning",
                 eof: bool = False) -> None:
        self.topic = topic
        self._c = Consumer(reader_config(kafka, **{
            "group.id": f"ttsflow-reader-{secrets.token_hex(4)}",  # never joined nor committed
            "enable.partition.eof": eof, "logger": _kafka_log}))
        md = self._c.list_topics(topic, timeout=30)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            self._c.close()
            raise RuntimeError(f"topic {topic} does not exist on {kafka.bootstrap_servers}")
        self.partitions = sorted(tmd.partitions)
        tps = []
        for p in self.partitions:
            if start == "end":
                tps.append(TopicPartition(topic, p, self._end_offset(topic, p)))
            else:
                tps.append(TopicPartition(topic, p, -2))  # OFFSET_BEGINNING
        self._c.assign(tps)
        self._at_eof: set[int] = set()

    def _end_offset(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        # A topic created a moment ago can answer NOT_LEADER until its metadata settles.
        deadline = time.monotonic() + timeout
        while True:
            try:
                _lo, hi = self._c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                return int(hi)
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if time.monotonic() > deadline or (isinstance(err, KafkaError) and err.fatal()):
                    raise
                time.sleep(0.2)

    def poll(self, timeout: float = 0.5, max_records: int = 500) -> list[Record]:
        """Records read within ``timeout`` (possibly none)."""
        out: list[Record] = []
        for msg in consume_ready(self._c, max_records, timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._at_eof.add(msg.partition() or 0)
                    continue
                if err.fatal():
                    raise KafkaException(err)
                continue  # transient (broker restarting, transport): librdkafka retries by itself
            part, off = msg.partition() or 0, msg.offset() or 0
            self._at_eof.discard(part)
            out.append(Record(msg.key(), msg.value() or b"", part, off, time.time()))
        return out

    @property
    def at_eof(self) -> bool:
        """True when every partition reported end of partition since its last record (``eof=True``)."""
        return set(self.partitions) <= self._at_eof

    def read_to_end(self, timeout: float = 60.0) -> list[Record]:
        """Everything up to the end of every partition (needs ``eof=True``); raises on the deadline."""
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        while not self.at_eof:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}: partitions {sorted(set(self.partitions) - self._at_eof)} "
                                   f"not at their end after {timeout:.0f}s (an open transaction?)")
            out += self.poll(0.5)
        return out

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
