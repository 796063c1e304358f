"""``ttsflow lag`` against Kafka's own ``kafka-consumer-groups --describe`` on a loaded group."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streams.devstack.jars import kafka_tool
from streams.ops.lag import LagExporter, LagReader
from streams.ops.lag import cli as lag_cli
from streams.settings import Settings

pytestmark = pytest.mark.integration

N_PLAIN = 60
N_TXN = 20
CONSUME = 35


def _load_group(s: Settings, group: str) -> None:
    """N_PLAIN plain + N_TXN transactional messages on the segments topic; the group consumes
    and commits CONSUME of them, then leaves (offsets stay, no live member)."""
    p = Producer({"bootstrap.servers": s.kafka.bootstrap_servers, "partitioner": "murmur2_random",
                  "enable.idempotence": True, "linger.ms": 5})
    for i in range(N_PLAIN):
        p.produce(s.kafka.topic_segments, key=f"user-{i % 7}".encode(), value=f"plain-{i}".encode())
    assert p.flush(30) == 0
    tp = Producer({"bootstrap.servers": s.kafka.bootstrap_servers, "partitioner": "murmur2_random",
                   "transactional.id": f"lag-test-{uuid.uuid4().hex[:8]}"})
    tp.init_transactions(30)
    tp.begin_transaction()
    for i in range(N_TXN):
        tp.produce(s.kafka.topic_segments, key=f"user-{i % 3}".encode(), value=f"txn-{i}".encode())
    tp.commit_transaction(30)  # leaves a commit marker: the log end is one past the last record
    tp.flush(10)
    c = Consumer({"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        c.subscribe([s.kafka.topic_segments])
        got = 0
        while got < CONSUME:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            got += 1
            c.commit(m, asynchronous=False)
    finally:
        c.close()


def _parse_describe(out: str) -> dict[tuple[str, int], dict[str, Any]]:
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    header: list[str] | None = None
    for line in out.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] == "GROUP":
            header = cols
            continue
        if header is None or len(cols) < 6:
            continue
        r = dict(zip(header, cols, strict=False))
        rows[(r["TOPIC"], int(r["PARTITION"]))] = {
            "current": None if r["CURRENT-OFFSET"] == "-" else int(r["CURRENT-OFFSET"]),
            "end": int(r["LOG-END-OFFSET"]),
            "lag": None if r["LAG"] == "-" else int(r["LAG"])}
    return rows


def test_lag_equals_kafka_consumer_groups_describe(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    group = settings.kafka.worker_group
    _load_group(settings, group)

    proc = kafka_tool(settings, "ConsumerGroupCommand", ["--describe", "--group", group], timeout=120)
    assert proc.returncode == 0, proc.stderr
    theirs = _parse_describe(proc.stdout)
    assert theirs, proc.stdout

    with LagReader(settings.kafka, settings.scaling) as reader:
        g = reader.read(group, settings.kafka.topic_segments)
    ours = {(r.topic, r.partition): {"current": r.committed, "end": r.end_offset, "lag": r.lag}
            for r in g.partitions}
    print("kafka-consumer-groups --describe:\n" + proc.stdout)
    for key, row in theirs.items():
        assert ours[key] == row, (key, ours[key], row)
    for key, row in ours.items():  # partitions the tool leaves out have nothing committed
        if key not in theirs:
            assert row["current"] is None
    assert g.total_lag == sum(r["lag"] for r in theirs.values() if r["lag"] is not None)
    # the transaction's marker is part of the log end: ends sum to records + one marker per
    # partition the transaction touched
    assert N_PLAIN + N_TXN < sum(r.end_offset for r in g.partitions) <= N_PLAIN + N_TXN + settings.kafka.partitions
    # committed offsets cover the CONSUME records read (plus any marker they stepped over)
    assert CONSUME <= sum(r.committed or 0 for r in g.partitions) <= CONSUME + settings.kafka.partitions
    # KEDA: partitions without a commit count their whole log (offsetResetPolicy earliest)
    assert g.keda_lag == sum(r.lag if r.lag is not None else r.end_offset for r in g.partitions)
    assert g.members == 0 and g.status == "STOP"
    assert 1 <= g.desired_replicas <= settings.kafka.partitions

    # the CLI prints the same numbers
    rc = lag_cli.main(["--json", "--samples", "1", "--group", f"{group}:{settings.kafka.topic_segments}"])
    assert rc == 0
    cli = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    cli_rows = {(r["topic"], r["partition"]): {"current": r["committed"], "end": r["end_offset"], "lag": r["lag"]}
                for r in cli["groups"][0]["partitions"]}
    assert cli_rows == ours

    # and the exporter's gauges carry them too
    exp = LagExporter()
    exp.update(g)
    text = exp.render().decode()
    for (topic, part), row in theirs.items():
        if row["lag"] is not None:
            line = f'ttsflow_lag_messages{{group="{group}",partition="{part}",topic="{topic}"}} {float(row["lag"])}'
            assert line in text, line


def test_live_consumer_that_does_not_commit_is_stalled(settings: Settings) -> None:
    group = settings.kafka.worker_group
    p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random"})
    for i in range(10):
        p.produce(settings.kafka.topic_segments, key=b"u", value=str(i).encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([settings.kafka.topic_segments])
        m = None
        while m is None or m.error():
            m = c.poll(1.0)
        c.commit(offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1)], asynchronous=False)
        with LagReader(settings.kafka, settings.scaling, window=3) as reader:
            samples = [reader.read(group, settings.kafka.topic_segments) for _ in range(3)]
            c.poll(0)  # keep the member alive between samples
    finally:
        c.close()
    last = samples[-1]
    assert last.members == 1
    assert last.total_lag == 9
    assert last.status == "STALL"


def test_serve_exports_the_same_figures_over_http(settings: Settings) -> None:
    import threading
    import time
    import urllib.request

    from streams.devstack.procs import free_port
    from streams.ops.lag import serve

    group = settings.kafka.worker_group
    _load_group(settings, group)
    port = free_port()
    stop = threading.Event()
    with LagReader(settings.kafka, settings.scaling) as reader:
        expected = reader.read(group, settings.kafka.topic_segments)
        t = threading.Thread(target=serve, args=(reader, [(group, settings.kafka.topic_segments)]),
                             kwargs={"port": port, "interval": 0.5, "stop": stop}, daemon=True)
        t.start()
        try:
            want = f'ttsflow_lag_total_messages{{group="{group}"}} {float(expected.total_lag)}'
            deadline = time.monotonic() + 30
            body = ""
            while time.monotonic() < deadline and want not in body:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                        body = r.read().decode()
                except OSError:
                    pass
                stop.wait(0.2)
            assert want in body, body[-2000:]
            assert f'ttsflow_lag_desired_replicas{{group="{group}"}} {float(expected.desired_replicas)}' in body
            assert f'ttsflow_lag_status{{group="{group}",status="STOP"}} 1.0' in body
        finally:
            stop.set()
            t.join(10)
    assert not t.is_alive()


def test_caught_up_transactional_group_keeps_marker_lag_but_is_ok(settings: Settings) -> None:
    """A consumer that committed after its last record of a transactional topic shows lag 1
    (the commit marker), like kafka-consumer-groups; no record waits and the status is OK."""
    group = settings.kafka.worker_group
    tp = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random",
                   "transactional.id": f"lag-marker-{uuid.uuid4().hex[:8]}"})
    tp.init_transactions(30)
    tp.begin_transaction()
    for i in range(6):
        tp.produce(settings.kafka.topic_segments, key=b"one-user", value=str(i).encode())
    tp.commit_transaction(30)
    c = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        c.subscribe([settings.kafka.topic_segments])
        got = 0
        while got < 6:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            got += 1
            c.commit(offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1)], asynchronous=False)
        with LagReader(settings.kafka, settings.scaling, window=3) as reader:
            samples = [reader.read(group, settings.kafka.topic_segments) for _ in range(3)]
            c.poll(0)
    finally:
        c.close()
    proc = kafka_tool(settings, "ConsumerGroupCommand", ["--describe", "--group", group], timeout=120)
    theirs = _parse_describe(proc.stdout)
    g = samples[-1]
    (row,) = [r for r in g.partitions if r.committed is not None]
    assert (row.committed, row.end_offset, row.lag) == (6, 7, 1)
    assert theirs[(row.topic, row.partition)] == {"current": 6, "end": 7, "lag": 1}
    assert row.records == 0 and g.records_waiting == 0
    assert g.keda_lag == 1  # what KEDA counts: hence activationLagThreshold >= partitions
    assert g.status == "OK"
