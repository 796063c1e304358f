"""Reading a consumer group's offsets from Kafka: the one part of ``ttsflow lag`` that talks to the broker.

Guarantees:

* Per partition, CURRENT-OFFSET is the group's committed offset (AdminClient
  ``list_consumer_group_offsets``), LOG-END-OFFSET the partition's high watermark read
  with ``isolation.level=read_uncommitted`` (a transactional topic's end includes the
  commit markers; that is what Kafka's own ``kafka-consumer-groups --describe`` reports).
  The integration test compares these numbers with ConsumerGroupCommand's, partition by
  partition.
* The partitions listed are every partition of the group's input topic (the segments
  topic for the worker group, the requests topic for the stage) plus any other
  partition the group has committed.
* A lag of a few offsets is read with a ``read_committed`` consumer: on a transactional
  topic a caught-up group keeps a lag of 1 per partition (the commit marker after its last
  record), which Kafka's tool and KEDA both count; ``records`` says how many records really wait.

What the offsets mean (lag, status, desired replicas) is :mod:`streams.ops.lag.model`'s.
"""

from __future__ import annotations

import time

from streams.ops.keda import KedaRule
from streams.ops.lag.model import GroupLag, GroupMember, LagWindows, OffsetSample, group_lag, needs_marker_probe
from streams.settings import KafkaSettings, ScalingSettings

__all__ = ["LagReader"]


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
        self._windows = LagWindows(window)
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
        input_parts = self._partitions(topic)
        tps = {(topic, p) for p in input_parts} | set(committed)
        now = time.time()
        offsets: list[OffsetSample] = []
        for t, p in sorted(tps):
            end = self.end_offset(t, p)
            c = committed.get((t, p))
            records = self.records_between(t, p, c, end) if c is not None and needs_marker_probe(c, end) else None
            offsets.append(OffsetSample(t, p, end, c, records))
        return group_lag(group, topic, state=state, member_ids=member_ids, input_partitions=len(input_parts),
                         offsets=offsets, windows=self._windows, rule=rule, now=now)
