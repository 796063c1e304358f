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

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from streams.kafka.config import client_config
from streams.kafka.topics import done_topic_config, topic_specs
from streams.settings import KafkaSettings, StageSettings

__all__ = ["admin_client", "broker_settings", "create_acls", "delete_topics", "ensure_done_topic", "ensure_topics", "group_members",
           "kafka_exception", "topic_names", "topic_replication", "wait_for_broker"]

_log = logging.getLogger("ttsflow.kafka")


def ensure_topics(kafka: KafkaSettings, stage: StageSettings, *, partitions: int | None = None,
                  timeout: float = 30.0) -> list[str]:
    """Create the topics of :func:`topic_specs` that are missing and wait until every one has
    a leader; returns the names created now. Existing topics are left as they are."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(kafka, **{"socket.timeout.ms": 5000, "log_level": 3}))
    specs = topic_specs(kafka, stage, partitions=partitions)
    new = [NewTopic(t.name, num_partitions=t.partitions, replication_factor=kafka.replication_factor,
                    config=t.config) for t in specs]
    created = []
    deadline = time.monotonic() + timeout
    # a cluster that has just formed may drop the request's broker handle or move its controller: the
    # topics not yet made are asked for again until the deadline (one already made answers "exists")
    transient = (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError.NOT_CONTROLLER)
    while new:
        retry = []
        asked = {t.topic: t for t in new}
        for name, fut in admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout).items():
            try:
                fut.result(timeout)
                created.append(name)
                _log.info("event=topic_created topic=%s", name)
            except KafkaException as e:
                err = e.args[0]
                if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                if not (err.retriable() or err.code() in transient) or time.monotonic() > deadline:
                    raise
                _log.warning("event=topic_create_retry topic=%s error=%s", name, err)
                retry.append(asked[name])
        new = retry
        if new:
            time.sleep(0.5)
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


def wait_for_broker(kafka: KafkaSettings, *, timeout_s: float) -> bool:
    """Wait until the cluster answers a metadata request; False after ``timeout_s``. A process
    started while the broker restarts waits for it instead of exiting into its
    orchestrator's crash-loop back-off. A cluster that refuses this client (wrong password,
    untrusted CA) raises :class:`~streams.errors.KafkaAccessError` at once instead."""
    import time

    from streams.errors import RetriableError
    from streams.kafka.access import connect

    deadline = time.monotonic() + timeout_s
    logged = False
    while True:
        try:
            connect(kafka, timeout_s=min(5.0, max(0.5, deadline - time.monotonic())))
            if logged:
                _log.info("event=broker_reachable bootstrap=%s", kafka.bootstrap_servers)
            return True
        except RetriableError as e:
            if time.monotonic() >= deadline:
                return False
            if not logged:
                _log.warning("event=waiting_for_broker bootstrap=%s error=%s", kafka.bootstrap_servers, e)
                logged = True
            time.sleep(1.0)


def ensure_done_topic(kafka: KafkaSettings, dedup_window_s: int, *, timeout: float = 10.0) -> int:
    """Create the compacted done topic if missing; returns its partition count.

    It gets ``max(kafka.partitions, partitions of the segments topic)`` partitions,
    ``cleanup.policy=compact,delete`` with a retention of twice the stage's dedup window:
    a re-emitted segment older than that is no longer expected.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(kafka))
    md = admin.list_topics(timeout=timeout)
    seg = md.topics.get(kafka.topic_segments)
    want = max(kafka.partitions, len(seg.partitions) if seg is not None and not seg.error else 0)
    have = md.topics.get(kafka.topic_done)
    if have is not None and not have.error:
        n = len(have.partitions)
        if n < want:
            from streams.errors import FatalError

            raise FatalError(f"{kafka.topic_done} has {n} partitions, fewer than {kafka.topic_segments} "
                             f"({want}); add partitions to it (kafka-topics --alter --partitions {want})")
        return n
    topic = NewTopic(kafka.topic_done, num_partitions=want, replication_factor=kafka.replication_factor,
                     config=done_topic_config(dedup_window_s))
    fut = admin.create_topics([topic], operation_timeout=timeout)[kafka.topic_done]
    try:
        fut.result(timeout)
        _log.info("event=topic_created topic=%s partitions=%d", kafka.topic_done, want)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return want


def admin_client(kafka: KafkaSettings, *, bootstrap: str | None = None, **conf: Any) -> Any:
    """A confluent-kafka ``AdminClient`` on the cluster (or ``bootstrap``) with ``conf``."""
    from confluent_kafka.admin import AdminClient

    base = client_config(kafka, **conf)
    if bootstrap:
        base["bootstrap.servers"] = bootstrap
    return AdminClient(base)


@contextlib.contextmanager
def broker_settings(kafka: KafkaSettings, values: dict[str, str], timeout_s: float = 30.0) -> Iterator[None]:
    """Set ``values`` as each broker's dynamic settings (``kafka-configs --entity-type brokers``)
    for the block, then delete them (each broker back to its static setting); each change waited
    for until every broker reports it. For a broker knob's cost side by side (``bench paired
    --b-broker``): both arms on one broker."""
    if not values:
        yield
        return
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

    admin = admin_client(kafka)
    brokers = [str(b) for b in admin.list_topics(timeout=10).brokers]

    def described() -> list[dict[str, Any]]:
        res = [ConfigResource("broker", b) for b in brokers]
        return [fut.result(timeout=10) for fut in admin.describe_configs(res, request_timeout=10).values()]

    def seen(want_set: bool) -> bool:
        for entries in described():
            for k, v in values.items():
                dynamic = entries[k].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
                if want_set != (dynamic and entries[k].value == v):
                    return False
        return True

    unknown = sorted({k for entries in described() for k in values if k not in entries})
    if unknown:  # the broker would store it anyway, as a dynamic setting nothing reads
        raise ValueError(f"the broker has no setting {', '.join(unknown)}")

    def alter(op: Any, want_set: bool) -> None:
        res = [ConfigResource("broker", b, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=op) for k, v in values.items()]) for b in brokers]
        for fut in admin.incremental_alter_configs(res).values():
            fut.result(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while not seen(want_set):  # a dynamic setting reaches its broker through the metadata log
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokers did not take {values} within {timeout_s:.0f} s")
            time.sleep(0.2)

    alter(AlterConfigOpType.SET, True)
    try:
        yield
    finally:
        alter(AlterConfigOpType.DELETE, False)


def create_acls(kafka: KafkaSettings, acls: Sequence[tuple[str, str, str, str, str]], *,
                timeout: float = 30.0) -> int:
    """Create ALLOW ACLs, each ``(principal, resource type, name, pattern type, operation)`` in
    Kafka's names (``("User:u", "TOPIC", "tts.requests", "LITERAL", "WRITE")``), on any host;
    an existing one is left as it is. Returns how many were sent; raises ``KafkaException``."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    admin = admin_client(kafka, log_level=3)
    bindings = [AclBinding(ResourceType[res], name, ResourcePatternType[pattern], principal, "*", AclOperation[op],
                           AclPermissionType.ALLOW) for principal, res, name, pattern, op in acls]
    for fut in admin.create_acls(bindings, request_timeout=timeout).values():
        fut.result(timeout)
    return len(bindings)


def kafka_exception() -> type[Exception]:
    """confluent-kafka's ``KafkaException``, for code outside streams.kafka that must catch it."""
    from confluent_kafka import KafkaException

    return KafkaException


def topic_names(kafka: KafkaSettings, *, timeout: float = 10.0) -> set[str]:
    """The names of every topic of the cluster now."""
    return set(admin_client(kafka).list_topics(timeout=timeout).topics)


def delete_topics(admin: Any, names: Sequence[str], *, timeout: float = 30.0) -> None:
    """Delete topics with ``admin``, ignoring ones that do not exist."""
    import contextlib

    if not names:
        return
    for fut in admin.delete_topics(list(names), operation_timeout=timeout, request_timeout=timeout).values():
        with contextlib.suppress(Exception):
            fut.result(timeout)


def group_members(kafka: KafkaSettings, group: str, timeout: float = 5.0) -> int:
    """Members of a consumer group right now (0 if it does not exist or is rebalancing)."""
    admin = admin_client(kafka)
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)
    except Exception:  # KafkaException: coordinator not available yet, group unknown
        return 0
    state = str(getattr(desc, "state", "")).upper()
    return len(desc.members) if "STABLE" in state else 0



def topic_replication(admin: Any, names: Sequence[str], *, timeout: float = 10.0) -> dict[str, dict[str, int]]:
    """``{topic: {"replication_factor": r, "min_insync_replicas": m}}`` of the named topics that
    exist (``r``: the fewest replicas of any of its partitions; ``m``: its effective config)."""
    from confluent_kafka.admin import ConfigResource

    md = admin.list_topics(timeout=timeout)
    present = [n for n in names if n in md.topics and md.topics[n].error is None and md.topics[n].partitions]
    out: dict[str, dict[str, int]] = {
        n: {"replication_factor": min(len(pm.replicas) for pm in md.topics[n].partitions.values())} for n in present}
    if present:
        futs = admin.describe_configs([ConfigResource("topic", n) for n in present], request_timeout=timeout)
        for res, fut in futs.items():
            out[res.name]["min_insync_replicas"] = int(fut.result(timeout)["min.insync.replicas"].value)
    return out
