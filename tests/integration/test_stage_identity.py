"""Stage processes are static members of their group (``group.instance.id``).

Before (issue 18): after a stage was SIGKILLed and restarted, every stage of the group
processed nothing for ~10 s (the rebalance waited out the dead member's session), and a
stage killed again within ~8 s of its restart never started. Now the restarted stage
claims the dead one's instance id and takes its partitions back without a rebalance, so
the other stages never stop; and a stage stopped cleanly still leaves the group at once.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from streams.bench.harness import Publisher, TopicReader
from streams.bench.stage import partition_stalls
from streams.devstack.procs import Proc, Supervisor
from streams.ops.lag import LagReader
from streams.settings import Settings

pytestmark = pytest.mark.integration

HOST = socket.gethostname()


def _names(proc: Proc) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/readyz", timeout=5) as r:
        lines = r.read().decode().splitlines()
    assert lines[0] == "ready", lines
    return dict(line.split("=", 1) for line in lines[1:])


def _holders(s: Settings) -> dict[str, list[int]]:
    """instance id -> partitions of the requests topic, as the coordinator says."""
    with LagReader(s.kafka, s.scaling) as reader:
        _state, members = reader.describe_members(s.stage.stage_app_id, s.kafka.topic_requests)
    return {m.instance_id or f"(dynamic {m.client_id})": m.partitions for m in members}


def _two_stages(sup: Supervisor, s: Settings) -> dict[str, str]:
    for name in ("stage-a", "stage-b"):
        sup.stage(name, s)
    sup.wait_group(s, s.stage.stage_app_id, 2, timeout=120)
    for name in ("stage-a", "stage-b"):
        sup.wait_ready(name, timeout=60)
    ids = {name: _names(sup.procs[name])["instance_id"] for name in ("stage-a", "stage-b")}
    assert sorted(ids.values()) == [f"{s.stage.stage_app_id}-{HOST}-0", f"{s.stage.stage_app_id}-{HOST}-1"]
    return ids


def test_a_sigkilled_stage_restarted_in_place_takes_its_partitions_back_and_the_others_never_stop(
        settings: Settings, tmp_path: Path) -> None:
    s = settings.replace(home=str(tmp_path / "home"), log_level="INFO")
    n, rate, kill_at = 1000, 40.0, 6.0
    with Supervisor(tmp_path / "logs") as sup, TopicReader(s.kafka, s.kafka.topic_segments) as reader:
        ids = _two_stages(sup, s)
        deadline = time.monotonic() + 60
        while True:
            held = _holders(s)
            if sorted(p for parts in held.values() for p in parts) == [0, 1, 2, 3]:
                break
            assert time.monotonic() < deadline, f"partitions not all held: {held}"
            time.sleep(0.5)
        assert set(held) == set(ids.values()), held
        b_parts = held[ids["stage-b"]]

        pub = Publisher(s.kafka)
        done = threading.Event()

        def publish() -> None:
            t0 = time.monotonic()
            for i in range(n):
                while time.monotonic() - t0 < i / rate:
                    time.sleep(0.002)
                uid = f"user-{i % 211}"
                pub.publish(s.kafka.topic_requests, uid.encode(),
                            json.dumps({"request_id": f"r{i}", "user_id": uid, "text": f"Request {i}."}).encode())
            pub.flush()
            done.set()

        t = threading.Thread(target=publish)
        seen: dict[int, list[float]] = {p: [] for p in range(4)}
        rids: set[str] = set()
        t_start = time.time()
        t.start()
        t_kill = 0.0
        try:
            while not done.is_set() or len(rids) < n:
                if not t_kill and time.time() - t_start >= kill_at:
                    t_kill = time.time()
                    sup.restart("stage-a", sig=signal.SIGKILL)
                for r in reader.poll(0.05, 2000):
                    seen[r.partition].append(r.received)
                    rids.add(json.loads(r.value)["request_id"])
                assert time.time() - t_start < n / rate + 90, f"{n - len(rids)} requests never segmented"
        finally:
            t.join(60)
        t_end = t_start + n / rate
        sup.wait_ready("stage-a", timeout=60)
        assert _names(sup.procs["stage-a"])["instance_id"] == ids["stage-a"]
        after = _holders(s)
        sup.check_alive()
    (ep,) = partition_stalls(seen, [t_kill], t_end)
    gaps = {int(p): g for p, g in ep["per_partition_s"].items()}
    print(f"\nSIGKILL + restart of stage-a ({ids['stage-a']}): longest gap per partition {gaps}; "
          f"stage-b held {b_parts}; all back {ep['all_back_s']} s after the kill; holders after {after}")
    assert after == held, "the restarted stage should hold what its instance id held (no rebalance)"
    # the other stage's partitions did not stop (with a rebalance they stood ~9 s)
    assert all(gaps[p] < 5.0 for p in b_parts), gaps


def test_a_stage_stopped_cleanly_leaves_the_group_at_once(settings: Settings, tmp_path: Path) -> None:
    """A static member that stops without a LeaveGroup keeps its partitions for the session
    timeout (10 s): a scale-down or a rolling update would leave them idle that long."""
    s = settings.replace(home=str(tmp_path / "home"))
    with Supervisor(tmp_path / "logs") as sup:
        ids = _two_stages(sup, s)
        code = sup.kill("stage-a", signal.SIGTERM)
        t_exit = time.monotonic()
        assert code == 0
        while set(held := _holders(s)) != {ids["stage-b"]}:
            assert time.monotonic() - t_exit < 7.0, f"stage-a still a member 7 s after it exited: {held}"
            time.sleep(0.2)
        left_s = time.monotonic() - t_exit
        deadline = time.monotonic() + 60
        while _holders(s).get(ids["stage-b"]) != [0, 1, 2, 3]:
            assert time.monotonic() < deadline, f"stage-b never took every partition: {_holders(s)}"
            time.sleep(0.5)
        log = sup.procs["stage-a"].log_path.read_text(errors="replace")
        assert "event=left_group" in log
    print(f"\nclean stop: stage-a gone from the group {left_s:.1f} s after it exited")
