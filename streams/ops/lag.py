"""``ttsflow lag``: consumer-group lag, a Burrow-style status and KEDA's desired replicas.

Guarantees:

* Per partition, CURRENT-OFFSET is the group's committed offset (AdminClient
  ``list_consumer_group_offsets``), LOG-END-OFFSET the partition's high watermark read
  with ``isolation.level=read_uncommitted`` (a transactional topic's end includes the
  commit markers; that is what Kafka's own ``kafka-consumer-groups --describe`` reports),
  and LAG = LOG-END-OFFSET - CURRENT-OFFSET, or none when nothing is committed. The
  integration test compares these numbers with ConsumerGroupCommand's, partition by
  partition.
* The partitions listed are every partition of the group's input topic (the segments
  topic for the worker group, the requests topic for the stage) plus any other
  partition the group has committed.
* Desired replicas use :func:`streams.ops.keda.keda_desired_replicas` on KEDA's lag (a
  partition without a committed offset counts as its whole log under
  ``offsetResetPolicy: earliest``, the worker's ``auto.offset.reset``), capped at the
  input topic's partition count.
* A lag of a few offsets is read with a ``read_committed`` consumer: on a transactional
  topic a caught-up group keeps a lag of 1 per partition (the commit marker after its last
  record), which Kafka's tool and KEDA both count. ``records`` says how many records really
  wait; the status uses it, so an idle transactional group is OK, not STALL. (KEDA counts
  the markers: the ScaledObject's activationLagThreshold must be >= the partition count
  or the workers never scale to zero.)
* Status follows Burrow's evaluation rules over a window of samples (oldest first):
  OK when the lag is zero now or was zero anywhere in the window; STOP when there is lag
  and the group has no live member (Burrow: offsets stopped being committed); REWIND
  when a committed offset went backwards; STALL when the committed offset did not move
  over the window although there was lag; WARN when the offset moved but the lag never
  decreased; OK otherwise. A group takes its worst partition's status.
* ``--serve PORT`` exports the same figures as ``ttsflow_lag_*`` gauges from its own
  registry, re-sampled every ``--interval`` seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from streams.ops.keda import KedaRule, keda_desired_replicas, partition_lag
from streams.settings import KafkaSettings, ScalingSettings, Settings, StageSettings, load_settings

__all__ = ["GroupLag", "GroupMember", "LagExporter", "LagReader", "PartitionLag", "burrow_status", "default_groups", "main", "serve"]

STATUSES = ("OK", "WARN", "REWIND", "STALL", "STOP")  # ascending severity
_MARKER_PROBE_MAX = 8  # a lag this short is read to see whether it is only transaction markers


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # None: the group has no committed offset here
    end_offset: int
    lag: int | None
    status: str = "OK"
    # Committed records a read_committed consumer would still get. Less than ``lag`` when
    # the tail is transaction markers: the worker commits the offset after its last record,
    # so a caught-up partition of a transactional topic keeps a lag of 1 (the commit marker).
    records: int | None = None


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One live member as the coordinator describes it: for a worker ``client_id`` is its
    transactional id, for a stage ``instance_id`` (and ``client_id``) its static member id."""

    client_id: str
    instance_id: str | None
    host: str
    partitions: list[int]


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    topic: str  # the input topic that caps replicas
    state: str  # the group's coordinator state (STABLE, EMPTY, ...)
    members: int
    partitions: list[PartitionLag]
    total_lag: int  # sum of known lags, as kafka-consumer-groups would add them up
    keda_lag: int  # KEDA's metric before the partition cap
    input_partitions: int
    desired_replicas: int
    status: str
    sampled_at: float = field(default=0.0)
    records_waiting: int = 0  # sum of the partitions' ``records``: work actually waiting
    member_ids: list[GroupMember] = field(default_factory=list)  # who holds what (ids from the coordinator)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float
    committed: int | None
    lag: int


def burrow_status(window: Sequence[_Sample] | Sequence[tuple[float, int | None, int]], *, members: int) -> str:
    """Burrow's partition evaluation over ``window`` (oldest first), adapted to sampling.

    Burrow sees every commit and its timestamp; a sampler only sees committed offsets, so
    "stopped committing" is read from group membership: lag with no live member is STOP.
    """
    samples = [s if isinstance(s, _Sample) else _Sample(*s) for s in window]
    if not samples:
        return "OK"
    now = samples[-1]
    if now.lag <= 0:
        return "OK"
    if members == 0:
        return "STOP"
    if any(s.lag <= 0 for s in samples):
        return "OK"
    offsets = [s.committed if s.committed is not None else -1 for s in samples]
    if any(b < a for a, b in itertools.pairwise(offsets)):
        return "REWIND"
    if len(samples) < 2:
        return "OK"  # one sample cannot show a trend
    if offsets[0] == offsets[-1]:
        return "STALL"
    if all(b.lag >= a.lag for a, b in itertools.pairwise(samples)):
        return "WARN"
    return "OK"


def _worst(statuses: Sequence[str]) -> str:
    return max(statuses, key=STATUSES.index, default="OK")


class LagReader:
    """Reads lag for consumer groups; keeps a window of samples per partition for the status.

    One AdminClient and one group-less read_uncommitted consumer (for watermarks), closed
    by :meth:`close`.
    """

    def __init__(self, kafka: KafkaSettings, scaling: ScalingSettings, *, window: int = 10,
                 timeout: float = 10.0) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.kafka, self.scaling = kafka, scaling
        self.timeout = timeout
        from streams.kafka import client_config, reader_config

        self._admin = AdminClient(client_config(kafka, **{"socket.timeout.ms": 5000}))
        # group-less readers (never subscribe nor commit): one for watermarks, and one
        # read_committed, to tell transaction markers from records in a short lag tail
        self._consumer = Consumer(reader_config(kafka, **{"group.id": "ttsflow-lag-unused",
                                                          "isolation.level": "read_uncommitted"}))
        self._probe = Consumer(reader_config(kafka, **{"group.id": "ttsflow-lag-unused",
                                                       "enable.partition.eof": True}))
        self._windows: dict[tuple[str, str, int], deque[_Sample]] = {}
        self._window = window
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()
            self._probe.close()

    def __enter__(self) -> LagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------
    def committed(self, group: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futs = self._admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                       request_timeout=self.timeout)
        res = futs[group].result(self.timeout)
        return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions
                if tp.offset is not None and tp.offset >= 0 and not tp.error}

    def describe(self, group: str) -> tuple[str, int]:
        """(state, member count); ('DEAD', 0) for a group the coordinator does not know."""
        state, members = self.describe_members(group)
        return state, len(members)

    def describe_members(self, group: str, topic: str | None = None) -> tuple[str, list[GroupMember]]:
        """(state, live members, ordered by client id, with their partitions of ``topic``, or of
        every topic); ('DEAD', []) for an unknown group."""
        fut = self._admin.describe_consumer_groups([group], request_timeout=self.timeout)[group]
        try:
            d = fut.result(self.timeout)
        except Exception as e:  # a group with no metadata at all
            if "GROUP_ID_NOT_FOUND" in str(e):
                return "DEAD", []
            raise
        members = [GroupMember(m.client_id, getattr(m, "group_instance_id", None) or None, m.host,
                               sorted(tp.partition for tp in (m.assignment.topic_partitions if m.assignment else [])
                                      if topic is None or tp.topic == topic))
                   for m in d.members]
        return str(getattr(d.state, "name", d.state)), sorted(members, key=lambda m: (m.client_id, m.host))

    def _partitions(self, topic: str) -> list[int]:
        md = self._admin.list_topics(topic, timeout=self.timeout)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return []
        return sorted(t.partitions)

    def end_offset(self, topic: str, partition: int) -> int:
        from confluent_kafka import TopicPartition

        _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout,
                                                       cached=False)
        return int(high)

    def records_between(self, topic: str, partition: int, start: int, end: int, *, timeout: float = 2.0) -> int:
        """Committed records in [start, end) as a read_committed consumer sees them (markers
        and aborted records do not count); ``end - start`` if it cannot tell in time."""
        from confluent_kafka import KafkaError, TopicPartition

        self._probe.assign([TopicPartition(topic, partition, start)])
        try:
            n = 0
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                m = self._probe.poll(0.1)
                if m is None:
                    continue
                err = m.error()
                off = int(m.offset() or 0)
                if err is None:
                    if off >= end:
                        return n
                    n += 1
                    if off + 1 >= end:
                        return n
                elif err.code() == KafkaError._PARTITION_EOF:
                    # the end a read_committed reader sees; beyond it, an open transaction
                    return n + max(end - off, 0)
            return end - start
        finally:
            self._probe.unassign()

    def read(self, group: str, topic: str, *, rule: KedaRule | None = None) -> GroupLag:
        """One sample of ``group``: every partition of ``topic`` and of its other commits."""
        rule = rule or KedaRule(lag_threshold=self.scaling.lag_threshold,
                                activation_lag_threshold=self.scaling.activation_lag_threshold)
        committed = self.committed(group)
        state, member_ids = self.describe_members(group, topic)
        members = len(member_ids)
        input_parts = self._partitions(topic)
        tps = {(topic, p) for p in input_parts} | set(committed)
        now = time.time()
        rows: list[PartitionLag] = []
        keda_lag = 0
        for t, p in sorted(tps):
            end = self.end_offset(t, p)
            c = committed.get((t, p))
            lag = None if c is None else end - c
            if t == topic:
                keda_lag += partition_lag(end, c, offset_reset_policy="earliest")
            records = lag
            if c is not None and lag is not None and 0 < lag <= _MARKER_PROBE_MAX:
                records = self.records_between(t, p, c, end)
            win = self._windows.setdefault((group, t, p), deque(maxlen=self._window))
            win.append(_Sample(now, c, records if records is not None else end))
            rows.append(PartitionLag(t, p, c, end, lag, burrow_status(win, members=members), records))
        desired = keda_desired_replicas(keda_lag, partitions=max(len(input_parts), 1), rule=rule)
        return GroupLag(group=group, topic=topic, state=state, members=members, partitions=rows,
                        total_lag=sum(r.lag for r in rows if r.lag is not None), keda_lag=keda_lag,
                        input_partitions=len(input_parts), desired_replicas=desired,
                        status=_worst([r.status for r in rows]), sampled_at=now,
                        records_waiting=sum(r.records if r.records is not None else r.end_offset for r in rows),
                        member_ids=member_ids)


# --- Prometheus exporter -------------------------------------------------------------------

class LagExporter:
    """The same figures as gauges in their own registry (``ttsflow_lag_*``)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry(auto_describe=True)
        part = ["group", "topic", "partition"]
        self.committed = Gauge("ttsflow_lag_committed_offset", "Committed offset of the group.", part,
                               registry=self.registry)
        self.end = Gauge("ttsflow_lag_end_offset", "Log end offset (high watermark, read_uncommitted).", part,
                         registry=self.registry)
        self.lag = Gauge("ttsflow_lag_messages", "End offset minus committed offset, per partition.", part,
                         registry=self.registry)
        self.total = Gauge("ttsflow_lag_total_messages", "Sum of partition lags of the group.", ["group"],
                           registry=self.registry)
        self.desired = Gauge("ttsflow_lag_desired_replicas", "Replicas KEDA's Kafka rule asks for.", ["group"],
                             registry=self.registry)
        self.members = Gauge("ttsflow_lag_group_members", "Live members of the consumer group.", ["group"],
                             registry=self.registry)
        self.partitions = Gauge("ttsflow_lag_input_partitions", "Partitions of the group's input topic.", ["group"],
                                registry=self.registry)
        self.status = Gauge("ttsflow_lag_status", "1 for the group's current Burrow-style status.",
                            ["group", "status"], registry=self.registry)
        self.polls = Counter("ttsflow_lag_polls", "Lag samples taken.", registry=self.registry)
        self.errors = Counter("ttsflow_lag_poll_errors", "Lag samples that failed.", registry=self.registry)
        self.last = Gauge("ttsflow_lag_last_poll_timestamp_seconds", "When the last sample succeeded.",
                          registry=self.registry)

    def update(self, g: GroupLag) -> None:
        for r in g.partitions:
            labels = (g.group, r.topic, str(r.partition))
            self.end.labels(*labels).set(r.end_offset)
            if r.committed is not None and r.lag is not None:
                self.committed.labels(*labels).set(r.committed)
                self.lag.labels(*labels).set(r.lag)
        self.total.labels(g.group).set(g.total_lag)
        self.desired.labels(g.group).set(g.desired_replicas)
        self.members.labels(g.group).set(g.members)
        self.partitions.labels(g.group).set(g.input_partitions)
        for s in STATUSES:
            self.status.labels(g.group, s).set(1 if s == g.status else 0)
        self.last.set(g.sampled_at)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


# --- CLI ------------------------------------------------------------------------------------

def _print_table(groups: Sequence[GroupLag]) -> None:
    for g in groups:
        print(f"GROUP {g.group} ({g.state}, {g.members} members) status={g.status} total_lag={g.total_lag} "
              f"records_waiting={g.records_waiting} keda_lag={g.keda_lag} desired_replicas={g.desired_replicas} (input {g.topic}, "
              f"{g.input_partitions} partitions)")
        for m in g.member_ids:
            print(f"  member {m.instance_id or m.client_id} host={m.host} partitions={m.partitions}")
        print(f"  {'TOPIC':<32} {'PARTITION':>9} {'CURRENT-OFFSET':>14} {'LOG-END-OFFSET':>14} {'LAG':>8} "
              f"{'RECORDS':>8} STATUS")
        for r in g.partitions:
            cur = "-" if r.committed is None else str(r.committed)
            lag = "-" if r.lag is None else str(r.lag)
            rec = "-" if r.records is None else str(r.records)
            print(f"  {r.topic:<32} {r.partition:>9} {cur:>14} {r.end_offset:>14} {lag:>8} {rec:>8} {r.status}")


def default_groups(kafka: KafkaSettings, stage: StageSettings) -> list[tuple[str, str]]:
    """(group, input topic): the worker group on segments, the stage on requests."""
    return [(kafka.worker_group, kafka.topic_segments), (stage.stage_app_id, kafka.topic_requests)]


def _stack_down_message(settings: Settings, timeout: float) -> str | None:
    from streams.client import probe_kafka
    from streams.client.errors import AccessDenied, StackUnavailable

    try:
        probe_kafka(settings.kafka, timeout)
    except (StackUnavailable, AccessDenied) as e:
        return f"ttsflow lag: {e}"
    return None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow lag", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--group", action="append", default=None, metavar="GROUP[:TOPIC]",
                    help="group to report (repeatable); default: the worker group and the stage group")
    ap.add_argument("--samples", type=int, default=2, help="samples in the status window (one-shot mode)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--window", type=int, default=10, help="samples kept for the status in --serve mode")
    ap.add_argument("--serve", type=int, default=None, metavar="PORT", help="export Prometheus gauges on PORT")
    ap.add_argument("--bootstrap-servers", default=None)
    ap.add_argument("--lag-threshold", type=int, default=None)
    ap.add_argument("--activation", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the broker")
    a = ap.parse_args(argv)
    settings = load_settings(bootstrap_servers=a.bootstrap_servers, lag_threshold=a.lag_threshold,
                             activation_lag_threshold=a.activation)
    down = _stack_down_message(settings, a.timeout)
    if down:
        print(down, file=sys.stderr)
        return 1
    with LagReader(settings.kafka, settings.scaling, window=a.window if a.serve is not None else max(a.samples, 1),
                   timeout=max(a.timeout, 5.0)) as reader:
        groups = default_groups(settings.kafka, settings.stage)
        if a.group:
            groups = []
            for g in a.group:
                name, _, topic = g.partition(":")
                groups.append((name, topic or settings.kafka.topic_segments))
        if a.serve is not None:
            return serve(reader, groups, port=a.serve, interval=a.interval)
        result: list[GroupLag] = []
        for i in range(max(a.samples, 1)):
            if i:
                time.sleep(a.interval)  # the sampling period itself, not a wait for a condition
            result = [reader.read(g, t) for g, t in groups]
    if a.json:
        print(json.dumps({"groups": [g.to_dict() for g in result],
                          "total_lag": sum(g.total_lag for g in result)}))
    else:
        _print_table(result)
    return 0


def serve(reader: LagReader, groups: Sequence[tuple[str, str]], *, port: int, interval: float,
          stop: threading.Event | None = None, exporter: LagExporter | None = None) -> int:
    """Sample ``groups`` every ``interval`` s into gauges served on ``port`` until ``stop`` is set."""
    from prometheus_client import start_http_server

    exp = exporter or LagExporter()
    server, thread = start_http_server(port, registry=exp.registry)
    print(f"ttsflow lag: serving ttsflow_lag_* on :{server.server_address[1]}/metrics every {interval:g} s",
          file=sys.stderr)
    stop = stop or threading.Event()
    try:
        while not stop.is_set():
            try:
                for g, t in groups:
                    exp.update(reader.read(g, t))
                exp.polls.inc()
            except Exception as e:  # a broker hiccup must not kill the exporter; it is counted and shown
                exp.errors.inc()
                print(f"ttsflow lag: sample failed: {e}", file=sys.stderr)
            stop.wait(interval)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    return 0
