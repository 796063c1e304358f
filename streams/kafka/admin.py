"""Topic creation and broker checks: every topic ttsflow uses, made before any process needs it.

Guarantees:

* :func:`ensure_done_topic` creates the worker's compacted done topic with at least as
  many partitions as the segments topic, since a segment in partition p records its
  request as done in partition p of the done topic.
* :func:`ensure_topics` creates every topic ttsflow uses, the stage's faust-internal
  ones included (its dedup table's changelog, compacted, with as many partitions as the
  requests topic; faust's leader topic), before any process needs them. Left to faust,
  a first stage on a fresh cluster created its changelog while already consuming, and
  the metadata race stalled a partition for 35 s (``input_stalled``, a self-restart).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from streams.settings import Settings
from streams.stage.dedup import dedup_table_name

__all__ = ["TopicSpec", "ensure_done_topic", "ensure_topics", "topic_specs", "wait_for_broker"]

_log = logging.getLogger("ttsflow.kafka")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def _done_topic_config(settings: Settings) -> dict[str, str]:
    return {"cleanup.policy": "compact,delete", "retention.ms": str(2 * settings.dedup_window_s * 1000),
            "min.compaction.lag.ms": "0", "segment.ms": str(3600 * 1000)}


def topic_specs(settings: Settings, *, partitions: int | None = None) -> list[TopicSpec]:
    """Every topic of a ttsflow deployment of ``settings``: the five of the pipeline and the
    stage's two faust-internal ones (names as faust derives them from the app id)."""
    n = partitions or settings.partitions
    app = settings.stage_app_id
    return [
        TopicSpec(settings.topic_requests, n), TopicSpec(settings.topic_segments, n),
        TopicSpec(settings.topic_completed, n), TopicSpec(settings.topic_dlq, n),
        TopicSpec(settings.topic_done, n, _done_topic_config(settings)),
        # the dedup table's changelog: entries expire a bucket at a time (streams/stage/dedup.py)
        TopicSpec(f"{app}-{dedup_table_name(settings)}-changelog", n,
                  {"cleanup.policy": "compact,delete", "retention.ms": str(2 * settings.dedup_window_s * 1000),
                   "segment.ms": str(min(3600, settings.dedup_window_s) * 1000)}),
        TopicSpec(f"{app}-__assignor-__leader", 1),
    ]


def ensure_topics(settings: Settings, *, partitions: int | None = None, timeout: float = 30.0) -> list[str]:
    """Create the topics of :func:`topic_specs` that are missing and wait until every one has
    a leader; returns the names created now. Existing topics are left as they are."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "socket.timeout.ms": 5000,
                         "log_level": 3})
    specs = topic_specs(settings, partitions=partitions)
    new = [NewTopic(t.name, num_partitions=t.partitions, replication_factor=settings.replication_factor,
                    config=t.config) for t in specs]
    created = []
    for name, fut in admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout).items():
        try:
            fut.result(timeout)
            created.append(name)
            _log.info("event=topic_created topic=%s", name)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    deadline = time.monotonic() + timeout
    names = [t.name for t in specs]
    while True:
        md = admin.list_topics(timeout=5)
        missing = [n for n in names if n not in md.topics or md.topics[n].error is not None
                   or any(pm.leader < 0 for pm in md.topics[n].partitions.values())]
        if not missing:
            return created
        if time.monotonic() > deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"topics without a leader after {timeout:.0f}s: {', '.join(missing)}"))
        time.sleep(0.1)


def wait_for_broker(settings: Settings, *, timeout_s: float) -> bool:
    """Wait until the cluster answers a metadata request; False after ``timeout_s``. A process
    started while the broker restarts waits for it instead of exiting into its
    orchestrator's crash-loop back-off."""
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 3})
    deadline = time.monotonic() + timeout_s
    logged = False
    while True:
        try:
            admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
            if logged:
                _log.info("event=broker_reachable bootstrap=%s", settings.bootstrap_servers)
            return True
        except KafkaException as e:
            if time.monotonic() >= deadline:
                return False
            if not logged:
                _log.warning("event=waiting_for_broker bootstrap=%s error=%s", settings.bootstrap_servers, e)
                logged = True
            time.sleep(1.0)


def ensure_done_topic(settings: Settings, *, timeout: float = 10.0) -> int:
    """Create the compacted done topic if missing; returns its partition count.

    It gets ``max(settings.partitions, partitions of the segments topic)`` partitions,
    ``cleanup.policy=compact,delete`` with a retention of twice the stage's dedup window:
    a re-emitted segment older than that is no longer expected.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    md = admin.list_topics(timeout=timeout)
    seg = md.topics.get(settings.topic_segments)
    want = max(settings.partitions, len(seg.partitions) if seg is not None and not seg.error else 0)
    have = md.topics.get(settings.topic_done)
    if have is not None and not have.error:
        n = len(have.partitions)
        if n < want:
            from streams.errors import FatalError

            raise FatalError(f"{settings.topic_done} has {n} partitions, fewer than {settings.topic_segments} "
                             f"({want}); add partitions to it (kafka-topics --alter --partitions {want})")
        return n
    topic = NewTopic(settings.topic_done, num_partitions=want, replication_factor=settings.replication_factor,
                     config=_done_topic_config(settings))
    fut = admin.create_topics([topic], operation_timeout=timeout)[settings.topic_done]
    try:
        fut.result(timeout)
        _log.info("event=topic_created topic=%s partitions=%d", settings.topic_done, want)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return want
