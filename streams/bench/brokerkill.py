"""Broker kills of ``ttsflow chaos --brokers 3 --kill-brokers N``: whom to kill, and what it cost.

Each kill SIGKILLs one broker of the run's private three-broker stack and starts it again
``down_s`` (10 s) later. Kills alternate between the two failovers exactly-once depends on:

* ``segments_leader``: the broker leading the most partitions of the run's segments topic
  (the stage's writes and the workers' reads move to a follower: ``NOT_LEADER_OR_FOLLOWER``,
  a metadata refresh, an epoch bump on the new leader);
* ``txn_coordinator``: the broker coordinating a live worker's ``transactional.id`` (the
  leader of its ``__transaction_state`` partition): the worker's transaction in flight meets
  ``COORDINATOR_NOT_AVAILABLE`` / ``NOT_COORDINATOR`` and its coordinator moves.

Kills run one at a time on one thread, and one failure at a time: before each, the killer
waits (bounded) until the cluster is whole again, as *every* broker sees it (:func:`healthy`:
all brokers registered, no partition under-replicated or offline), so two brokers are never
down together (with ``min.insync.replicas`` 2 that would be an outage, not a failover), and
until the pipeline has caught up with the last disruption (the run's ``settled``: no process
killed lately, no request waiting long), so a kill's window measures its own failover, not the
backlog of the one before. From the kill until the cluster is whole again after it the killer is
*busy*: the run's worker and stage kills go through :meth:`BrokerKiller.disrupt`, which holds
them meanwhile (the same lock decides, so neither kind can slip into the other's moment). The
killed broker alone is started again (not the whole stack), as an orchestrator restarts one pod.

The report of each kill says which broker, why, what it led or coordinated, and how answers
fared around it (:func:`kill_window_stats`). The functions at the top are pure (tested in
``tests/unit/test_brokerkill.py``).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BrokerKiller", "coordinator_partition", "healthy", "java_string_hash", "kill_window_stats", "pick_target"]


# --- pure logic ----------------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (32-bit signed), which Kafka hashes coordinator keys with."""
    data = s.encode("utf-16-be")  # Java's chars are UTF-16 code units
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__transaction_state`` (a transactional id) or ``__consumer_offsets``
    (a group id) holding ``key``: Kafka's ``Utils.abs(key.hashCode()) % partitions``, where
    ``Utils.abs(Integer.MIN_VALUE)`` is 0. Its leader is the key's coordinator."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def healthy(views: Sequence[Mapping[str, Any]], brokers: int) -> tuple[bool, str]:
    """Whether a cluster of ``brokers`` is whole, from each broker's own metadata view (a dict of
    :func:`~streams.devstack.stack.cluster_status`, one per broker asked): every broker answered,
    each lists all brokers, and none sees a partition under-replicated or offline (a broker just
    restarted answers before its followers have caught up; another broker's view can lag the
    controller's). ``(ok, why not)``."""
    if len(views) < brokers:
        return False, f"{len(views)} of {brokers} brokers answered"
    for v in views:
        if len(v["brokers"]) < brokers:
            return False, f"brokers {v['brokers']} registered"
        if v["under_replicated"] or v["offline"]:
            return False, f"{v['under_replicated']} partitions under-replicated, {v['offline']} offline"
    return True, ""


def pick_target(kind: str, segment_leaders: Mapping[int, int], txn_coordinators: Mapping[str, int],
                turn: int) -> tuple[int, list[str]]:
    """``(broker id, reasons)`` for a kill of ``kind``.

    ``segment_leaders``: partition -> leader of the segments topic; ``txn_coordinators``:
    transactional id -> coordinating broker of each live worker. ``segments_leader`` takes the
    broker leading the most segments partitions (lowest id on a tie); ``txn_coordinator`` the
    coordinator of worker ``turn % workers`` (sorted by id).
    """
    if kind == "segments_leader":
        counts: dict[int, int] = {}
        for leader in segment_leaders.values():
            if leader >= 0:
                counts[leader] = counts.get(leader, 0) + 1
        if not counts:
            raise ValueError("no segments partition has a leader")
        broker = min(counts, key=lambda b: (-counts[b], b))
        return broker, [f"leads {counts[broker]} of {len(segment_leaders)} segments partitions"]
    if kind == "txn_coordinator":
        if not txn_coordinators:
            raise ValueError("no worker transactional id has a coordinator")
        tid = sorted(txn_coordinators)[turn % len(txn_coordinators)]
        return txn_coordinators[tid], [f"coordinates transactional.id {tid}"]
    raise ValueError(f"unknown kill kind {kind!r}")


def kill_window_stats(kill_at: float, back_at: float, published: Mapping[str, float],
                      answered: Mapping[str, float], *, after_s: float = 30.0) -> dict[str, Any]:
    """How answers fared around one broker kill (times in seconds, one clock).

    ``window_requests``: requests published between the kill and the broker answering again;
    ``p99_s``/``max_s``: their publish-to-answer latency (``unanswered`` counts those without an
    answer at all); ``max_gap_s``: the longest stretch without any answer while a request waited,
    between the kill and ``after_s`` past the broker's return (an all-out stall shows here even
    when few requests were published in the window).
    """
    from streams.bench.harness import percentile

    window = [rid for rid, t in published.items() if kill_at <= t <= back_at]
    lat = [answered[rid] - published[rid] for rid in window if rid in answered]
    end = back_at + after_s
    times = sorted(t for t in answered.values() if kill_at <= t <= end)

    def waited(a: float, b: float) -> float:
        # how long answers stood still over (a, b] while a request waited: from a, or from the
        # publish of the earliest request still unanswered at b if it came later
        pending = [t for rid, t in published.items() if t < b and answered.get(rid, float("inf")) >= b]
        return b - max(a, min(pending)) if pending else 0.0

    edges = [kill_at, *times]
    gaps = [waited(a, b) for a, b in itertools.pairwise(edges)]
    gaps.append(waited(edges[-1], end))
    p99 = percentile(lat, 99)
    return {"window_requests": len(window), "unanswered": len(window) - len(lat),
            "p99_s": None if p99 is None else round(p99, 2), "max_s": round(max(lat), 2) if lat else None,
            "max_gap_s": round(max(gaps), 2) if gaps else None}


# --- the killer ----------------------------------------------------------------------------

@dataclass(slots=True)
class BrokerKiller:
    """Runs the kills of one chaos run, one at a time, on its own thread (:meth:`kill` queues one).

    ``settings``: the run's (its private three-broker stack, its topics); ``transactional_ids``
    of the workers; ``groups``: consumer groups whose coordinators are worth naming.
    """

    settings: Any
    transactional_ids: Sequence[str]
    groups: Sequence[str]
    down_s: float = 10.0
    healthy_timeout_s: float = 120.0
    settled: Callable[[], bool] | None = None  # the run: has the pipeline caught up with the last disruption?
    settle_timeout_s: float = 60.0
    log: list[dict[str, Any]] = field(default_factory=list)
    _queue: list[dict[str, Any]] = field(default_factory=list)
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None
    _stop: bool = False
    _busy: bool = False
    error: BaseException | None = None

    def disrupt(self, fn: Callable[[], None]) -> bool:
        """Run another disruption (a worker or stage kill) now unless a broker kill is under way
        (from its kill until the cluster is whole again); False when held (the caller tries later)."""
        with self._cv:
            if self._busy:
                return False
            fn()
            return True

    def kill(self, rec: dict[str, Any]) -> None:
        """Queue one kill; ``rec`` (the event's record) is filled in as it happens."""
        with self._cv:
            self._queue.append(rec)
            self._cv.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="broker-killer", daemon=True)
            self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the queued kills to finish (each broker back), then stop the thread."""
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        turn = 0
        while True:
            with self._cv:
                while not self._queue and not self._stop:
                    self._cv.wait()
                if not self._queue:
                    return
                rec = self._queue.pop(0)
            try:
                self._one(rec, turn)
            except BaseException as e:  # reported by the run; a chaos run must not die silently here
                rec["error"] = f"{type(e).__name__}: {e}"
                self.error = self.error or e
            finally:
                with self._cv:
                    self._busy = False
            self.log.append(rec)
            turn += 1

    def _metadata(self) -> Any:
        from streams.devstack.services import stack_admin

        return stack_admin(self.settings).list_topics(timeout=10)

    def _views(self) -> list[dict[str, Any]]:
        """Each broker's own view of the cluster (:func:`~streams.devstack.stack.cluster_status`
        asked of that broker alone); a broker that does not answer is left out."""
        from streams.devstack.services import broker_services, service_address
        from streams.devstack.stack import cluster_status

        views = []
        for svc in broker_services(self.settings.local_stack.kafka_brokers):
            try:
                views.append(cluster_status(self.settings, timeout=3.0, bootstrap=service_address(svc, self.settings)))
            except Exception:  # a broker not answering yet is what we wait out
                pass
        return views

    def _wait_healthy(self) -> tuple[float, str]:
        """Seconds waited until the cluster is whole as every broker sees it (:func:`healthy`),
        and why not if it still is not after ``healthy_timeout_s`` (empty: healthy)."""
        t0 = time.monotonic()
        while True:
            ok, why = healthy(self._views(), self.settings.local_stack.kafka_brokers)
            if ok or time.monotonic() - t0 > self.healthy_timeout_s:
                return time.monotonic() - t0, why
            time.sleep(0.25)

    def _wait_settled_and_hold(self) -> tuple[float, bool]:
        """Wait (bounded) until the run says the pipeline has caught up, then become busy (under the
        lock :meth:`disrupt` takes, so no worker or stage kill comes in between). ``(seconds, settled)``."""
        t0 = time.monotonic()
        while True:
            timed_out = time.monotonic() - t0 >= self.settle_timeout_s
            with self._cv:
                ok = self.settled is None or self.settled()
                if ok or timed_out:
                    self._busy = True
                    return time.monotonic() - t0, ok
            time.sleep(0.25)

    def _one(self, rec: dict[str, Any], turn: int) -> None:
        from streams.devstack.paths import stack_paths
        from streams.devstack.pidfiles import owned_pid, reap
        from streams.devstack.services import broker_services, probe_service, start_service

        s = self.settings
        waited, why_not = self._wait_healthy()
        rec["waited_for_healthy_s"] = round(waited, 1)
        if why_not:  # killing now would take a second broker down: an outage, not a failover
            raise RuntimeError(f"cluster not whole after {waited:.0f} s ({why_not}): kill skipped")
        waited, ok = self._wait_settled_and_hold()
        rec["waited_for_settled_s"] = round(waited, 1)
        if not ok:
            rec["settled"] = False  # the machine never caught up within the bound: killed anyway
        md = self._metadata()
        seg = md.topics[s.kafka.topic_segments]
        leaders = {p: pm.leader for p, pm in seg.partitions.items()}

        def coordinators(internal: str, keys: Sequence[str]) -> dict[str, int]:
            t = md.topics.get(internal)
            if t is None or t.error is not None or not t.partitions:
                return {}
            return {k: t.partitions[coordinator_partition(k, len(t.partitions))].leader for k in keys}

        txn = coordinators("__transaction_state", self.transactional_ids)
        groups = coordinators("__consumer_offsets", self.groups)
        kind = "segments_leader" if turn % 2 == 0 else "txn_coordinator"
        broker, why = pick_target(kind, leaders, txn, turn // 2)
        svc = broker_services(s.local_stack.kafka_brokers)[broker - 1]
        rec.update(kind=kind, broker=broker, service=svc, why=why, was_controller=md.controller_id == broker,
                   led_segments_partitions=sorted(p for p, b in leaders.items() if b == broker),
                   coordinated_transactional_ids=sorted(t for t, b in txn.items() if b == broker),
                   coordinated_groups=sorted(g for g, b in groups.items() if b == broker))
        pid = owned_pid(stack_paths(s), svc)
        if pid is None:
            raise RuntimeError(f"{svc} is not running")
        rec["killed_at"] = time.time()
        os.kill(pid, signal.SIGKILL)
        while os.path.exists(f"/proc/{pid}"):
            reap(pid)
            time.sleep(0.05)
        time.sleep(self.down_s)  # the outage itself: a broker that stays dead this long, then returns
        t0 = time.monotonic()
        # the killed broker alone, as an orchestrator restarts one pod: no topics, bucket or probes of the rest
        start_service(svc, s, stack_paths(s))
        deadline = t0 + self.healthy_timeout_s
        while (probe := probe_service(svc, s)) is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{svc} did not answer within {self.healthy_timeout_s:.0f} s of its restart: {probe}")
            time.sleep(0.2)
        rec["back_at"] = time.time()
        rec["restart_s"] = round(time.monotonic() - t0, 1)
        rec["down_s"] = round(rec["back_at"] - rec["killed_at"], 1)
        caught_up, why_not = self._wait_healthy()  # its followers caught up: the failover is over
        rec["caught_up_s"] = round(caught_up, 1)
        if why_not:
            rec["not_caught_up"] = why_not
