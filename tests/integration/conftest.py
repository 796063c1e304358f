"""Fixtures for tests against the real local stack (``ttsflow stack up``).

Several engineers and CI share one broker, so every test gets its OWN topics and
groups: the ``settings`` fixture is a copy of the stack's settings whose topic names
(requests, segments, completed, dlq, done) and group names (stage app id, worker group)
carry a random suffix; those topics are created with 4 partitions (``topic_done``
compacted) before the test and deleted after it, with any topic the test's stage
created under its app id.

Nothing is skipped: if the stack is not up, every test here errors with one line
saying how to start it.

Helpers (fixtures):

* ``make_producer(**conf)``: a confluent-kafka Producer with ``murmur2_random`` (the
  partitioner every ttsflow producer uses), flushed at teardown.
* ``make_consumer(topics, **conf)``: a ``read_committed`` consumer from the earliest
  offset in a fresh group, closed at teardown.
* ``drain(topic, count=None, timeout=30)``: what a ``read_committed`` reader sees,
  read from the beginning of every partition until the end (and at least ``count``
  messages) or the deadline. :func:`drain_topic` is the same as a plain function.
* ``s3`` (boto3 client), ``redis_client``, ``unique`` (a fresh suffix string).
* ``private_stack``: settings of a stack of the test's OWN (home in a temp dir, free ports,
  Kafka jars shared with the main stack's home), fresh and empty, taken down after the test:
  for tests that restart the broker or need a cluster nobody has used.
* ``secure_stack``: the same, started once per module with ``stack up --secure`` (SASL_SSL only,
  SCRAM users, ACLs): ``(settings, home)``; ``streams.devstack.secure.client_settings(settings,
  home, name)`` is what a principal sees.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.bench.harness import isolated
from streams.devstack.stack import delete_topics, ensure_topics
from streams.settings import Settings
from tests.support.stack import require_stack

TEST_PARTITIONS = 4
_STACK_UP_S = 420.0  # a KRaft broker on a loaded 2-core machine has taken over 3 minutes to start


def _private_settings(home: Path) -> Settings:
    from streams.devstack.procs import free_ports
    from streams.settings import load_settings

    base = load_settings()
    home.mkdir()
    shared_jars = Path(base.process.home).expanduser().resolve() / "jars"
    if shared_jars.is_dir():
        (home / "jars").symlink_to(shared_jars)
    kp, cp, sp, rp = free_ports(4)
    return base.replace(home=str(home), kafka_port=kp, kafka_controller_port=cp, s3_port=sp, redis_port=rp,
                        bootstrap_servers=f"127.0.0.1:{kp}", s3_endpoint=f"http://127.0.0.1:{sp}",
                        redis_url=f"redis://127.0.0.1:{rp}/0", model_dir=str(base.effective_model_dir))


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Path]]:
    from streams.devstack import stack

    s = _private_settings(tmp_path_factory.mktemp("secure") / "stack")
    try:
        stack.stack_up(s, quiet=True, timeout=_STACK_UP_S, secure_kafka=True)
        yield s, Path(s.process.home)
    finally:
        stack.stack_down(s, quiet=True)


@pytest.fixture
def private_stack(tmp_path: Path) -> Iterator[Settings]:
    from streams.devstack import stack
    from streams.devstack.procs import free_ports
    from streams.settings import load_settings

    base = load_settings()
    home = tmp_path / "stack"
    home.mkdir()
    shared_jars = Path(base.process.home).expanduser().resolve() / "jars"
    if shared_jars.is_dir():
        (home / "jars").symlink_to(shared_jars)
    kp, cp, sp, rp = free_ports(4)
    s = base.replace(home=str(home), kafka_port=kp, kafka_controller_port=cp, s3_port=sp, redis_port=rp,
                     bootstrap_servers=f"127.0.0.1:{kp}", s3_endpoint=f"http://127.0.0.1:{sp}",
                     redis_url=f"redis://127.0.0.1:{rp}/0", model_dir=str(base.effective_model_dir))
    try:
        stack.stack_up(s, quiet=True, timeout=_STACK_UP_S)
        yield s
    finally:
        stack.stack_down(s)


@pytest.fixture(scope="session")
def stack_settings() -> Settings:
    """The stack's settings (``TTS_*`` env), after checking all three services answer."""
    return require_stack()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A short suffix unique to this test run: sanitized test name + random hex."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-").lower()[:32]
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def settings(stack_settings: Settings, unique: str) -> Iterator[Settings]:
    """Stack settings with per-test topics and groups; the topics exist for the test."""
    s = isolated(stack_settings, unique).replace(partitions=TEST_PARTITIONS)
    ensure_topics(s, partitions=TEST_PARTITIONS)
    yield s
    _cleanup(s, unique)


def _cleanup(s: Settings, unique: str) -> None:
    admin = AdminClient({"bootstrap.servers": s.kafka.bootstrap_servers})
    topics = [t for t in admin.list_topics(timeout=10).topics if unique in t]
    delete_topics(s, topics)
    groups = [s.stage.stage_app_id, s.kafka.worker_group]
    for fut in admin.delete_consumer_groups(groups, request_timeout=10).values():
        try:
            fut.result(10)
        except KafkaException:
            pass  # never joined, or still has members that are shutting down: harmless leftovers


def producer_conf(s: Settings, **conf: Any) -> dict[str, Any]:
    return {"bootstrap.servers": s.kafka.bootstrap_servers, "partitioner": "murmur2_random", "linger.ms": 5, **conf}


@pytest.fixture
def make_producer(stack_settings: Settings) -> Iterator[Callable[..., Producer]]:
    made: list[Producer] = []

    def factory(**conf: Any) -> Producer:
        p = Producer(producer_conf(stack_settings, **conf))
        made.append(p)
        return p

    yield factory
    for p in made:
        p.flush(10)


@pytest.fixture
def make_consumer(stack_settings: Settings) -> Iterator[Callable[..., Consumer]]:
    made: list[Consumer] = []

    def factory(topics: list[str], **conf: Any) -> Consumer:
        c = Consumer({"bootstrap.servers": stack_settings.kafka.bootstrap_servers,
                      "group.id": f"test-{uuid.uuid4().hex[:12]}", "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed", "enable.auto.commit": False, **conf})
        c.subscribe(topics)
        made.append(c)
        return c

    yield factory
    for c in made:
        c.close()


def drain_topic(bootstrap: str, topic: str, *, count: int | None = None, timeout: float = 30.0,
                isolation: str = "read_committed") -> list[Message]:
    """Every message a reader with ``isolation`` sees in ``topic``, from the beginning.

    Stops when all partitions are at their end (for ``read_committed``: the last stable
    offset) and at least ``count`` messages were read, or at the deadline; returns what
    it read either way, so a test asserts on the count it expected. No group commits.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"drain-{uuid.uuid4().hex[:12]}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                  "auto.offset.reset": "earliest"})
    try:
        deadline = time.monotonic() + timeout
        md = c.list_topics(topic, timeout=min(10.0, timeout))
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            raise KafkaException(tmd.error if tmd is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        parts = set(tmd.partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[Message] = []
        at_end: set[int] = set()
        while time.monotonic() < deadline:
            if at_end == parts and (count is None or len(out) >= count):
                break
            m = c.poll(0.2)
            if m is None:
                continue
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise KafkaException(err)
            at_end.discard(m.partition())
            out.append(m)
        return out
    finally:
        c.close()


@pytest.fixture
def drain(stack_settings: Settings) -> Callable[..., list[Message]]:
    def run(topic: str, count: int | None = None, timeout: float = 30.0,
            isolation: str = "read_committed") -> list[Message]:
        return drain_topic(stack_settings.kafka.bootstrap_servers, topic, count=count, timeout=timeout, isolation=isolation)
    return run


def s3_client(s: Settings) -> Any:
    """A boto3 S3 client for the stack: path-style, checksums only when required."""
    from storage.s3 import s3_client as client

    return client(s.s3.s3_endpoint, s.s3.s3_access_key, s.s3.s3_secret_key, s.s3.s3_region, retries={"max_attempts": 2})


@pytest.fixture
def s3(stack_settings: Settings) -> Iterator[Any]:
    client = s3_client(stack_settings)
    yield client
    client.close()


@pytest.fixture
def redis_client(stack_settings: Settings) -> Iterator[Any]:
    import redis
    client = redis.Redis.from_url(stack_settings.redis.redis_url, socket_timeout=5)
    yield client
    client.close()
