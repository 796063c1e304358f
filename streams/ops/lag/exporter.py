"""The lag figures as Prometheus gauges (``ttsflow_lag_*``) in a registry of their own, and the
``--serve`` loop that re-samples them every interval. A failed sample is counted
(``ttsflow_lag_poll_errors``) and shown, never fatal: the gauges keep their last values."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from streams.ops.lag.model import STATUSES, GroupLag
from streams.ops.lag.reader import LagReader

__all__ = ["LagExporter", "serve"]


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
