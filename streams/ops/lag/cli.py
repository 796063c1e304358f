"""``ttsflow lag``: consumer-group lag, a Burrow-style status and KEDA's desired replicas.

Prints a table (or one JSON object with ``--json``) after ``--samples`` samples, or with
``--serve PORT`` exports the same figures as ``ttsflow_lag_*`` gauges, re-sampled every
``--interval`` seconds. A broker that does not answer is one line and exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from streams.ops.lag.exporter import serve
from streams.ops.lag.model import GroupLag, default_groups
from streams.ops.lag.reader import LagReader
from streams.settings import Settings, load_settings

__all__ = ["main"]


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


def _stack_down_message(settings: Settings, timeout: float) -> str | None:
    from streams.client.errors import AccessDenied, StackUnavailable
    from streams.client.history import probe_kafka

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
