"""The local stack behaves like the real services ttsflow relies on.

Kafka transactions are seen (or not) by ``read_committed`` readers the way exactly-once
needs; S3 stores and serves objects with access-key auth; Redis has ``SET NX EX``;
``ttsflow stack`` is idempotent and reports its state; Kafka's own tools run against it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from confluent_kafka import TopicPartition

from streams.devstack.jars import kafka_tool
from streams.devstack.procs import free_ports
from streams.settings import Settings

pytestmark = pytest.mark.integration

TTSFLOW = [sys.executable, "-m", "streams.cli"]


def test_read_committed_sees_committed_transactions_only(settings: Settings, make_producer, drain) -> None:
    topic = settings.kafka.topic_completed
    p = make_producer(**{"transactional.id": f"txn-{uuid.uuid4().hex}"})
    p.init_transactions(30)

    p.begin_transaction()
    for i in range(3):
        p.produce(topic, key=b"user-1", value=f"committed-{i}".encode())
    p.commit_transaction(30)

    p.begin_transaction()
    for i in range(2):
        p.produce(topic, key=b"user-1", value=f"aborted-{i}".encode())
    p.flush(10)  # the aborted records really reach the log before the abort
    p.abort_transaction(30)

    p.begin_transaction()
    p.produce(topic, key=b"user-1", value=b"committed-3")
    p.commit_transaction(30)

    committed = [m.value() for m in drain(topic, count=4)]
    assert committed == [b"committed-0", b"committed-1", b"committed-2", b"committed-3"]
    # The aborted records are in the log; only isolation hides them.
    everything = [m.value() for m in drain(topic, count=6, isolation="read_uncommitted")]
    assert sorted(v for v in everything if v.startswith(b"aborted")) == [b"aborted-0", b"aborted-1"]


def test_offsets_committed_in_transaction_move_only_on_commit(settings: Settings, make_producer,
                                                              make_consumer) -> None:
    """The worker's pattern: output + consumer offsets in one transaction."""
    src, dst = settings.kafka.topic_segments, settings.kafka.topic_completed
    feeder = make_producer()
    for i in range(4):
        feeder.produce(src, key=b"user-7", value=f"seg-{i}".encode())
    assert feeder.flush(10) == 0

    consumer = make_consumer([src], **{"group.id": settings.kafka.worker_group})
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    assert len(got) == 4
    part = got[0].partition()
    assert {m.partition() for m in got} == {part}  # one key, one partition (murmur2)

    p = make_producer(**{"transactional.id": f"txn-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    offsets = [TopicPartition(src, part, got[-1].offset() + 1)]

    p.begin_transaction()
    p.produce(dst, key=b"user-7", value=b"done")
    p.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    committed = consumer.committed([TopicPartition(src, part)], timeout=10)[0].offset
    assert committed < 0  # nothing committed: an abort rewinds to where the group was

    p.begin_transaction()
    p.produce(dst, key=b"user-7", value=b"done")
    p.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    assert consumer.committed([TopicPartition(src, part)], timeout=10)[0].offset == got[-1].offset() + 1


def test_stack_topics_exist_with_settings_partitions(stack_settings: Settings) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": stack_settings.kafka.bootstrap_servers})
    md = admin.list_topics(timeout=10)
    for name in (stack_settings.kafka.topic_requests, stack_settings.kafka.topic_segments, stack_settings.kafka.topic_completed,
                 stack_settings.kafka.topic_dlq, stack_settings.kafka.topic_done):
        assert name in md.topics, f"{name} was not created by stack up"
        assert len(md.topics[name].partitions) == stack_settings.kafka.partitions
    res = ConfigResource(ConfigResource.Type.TOPIC, stack_settings.kafka.topic_done)
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["cleanup.policy"].value == "compact,delete"  # kept twice the dedup window
    # the stage's own topics exist before any stage runs (faust creating them mid-run stalled a first demo)
    changelog = f"{stack_settings.stage.stage_app_id}-seen-changelog"
    assert len(md.topics[changelog].partitions) == stack_settings.kafka.partitions
    res = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    assert admin.describe_configs([res])[res].result(10)["cleanup.policy"].value == "compact,delete"
    assert f"{stack_settings.stage.stage_app_id}-__assignor-__leader" in md.topics


def test_broker_settings_hold_for_the_block_and_are_removed_after_it(stack_settings: Settings) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    from streams.kafka.admin import broker_settings

    admin = AdminClient({"bootstrap.servers": stack_settings.kafka.bootstrap_servers})
    key = "transaction.partition.verification.enable"

    def entry() -> Any:
        res = ConfigResource(ConfigResource.Type.BROKER, str(next(iter(admin.list_topics(timeout=10).brokers))))
        return admin.describe_configs([res])[res].result(10)[key]

    before = entry()
    assert before.value == "true"
    with broker_settings(stack_settings.kafka, {key: "false"}):
        inside = entry()
        assert (inside.value, inside.source) == ("false", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    after = entry()
    assert after.value == "true" and after.source != ConfigSource.DYNAMIC_BROKER_CONFIG.value
    with pytest.raises(ValueError, match="no setting"), broker_settings(stack_settings.kafka, {"no.such.setting": "1"}):
        pass


def test_s3_put_get_head_list_delete(stack_settings: Settings, s3: Any, unique: str) -> None:
    bucket = stack_settings.s3.s3_bucket
    prefix = f"test/{unique}/"
    body = os.urandom(200_000)
    s3.put_object(Bucket=bucket, Key=prefix + "a.wav", Body=body, ContentType="audio/wav",
                  Metadata={"sha256": hashlib.sha256(body).hexdigest()})
    s3.put_object(Bucket=bucket, Key=prefix + "b.wav", Body=b"second")

    head = s3.head_object(Bucket=bucket, Key=prefix + "a.wav")
    assert head["ContentLength"] == len(body)
    assert head["ContentType"] == "audio/wav"
    assert head["Metadata"]["sha256"] == hashlib.sha256(body).hexdigest()

    got = s3.get_object(Bucket=bucket, Key=prefix + "a.wav")["Body"].read()
    assert got == body

    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    assert sorted(o["Key"] for o in listed["Contents"]) == [prefix + "a.wav", prefix + "b.wav"]

    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": prefix + "a.wav"}, {"Key": prefix + "b.wav"}]})
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key=prefix + "a.wav")
    assert e.value.response["Error"]["Code"] in ("404", "NoSuchKey")


def test_s3_rejects_a_wrong_secret(stack_settings: Settings) -> None:
    from tests.integration.conftest import s3_client

    bad = s3_client(stack_settings.replace(s3_secret_key="not-the-secret"))
    try:
        with pytest.raises(ClientError) as e:
            bad.list_objects_v2(Bucket=stack_settings.s3.s3_bucket)
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    finally:
        bad.close()


def test_s3_accepts_default_boto3_checksums(stack_settings: Settings, unique: str) -> None:
    """boto3 >= 1.36 sends x-amz-checksum headers by default; the server must not refuse them."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3", endpoint_url=stack_settings.s3.s3_endpoint, region_name=stack_settings.s3.s3_region,
        aws_access_key_id=stack_settings.s3.s3_access_key, aws_secret_access_key=stack_settings.s3.s3_secret_key,
        config=Config(s3={"addressing_style": "path"}))
    try:
        key = f"test/{unique}/checksummed"
        client.put_object(Bucket=stack_settings.s3.s3_bucket, Key=key, Body=b"x" * 1000)
        assert client.get_object(Bucket=stack_settings.s3.s3_bucket, Key=key)["Body"].read() == b"x" * 1000
        client.delete_object(Bucket=stack_settings.s3.s3_bucket, Key=key)
    finally:
        client.close()


def test_redis_set_nx_ex(redis_client: Any, unique: str) -> None:
    key = f"test:{unique}"
    assert redis_client.set(key, b"first", nx=True, ex=60) is True
    assert redis_client.set(key, b"second", nx=True, ex=60) is None  # NX: the first writer wins
    assert redis_client.get(key) == b"first"
    assert 0 < redis_client.ttl(key) <= 60

    short = f"test:{unique}:short"
    assert redis_client.set(short, b"v", nx=True, px=200) is True
    deadline = time.monotonic() + 10
    while redis_client.exists(short) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not redis_client.exists(short)  # expired
    assert redis_client.set(short, b"again", nx=True, ex=5) is True  # and free again
    redis_client.delete(key, short)


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TTSFLOW, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL, check=False)


def test_status_json_fields(stack_settings: Settings) -> None:
    res = _cli("stack", "status", "--json")
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(st) == {"kafka", "s3", "redis"}
    assert st["kafka"]["ok"] is True
    assert st["kafka"]["address"] == f"127.0.0.1:{stack_settings.local_stack.kafka_port}"
    # the cluster as its metadata sees it: one broker, every partition fully replicated and led
    cluster = st["kafka"]["cluster"]
    assert cluster["brokers"] == [1] and cluster["partitions"] > 0
    assert cluster["under_replicated"] == 0 and cluster["offline"] == 0
    assert st["s3"]["ok"] is True and st["s3"]["address"] == f"http://127.0.0.1:{stack_settings.local_stack.s3_port}"
    assert st["redis"]["ok"] is True and st["redis"]["address"] == f"127.0.0.1:{stack_settings.local_stack.redis_port}"


def test_stack_up_twice_is_harmless(stack_settings: Settings, s3: Any, unique: str) -> None:
    key = f"test/{unique}/survives-up"
    s3.put_object(Bucket=stack_settings.s3.s3_bucket, Key=key, Body=b"kept")
    before = json.loads(_cli("stack", "status", "--json").stdout)
    res = _cli("stack", "up", "--json")
    assert res.returncode == 0, res.stderr
    after = json.loads(res.stdout.strip().splitlines()[-1])
    assert all(after[s]["ok"] for s in ("kafka", "s3", "redis"))
    for svc in ("kafka", "s3", "redis"):  # nothing restarted
        assert after[svc]["pid"] == before[svc]["pid"]
    assert s3.get_object(Bucket=stack_settings.s3.s3_bucket, Key=key)["Body"].read() == b"kept"
    s3.delete_object(Bucket=stack_settings.s3.s3_bucket, Key=key)


def test_kafka_tools_run_against_the_stack(settings: Settings, make_producer, make_consumer) -> None:
    tid = f"txn-{uuid.uuid4().hex}"
    p = make_producer(**{"transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(settings.kafka.topic_requests, key=b"u", value=b"visible")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(settings.kafka.topic_requests, key=b"u", value=b"hidden")
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(settings.kafka.topic_requests, key=b"u", value=b"visible-2")
    p.commit_transaction(30)

    c = make_consumer([settings.kafka.topic_requests], **{"group.id": settings.kafka.worker_group})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            c.commit(m, asynchronous=False)
            break

    groups = kafka_tool(settings, "ConsumerGroupCommand", ["--describe", "--group", settings.kafka.worker_group])
    assert groups.returncode == 0, groups.stderr
    assert settings.kafka.topic_requests in groups.stdout

    txns = kafka_tool(settings, "TransactionsCommand", ["list"])
    assert txns.returncode == 0, txns.stderr
    assert tid in txns.stdout

    console = kafka_tool(settings, "ConsoleConsumer",
                         ["--topic", settings.kafka.topic_requests, "--from-beginning", "--isolation-level",
                          "read_committed", "--max-messages", "2", "--timeout-ms", "20000"])
    assert console.stdout.split() == ["visible", "visible-2"]  # same key, one partition, in order


# --- a second, private stack: persistence across down/up, ports in use, missing Java -------------

def _private_env(stack_settings: Settings, home: Path) -> dict[str, str]:
    kafka, controller, s3port, redis_port = free_ports(4)
    home.mkdir(parents=True)
    # Share the jar cache of the main stack: no second Maven fetch.
    (home / "jars").symlink_to(Path(stack_settings.process.home).expanduser().resolve() / "jars")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(TTS_HOME=str(home), TTS_KAFKA_PORT=str(kafka), TTS_KAFKA_CONTROLLER_PORT=str(controller),
               TTS_S3_PORT=str(s3port), TTS_REDIS_PORT=str(redis_port))
    return env


@pytest.fixture
def private_home(stack_settings: Settings, unique: str) -> Path:
    # Under the main stack's home: a filesystem known to support the xattrs s3proxy needs.
    return Path(stack_settings.process.home).expanduser().resolve() / "test-stacks" / unique


@pytest.mark.slow
def test_private_stack_data_survives_down_up_and_wipe_clears_it(stack_settings: Settings,
                                                                private_home: Path) -> None:
    import shutil

    import redis
    from confluent_kafka import Producer

    from streams.settings import load_settings
    from tests.integration.conftest import drain_topic, s3_client

    env = _private_env(stack_settings, private_home)
    mine = load_settings(env)
    shared_before = json.loads(_cli("stack", "status", "--json").stdout)
    try:
        up = _cli("stack", "up", env=env)
        assert up.returncode == 0, up.stdout + up.stderr

        prod = Producer({"bootstrap.servers": mine.kafka.bootstrap_servers, "partitioner": "murmur2_random"})
        prod.produce(mine.kafka.topic_requests, key=b"u1", value=b"persisted")
        assert prod.flush(10) == 0
        s3 = s3_client(mine)
        s3.put_object(Bucket=mine.s3.s3_bucket, Key="k", Body=b"object-bytes")
        r = redis.Redis.from_url(mine.redis.redis_url)
        r.set("cache:k", b"cached")
        r.close()

        down = _cli("stack", "down", env=env)
        assert down.returncode == 0, down.stderr
        st = json.loads(_cli("stack", "status", "--json", env=env).stdout)
        assert not any(st[s]["ok"] for s in st)
        # ... and the shared stack was not touched.
        shared = json.loads(_cli("stack", "status", "--json").stdout)
        assert all(shared[s]["ok"] and shared[s]["pid"] == shared_before[s]["pid"] for s in shared)

        up = _cli("stack", "up", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert [m.value() for m in drain_topic(mine.kafka.bootstrap_servers, mine.kafka.topic_requests, count=1)] == [b"persisted"]
        assert s3.get_object(Bucket=mine.s3.s3_bucket, Key="k")["Body"].read() == b"object-bytes"
        r = redis.Redis.from_url(mine.redis.redis_url)
        assert r.get("cache:k") == b"cached"
        r.close()
        s3.close()

        # A port taken by a process this home did not start is refused, and nothing is started.
        other = dict(env, TTS_HOME=str(private_home) + "-other")
        Path(other["TTS_HOME"]).mkdir()
        (Path(other["TTS_HOME"]) / "jars").symlink_to(Path(stack_settings.process.home).expanduser().resolve() / "jars")
        clash = _cli("stack", "up", env=other)
        assert clash.returncode != 0
        assert "in use" in clash.stderr and str(mine.local_stack.kafka_port) in clash.stderr
        assert not (Path(other["TTS_HOME"]) / "run" / "kafka.pid").exists()

        wipe = _cli("stack", "down", "--wipe", env=env)
        assert wipe.returncode == 0, wipe.stderr
        assert not (private_home / "data").exists()
    finally:
        _cli("stack", "down", "--wipe", env=env)
        shutil.rmtree(private_home, ignore_errors=True)
        shutil.rmtree(str(private_home) + "-other", ignore_errors=True)


def test_missing_java_is_one_clear_line(stack_settings: Settings, private_home: Path) -> None:
    import shutil

    env = _private_env(stack_settings, private_home)
    env["PATH"] = str(private_home / "empty-bin")  # no java, no mvn
    try:
        res = _cli("stack", "up", env=env)
        assert res.returncode != 0
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "java not found" in lines[0] and "openjdk" in lines[0], res.stderr
    finally:
        shutil.rmtree(private_home, ignore_errors=True)


def test_missing_maven_without_cached_jars_is_one_clear_line(stack_settings: Settings, private_home: Path) -> None:
    import shutil

    env = _private_env(stack_settings, private_home)
    (private_home / "jars").unlink()  # no jar cache: Maven is needed
    bin_dir = private_home / "bin"
    bin_dir.mkdir()
    java = shutil.which("java")
    assert java is not None
    (bin_dir / "java").symlink_to(java)
    env["PATH"] = str(bin_dir)  # java, but no mvn
    try:
        res = _cli("stack", "up", env=env)
        assert res.returncode != 0
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "mvn not found" in lines[0] and "apt-get install maven" in lines[0], res.stderr
        assert not (private_home / "run" / "kafka.pid").exists()
    finally:
        shutil.rmtree(private_home, ignore_errors=True)
