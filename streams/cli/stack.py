"""``ttsflow stack up|down|status|fetch|kafka-tool``: the local Kafka, S3 and Redis, no Docker.

``up`` is idempotent and waits until every service answers (``--brokers 3``: a three-broker
cluster at replication factor 3); ``down`` stops only what ``up``
started; a problem a person has to fix is one line and exit 1 (:mod:`streams.devstack.stack`).
Kafka's own command-line tools run against the stack with
``ttsflow stack kafka-tool ConsumerGroupCommand --describe --group G``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from streams.devstack.errors import StackError
from streams.devstack.jars import KAFKA_TOOLS, fetch_jars, kafka_tool
from streams.devstack.paths import stack_paths
from streams.devstack.stack import stack_down, stack_up, status
from streams.settings import SettingsError, load_settings

__all__ = ["main"]


def _print_status(st: dict[str, Any]) -> None:
    for svc, e in st.items():
        mem = f", rss {e['rss_mb']} MiB" if e.get("rss_mb") is not None else ""
        pid = f", pid {e['pid']}" if e.get("pid") else ""
        state = "ok" if e["ok"] else f"DOWN ({e.get('error', '')})"
        print(f"{svc:<6} {e['address']:<24} {state}{pid}{mem}")
        if "cluster" in e:
            c = e["cluster"]
            under = f" ({', '.join(c['under_replicated_sample'])}{', ...' if c['under_replicated'] > 10 else ''})" \
                if c["under_replicated"] else ""
            print(f"       brokers {c['brokers']}, controller {c['controller_id']}; {c['partitions']} partitions, "
                  f"{c['under_replicated']} under-replicated{under}, {c['offline']} offline")
        if "security" in e:
            sec = e["security"]
            print(f"       {sec['security_protocol']} {sec['sasl_mechanism']}, CA {sec['ca_file']}; principals "
                  + ", ".join(f"{v['username']} ({v['password_file']})" for v in sec["principals"].values()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow stack", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start Kafka, S3 and Redis (idempotent), create topics and bucket")
    up.add_argument("--json", action="store_true", help="print the final status as one JSON object")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the services")
    up.add_argument("--brokers", type=int, choices=(1, 3), default=None,
                    help="Kafka brokers (default TTS_KAFKA_BROKERS, or what the home was made with): 3 runs a "
                         "three-node KRaft cluster, every topic at replication factor 3, min.insync.replicas 2")
    up.add_argument("--secure", action="store_true",
                    help="Kafka on SASL_SSL only, SCRAM users and ACLs for a user, stage and worker principal "
                         "(a new home only; the credentials' files are under kafka.security in status --json)")
    down = sub.add_parser("down", help="stop what `up` started")
    down.add_argument("--wipe", action="store_true", help="also delete topics, objects and cache data")
    st = sub.add_parser("status", help="probe the three services")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    sub.add_parser("fetch", help="only resolve the Kafka and s3proxy jars from Maven Central")
    kt = sub.add_parser("kafka-tool", help="run a Kafka CLI tool, e.g. ConsumerGroupCommand --describe --group G")
    kt.add_argument("tool", help=f"one of {', '.join(KAFKA_TOOLS)} or a main class")
    kt.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    try:
        settings = load_settings()
        if ns.cmd == "up":
            t0 = time.monotonic()
            result = stack_up(settings, timeout=ns.timeout, quiet=ns.json, secure_kafka=ns.secure, brokers=ns.brokers)
            if ns.json:
                print(json.dumps(result))
            else:
                _print_status(result)
                print(f"stack: up in {time.monotonic() - t0:.1f}s (home {stack_paths(settings).home})")
                n = sum(1 for svc in result if svc.startswith("kafka"))
                if n > 1 and settings.local_stack.kafka_brokers != n:
                    print(f"stack: {n} brokers; export TTS_KAFKA_BROKERS={n} so clients bootstrap from all of them")
            return 0 if all(e["ok"] for e in result.values()) else 1
        if ns.cmd == "down":
            stack_down(settings, wipe=ns.wipe)
            return 0
        if ns.cmd == "status":
            result = status(settings)
            if ns.json:
                print(json.dumps(result))
            else:
                _print_status(result)
            return 0 if all(e["ok"] for e in result.values()) else 1
        if ns.cmd == "fetch":
            print(fetch_jars(settings).jars)
            return 0
        if ns.cmd == "kafka-tool":
            res = kafka_tool(settings, ns.tool, ns.args, timeout=3600)
            sys.stdout.write(res.stdout)
            sys.stderr.write(res.stderr)
            return res.returncode
    except (StackError, SettingsError) as e:
        print(f"ttsflow stack: {e}", file=sys.stderr)
        return 1
    return 2
