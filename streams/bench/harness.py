"""Kafka and S3 plumbing shared by the demo, the chaos run, the pipeline benchmark and e2e tests.

Guarantees:

* :class:`Publisher` produces the way the README tells users to: ``murmur2_random``
  partitioner (Java/faust compatible), key = user id, idempotent, ``acks=all``; a
  delivery failure is raised from :meth:`Publisher.flush`, never swallowed.
* :class:`TopicReader` sees only committed records (``isolation.level=read_committed``),
  reads every partition of one topic by assignment (no consumer group is created), from
  the beginning or from the end offsets at construction (so a run on shared topics reads
  only what came after it started), and stamps each record with the local receive time.
* :func:`isolated` gives a run its own topics, consumer groups and transactional ids, so
  runs on one broker never see each other's records.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streams.settings import Settings

# librdkafka's own log lines (a broker restart yields hundreds of "connection refused") go
# to this logger, not to stderr; errors that matter reach us as exceptions or delivery errors.
_kafka_log = logging.getLogger("ttsflow.harness.librdkafka")
_kafka_log.addHandler(logging.NullHandler())
_kafka_log.propagate = False

__all__ = [
    "Publisher", "Record", "TopicReader", "cleanup_run_topics", "delete_run_topics", "isolated", "new_run_id", "percentile", "s3_client", "sha256_hex",
    "wait_for",
]


def new_run_id() -> str:
    """A short id unique per run: time of day plus random hex (valid in topic names and request ids)."""
    return time.strftime("%H%M%S") + secrets.token_hex(3)


def isolated(settings: Settings, run_id: str) -> Settings:
    """``settings`` with topics, groups and ids of their own for run ``run_id``."""
    return settings.replace(
        topic_requests=f"{settings.topic_requests}.{run_id}",
        topic_segments=f"{settings.topic_segments}.{run_id}",
        topic_completed=f"{settings.topic_completed}.{run_id}",
        topic_dlq=f"{settings.topic_dlq}.{run_id}",
        topic_done=f"{settings.topic_done}.{run_id}",
        stage_app_id=f"{settings.stage_app_id}-{run_id}",
        worker_group=f"{settings.worker_group}-{run_id}",
    )


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Publisher:
    """Idempotent producer of requests (or any bytes) keyed by user id."""

    def __init__(self, settings: Settings, **conf: Any) -> None:
        self._p = Producer({
            "bootstrap.servers": settings.bootstrap_servers,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 300_000,
            "logger": _kafka_log,
            **conf,
        })
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

    def __init__(self, settings: Settings, topic: str, *, start: Literal["beginning", "end"] = "beginning",
                 eof: bool = False) -> None:
        self.topic = topic
        self._c = Consumer({
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"ttsflow-reader-{secrets.token_hex(4)}",  # never joined nor committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": eof,
            "auto.offset.reset": "earliest",
            "logger": _kafka_log,
        })
        md = self._c.list_topics(topic, timeout=30)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            self._c.close()
            raise RuntimeError(f"topic {topic} does not exist on {settings.bootstrap_servers}")
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
        for msg in self._c.consume(max_records, timeout):
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


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client for the settings' endpoint (checksums only when required: s3proxy)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=settings.s3_endpoint, aws_access_key_id=settings.s3_access_key,
        aws_secret_access_key=settings.s3_secret_key, region_name=settings.s3_region,
        config=Config(request_checksum_calculation="when_required", response_checksum_validation="when_required",
                      retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=30),
    )


def wait_for(pred: Callable[[], bool], *, timeout: float, interval: float = 0.2, what: str = "condition") -> float:
    """Poll ``pred()`` until true; seconds waited. Raises ``TimeoutError`` naming ``what``."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - t0



def cleanup_run_topics(s: Settings, say: Callable[[str], None]) -> None:
    """:func:`delete_run_topics`, reporting a failure through ``say`` instead of raising: a
    benchmark's cleanup must not hide the run's result or error."""
    try:
        delete_run_topics(s)
    except Exception as e:
        say(f"cleanup failed: {e}")


def delete_run_topics(s: Settings) -> None:
    """Delete a run's topics (see :func:`isolated`) and the stage's internal ones (named after its app id)."""
    from confluent_kafka.admin import AdminClient

    from streams.devstack import stack

    names = [s.topic_requests, s.topic_segments, s.topic_completed, s.topic_dlq, s.topic_done]
    md = AdminClient({"bootstrap.servers": s.bootstrap_servers}).list_topics(timeout=10)
    names += [t for t in md.topics if t.startswith((s.stage_app_id + "-", s.stage_app_id + "."))]
    stack.delete_topics(s, [n for n in names if n in md.topics])
