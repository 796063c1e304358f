"""``ttsflow chaos``: kill workers, the stage and brokers mid-run, then count what users would see.

The run: one stage and two workers (real subprocesses, :mod:`streams.devstack.procs`) on topics,
groups and transactional ids of their own; ``--requests`` short requests published at an
even pace over ``--publish-seconds``; at random moments in that window (seeded) a worker
or the stage is SIGKILLed and started again at once, and the broker is stopped and
started (``--restart-broker``; only ever on a private stack instance this command brings
up with its own ``TTS_HOME`` and ports, never the shared one). With ``--brokers 3`` that
private stack has three brokers (replication factor 3, ``min.insync.replicas`` 2) and
``--kill-brokers N`` SIGKILLs a segments leader or a worker's transaction coordinator,
alternating, each started again 10 s later (:mod:`streams.bench.brokerkill`; the report's
``broker_kills`` says which broker, what it led or coordinated, and how answers stalled).
Broker kills come one failure at a time: each waits until the cluster is whole and the
pipeline has settled after the last worker or stage kill, and worker and stage kills are held
while one is under way (``held_s``), so each kill window shows its own failover; every
request's publish and answer times are kept in ``<out>/<run>/logs/timeline.json``. A process that exits on its
own (a fenced producer exits non-zero by design) is restarted, as an orchestrator would,
and counted; so is one whose ``/healthz`` keeps failing for 30 s (a liveness probe). When every request is answered (or ``--timeout`` passes) everything is
stopped and ``tts.completed`` is read again from the beginning with ``read_committed``.

A share of the requests (``--bad-share``, 0.2) carry a readable id with bad content (empty
text, unknown voice, format ``mp9``, speed 99): each must get exactly one ``failed``
completion with the stage's code (``bad_content_wrong`` counts any other answer).

What it checks, per request id: exactly one completion (``lost``: none, ``duplicates``:
completions beyond the first); for each ok completion, that its S3 object exists, has the
announced ``bytes`` and ``sha256``, decodes, is not silent and lasts a plausible time for
its text (``bad_audio`` counts requests with any problem). The last line printed is one
JSON object; the exit status is 0 only if nothing was lost, duplicated or bad.

The counting and checking functions at the top are pure (tested in
``tests/unit/test_chaos_logic.py``).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from streams.bench.brokerkill import BrokerKiller, kill_window_stats

if TYPE_CHECKING:
    from streams.settings import Settings

__all__ = ["Event", "Tally", "check_audio", "classify_lost", "main", "plan_events", "plausible_duration", "run_chaos", "tally"]

Action = Literal["kill_worker", "kill_stage", "restart_broker", "kill_broker"]


# --- pure logic ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Tally:
    """What a ``read_committed`` reader saw for the expected request ids."""

    requests: int
    completed: int  # expected ids with at least one completion
    lost: int  # expected ids with none
    duplicates: int  # completions beyond the first, summed over ids
    failed: int  # expected ids whose first completion is ``failed``
    unexpected: int  # completions for ids nobody published in this run
    lost_ids: tuple[str, ...] = ()  # a sample, for the report
    duplicate_ids: tuple[str, ...] = ()


def tally(expected: Iterable[str], seen: Iterable[tuple[str, str]], *, sample: int = 10) -> Tally:
    """Count lost, duplicated and failed answers.

    ``expected``: the request ids published (each once); ``seen``: ``(request_id, status)``
    of every completion read, in topic order.
    """
    want = list(dict.fromkeys(expected))
    want_set = set(want)
    counts: Counter[str] = Counter()
    first_status: dict[str, str] = {}
    unexpected = 0
    for rid, status in seen:
        if rid not in want_set:
            unexpected += 1
            continue
        counts[rid] += 1
        first_status.setdefault(rid, status)
    lost_ids = [r for r in want if counts[r] == 0]
    dup_ids = [r for r in want if counts[r] > 1]
    return Tally(
        requests=len(want),
        completed=len(want) - len(lost_ids),
        lost=len(lost_ids),
        duplicates=sum(counts[r] - 1 for r in dup_ids),
        failed=sum(1 for s in first_status.values() if s != "ok"),
        unexpected=unexpected,
        lost_ids=tuple(lost_ids[:sample]),
        duplicate_ids=tuple(dup_ids[:sample]),
    )


@dataclass(frozen=True, slots=True)
class Event:
    """One disruption. ``at`` is seconds after the first publish (``by="time"``) or the
    fraction of requests answered (``by="progress"``) when it fires."""

    at: float
    action: Action
    target: int = 0  # worker index for kill_worker
    by: Literal["time", "progress"] = "time"


def plan_events(seed: int, window_s: float, *, kill_workers: int, kill_stage: int, restart_broker: int,
                workers: int = 2, start: float = 0.1, end: float = 0.9, kill_brokers: int = 0) -> list[Event]:
    """The disruptions of one run at seeded random moments, spread out (one per equal slice).

    The stage and the broker are disrupted while requests arrive (``[start, end] *
    window_s`` seconds, the publishing window): that is when the stage is busy. Workers
    are killed at random points of the answering (``[start, end]`` of the requests
    answered), whatever the speed of the machine: that is when they are busy. Each kind
    is returned in firing order.
    """
    if not 0 <= start <= end <= 1:
        raise ValueError("need 0 <= start <= end <= 1")
    rng = random.Random(seed)

    def moments(n: int, lo: float, hi: float) -> list[float]:
        # one uniform moment in each of n equal slices: random, yet never two kills at once
        width = (hi - lo) / n if n else 0.0
        return [rng.uniform(lo + k * width, lo + (k + 1) * width) for k in range(n)]

    events = [Event(at, "kill_worker", rng.randrange(workers), "progress")
              for at in moments(kill_workers, start, end)]
    events += [Event(at, "kill_stage") for at in moments(kill_stage, start * window_s, end * window_s)]
    events += [Event(at, "restart_broker") for at in moments(restart_broker, start * window_s, end * window_s)]
    # a broker kill waits for the last disruption to settle and lasts ~10 s plus a restart: planned
    # in the first two thirds of the window so that the last one still meets traffic
    last = start + (end - start) * 2 / 3
    events += [Event(at, "kill_broker") for at in moments(kill_brokers, start * window_s, last * window_s)]
    return sorted(events, key=lambda e: (e.by, e.at))


def classify_lost(lost: Iterable[str], published: Iterable[str],
                  segments: Iterable[tuple[str, int, int]]) -> dict[str, int]:
    """Where each unanswered request stopped: ``not_published`` (not on the requests topic),
    ``no_segments`` (the stage emitted nothing committed), ``partial_segments`` (some of
    its ``total``), ``segments_unanswered`` (every segment there; the worker gave no answer).

    ``segments``: ``(request_id, seq, total)`` of every committed segment record.
    """
    pub = set(published)
    seqs: dict[str, set[int]] = {}
    totals: dict[str, int] = {}
    for rid, seq, total in segments:
        seqs.setdefault(rid, set()).add(seq)
        totals[rid] = total
    out = {"not_published": 0, "no_segments": 0, "partial_segments": 0, "segments_unanswered": 0}
    for rid in lost:
        if rid not in pub:
            out["not_published"] += 1
        elif rid not in seqs:
            out["no_segments"] += 1
        elif len(seqs[rid]) < totals[rid]:
            out["partial_segments"] += 1
        else:
            out["segments_unanswered"] += 1
    return out


def plausible_duration(chars: int) -> tuple[float, float]:
    """Bounds in seconds for speech of ``chars`` characters at 1x speed.

    English is read at roughly 12-18 characters per second; the bounds are loose
    (50 down to 4 characters per second, plus a second and a half of edge silence).
    """
    return chars / 50.0, chars / 4.0 + 1.5


def check_audio(data: bytes | None, *, sha256: str, nbytes: int, sample_rate: int, duration_s: float,
                text_chars: int | None = None, speed: float = 1.0) -> list[str]:
    """Problems with one completion's audio object (empty list: good).

    ``data`` is the object as downloaded (None: it does not exist); the other arguments
    are what the completion announced.
    """
    import hashlib

    import soundfile as sf

    if data is None:
        return ["missing"]
    problems = []
    if len(data) != nbytes:
        problems.append(f"bytes {len(data)} != announced {nbytes}")
    if hashlib.sha256(data).hexdigest() != sha256:
        problems.append("sha256 mismatch")
    try:
        samples, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        return [*problems, f"undecodable: {e}"]
    mono = samples.mean(axis=1) if samples.size else np.zeros(0, np.float32)
    dur = len(mono) / sr if sr else 0.0
    if sr != sample_rate:
        problems.append(f"sample rate {sr} != announced {sample_rate}")
    if abs(dur - duration_s) > 0.05 + 0.02 * duration_s:
        problems.append(f"duration {dur:.3f}s != announced {duration_s:.3f}s")
    if mono.size == 0 or float(np.sqrt(np.mean(mono.astype(np.float64) ** 2))) < 1e-3 or float(
            np.max(np.abs(mono))) < 0.01:
        problems.append("silent")
    if text_chars is not None:
        lo, hi = plausible_duration(text_chars)
        lo, hi = lo / max(speed, 0.25), hi / max(speed, 0.25)
        if not lo <= dur <= hi:
            problems.append(f"implausible duration {dur:.2f}s for {text_chars} characters")
    return problems


# --- the run -------------------------------------------------------------------------------

@dataclass(slots=True)
class ChaosConfig:
    requests: int = 200
    kill_workers: int = 2
    kill_stage: int = 1
    restart_broker: int = 0
    workers: int = 2
    seed: int | None = None
    publish_s: float | None = None  # default: max(10, requests / 10)
    timeout_s: float = 300.0  # after the last publish, for every answer
    startup_timeout_s: float = 180.0
    out_dir: Path = Path("out/chaos")
    keep: bool = False  # keep the run's topics (and private stack) for inspection
    liveness_grace_s: float = 30.0  # restart a process whose /healthz fails this long
    bad_share: float = 0.2  # share of requests with a readable id and bad content (answered failed, once)
    brokers: int = 1  # brokers of the stack; above 1 the run brings up a private stack of that many
    kill_brokers: int = 0  # SIGKILLs of a broker (segments leader / transaction coordinator, alternating)
    broker_down_s: float = 10.0  # how long a killed broker stays dead before it is started again
    # a broker kill waits (at most broker_settle_timeout_s) until no request has waited longer than
    # this for its answer: one failure at a time, so each kill's window shows its own failover
    settle_age_s: float = 10.0
    settle_quiet_s: float = 20.0  # ... and until this long after the last worker or stage kill
    # worker and stage kills at least this far apart when brokers are killed too (one failure at a
    # time, so each broker kill's window shows its own failover); without broker kills they come as
    # planned: a small run is over before a spaced second kill would land
    kill_spacing_s: float = 10.0
    broker_settle_timeout_s: float = 30.0


@dataclass(slots=True)
class _Progress:
    seen: dict[str, int] = field(default_factory=dict)
    answered_at: dict[str, float] = field(default_factory=dict)  # first answer's time.time()
    first_at: float | None = None
    last_at: float | None = None

    def add(self, rid: str, t: float) -> None:
        self.seen[rid] = self.seen.get(rid, 0) + 1
        self.answered_at.setdefault(rid, t)
        self.first_at = t if self.first_at is None else self.first_at
        self.last_at = t


def _say(msg: str) -> None:
    print(f"chaos: {msg}", file=sys.stderr, flush=True)


def _private_stack(base: Settings, run_id: str, brokers: int = 1) -> Settings:
    """Settings of a fresh stack instance of this run's own (home, ports), jars shared; with
    ``brokers`` 3, three brokers (replication factor 3, clients bootstrapping from all)."""
    from streams.devstack.procs import free_ports
    from streams.devstack.stack import stack_settings

    home = Path(base.process.home).expanduser().resolve().parent / f"ttsflow-chaos-{run_id}"
    home.mkdir(parents=True)
    shared_jars = Path(base.process.home).expanduser().resolve() / "jars"
    if shared_jars.is_dir():
        (home / "jars").symlink_to(shared_jars)
    broker_ports = [10 * i + d for i in range(brokers) for d in (0, 1)]  # client, controller
    kp = free_ports(1, offsets=broker_ports)[0]
    sp, rp = free_ports(2, avoid=[kp + o for o in broker_ports])
    s = base.replace(home=str(home), kafka_port=kp, kafka_controller_port=kp + 1, s3_port=sp, redis_port=rp,
                     bootstrap_servers=f"127.0.0.1:{kp}", s3_endpoint=f"http://127.0.0.1:{sp}",
                     redis_url=f"redis://127.0.0.1:{rp}/0", kafka_brokers=1, replication_factor=1)
    return stack_settings(s, brokers) if brokers > 1 else s


def _restart_broker(settings: Any, log: list[dict[str, Any]]) -> None:
    """Stop this run's private broker (SIGTERM, by its PID file) and start it again."""
    import os

    from streams.devstack import stack
    from streams.devstack.pidfiles import reap

    t0 = time.monotonic()
    pid = stack.status(settings)["kafka"].get("pid")
    if pid is None:
        raise RuntimeError("private broker is not running")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        reap(pid)
        time.sleep(0.1)
    down_s = time.monotonic() - t0
    stack.stack_up(settings, quiet=True)
    log.append({"action": "restart_broker", "down_s": round(down_s, 1), "total_s": round(time.monotonic() - t0, 1)})


def run_chaos(cfg: ChaosConfig) -> dict[str, Any]:
    """Run the pipeline under disruption; the report (also the command's JSON line)."""
    from schemas import SchemaError, decode_completion
    from streams.bench.corpus import bad_content_request, chaos_requests, encode_request
    from streams.bench.harness import (
        Publisher,
        TopicReader,
        delete_run_topics,
        isolated,
        new_run_id,
        require_stack_up,
        s3_client,
    )
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    t_start = time.monotonic()
    run_id = new_run_id()
    seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31)
    base = load_settings()
    private = cfg.restart_broker > 0 or cfg.brokers > 1 or cfg.kill_brokers > 0
    if cfg.kill_brokers > 0 and cfg.brokers < 3:
        raise ValueError("--kill-brokers needs --brokers 3 (with one broker, use --restart-broker)")
    run_dir = cfg.out_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    broker_log: list[dict[str, Any]] = []
    if private:
        base = _private_stack(base, run_id, cfg.brokers)
    s = isolated(base, run_id)

    def clean_up() -> None:
        """The private stack taken down (or the run's topics deleted), unless asked to keep them."""
        if cfg.keep:
            return
        try:
            if private:
                stack.stack_down(s, wipe=True, quiet=True)
                shutil.rmtree(base.process.home, ignore_errors=True)
            else:
                delete_run_topics(s)
        except Exception as e:  # cleanup must not hide the run's own error
            _say(f"cleanup failed: {e}")

    try:  # a failed start (a broker, topic creation) leaves no private stack running behind it
        if private:
            _say(f"bringing up a private stack in {base.process.home} (kafka {base.kafka.bootstrap_servers})")
            t0 = time.monotonic()
            stack.stack_up(base, quiet=True)
            timings["private_stack_up_s"] = round(time.monotonic() - t0, 1)
        else:
            require_stack_up(base)
        stack.ensure_topics(s)
        stack.ensure_bucket(s)
    except BaseException:
        if private:
            clean_up()
        raise
    reqs = chaos_requests(cfg.requests, seed=seed, run_id=run_id)
    by_id = {r.request_id: r for r in reqs}
    # every k-th request carries bad content: its answer must be one failed completion with the code
    every = max(1, round(1 / cfg.bad_share)) if cfg.bad_share > 0 else 0
    bad: dict[str, tuple[bytes, str]] = {
        r.request_id: bad_content_request(r.request_id, r.user_id, j)
        for j, r in enumerate(reqs[every - 1::every] if every else [])}
    # broker kills run one after another, each after the last disruption settled, ~10 s down plus a
    # JVM start (15-40 s on a loaded 2-core box) and its followers' catch-up: 75 s of publishing per
    # kill keeps every kill inside the traffic it is meant to disturb
    publish_s = cfg.publish_s if cfg.publish_s is not None else max(10.0, cfg.requests / 10.0, 75.0 * cfg.kill_brokers)
    events = plan_events(seed, publish_s, kill_workers=cfg.kill_workers, kill_stage=cfg.kill_stage,
                         restart_broker=cfg.restart_broker, workers=cfg.workers, kill_brokers=cfg.kill_brokers)
    tids = [f"ttsflow-chaos-{run_id}-w{i}" for i in range(cfg.workers)]
    published_at: dict[str, float] = {}
    progress = _Progress()
    sup = Supervisor(run_dir / "logs")

    last_kill = [0.0]  # monotonic time of the last worker or stage kill

    def settled() -> bool:
        """(The killer's thread asks.) Every process running, none killed in the last
        ``settle_quiet_s``, and no request waiting longer than ``settle_age_s`` for its answer:
        the last disruption and its backlog are over."""
        if time.monotonic() - last_kill[0] < cfg.settle_quiet_s or not all(p.alive() for p in list(sup.procs.values())):
            return False
        answered, cutoff = progress.answered_at.copy(), time.time() - cfg.settle_age_s
        return not any(t < cutoff and rid not in answered for rid, t in published_at.copy().items())

    killer = BrokerKiller(s, tids, [s.kafka.worker_group, s.stage.stage_app_id], down_s=cfg.broker_down_s,
                          settled=settled, settle_timeout_s=cfg.broker_settle_timeout_s)
    replication: dict[str, dict[str, int]] = {}
    stack_rss: dict[str, float | None] = {}
    _say(f"run {run_id} seed {seed}: {cfg.requests} requests over {publish_s:.0f}s, events "
         + ", ".join(f"{e.action}{'#' + str(e.target) if e.action == 'kill_worker' else ''}@"
                     + (f"{e.at:.1f}s" if e.by == "time" else f"{e.at:.0%} answered") for e in events))
    fired: list[dict[str, Any]] = []
    crash_restarts = liveness_restarts = 0
    last_probe = 0.0
    final: list[tuple[str, str]] = []
    completions: dict[str, list[Any]] = {}
    undecodable = 0
    broker_thread: threading.Thread | None = None
    try:
        # 1. start one stage and the workers; wait until each serves /metrics
        t0 = time.monotonic()
        sup.stage("stage", s)
        for i in range(cfg.workers):
            sup.worker(f"worker-{i}", s.replace(transactional_id=tids[i]))
        for p in list(sup.procs.values()):
            sup.wait_ready(p, timeout=cfg.startup_timeout_s)
        timings["startup_s"] = round(time.monotonic() - t0, 1)
        if cfg.brokers > 1:  # the shape the run tests: every topic, internal ones included, replicated
            replication = stack.topic_replication(s, [s.kafka.topic_requests, s.kafka.topic_segments, s.kafka.topic_completed,
                                                      s.kafka.topic_done, s.kafka.topic_chunks, s.kafka.topic_dlq,
                                                      "__consumer_offsets", "__transaction_state"])
        _say(f"processes ready in {timings['startup_s']}s; publishing")

        # 2. publish at an even pace; fire each event when its moment comes; follow progress
        reader = TopicReader(s.kafka, s.kafka.topic_completed, start="beginning")
        pub = Publisher(s.kafka)
        t_pub = time.monotonic()
        wall_pub = time.time()
        pending = list(events)
        i = 0
        deadline: float | None = None
        while True:
            now = time.monotonic() - t_pub
            while i < len(reqs) and i * publish_s / len(reqs) <= now:
                r = reqs[i]
                raw = bad[r.request_id][0] if r.request_id in bad else encode_request(r)
                pub.publish(s.kafka.topic_requests, r.user_id.encode(), raw)
                published_at[r.request_id] = time.time()
                i += 1
            answered = len(progress.seen) / len(reqs)
            for ev in [e for e in pending if (e.at <= now if e.by == "time" else e.at <= answered)]:
                rec: dict[str, Any] = {"at_s": round(now, 1), "action": ev.action,
                                       "completed_before": len(progress.seen)}
                if ev.action in ("kill_worker", "kill_stage"):
                    name = f"worker-{ev.target}" if ev.action == "kill_worker" else "stage"

                    def kill(name: str = name) -> None:
                        sup.restart(name, sig=signal.SIGKILL)
                        last_kill[0] = time.monotonic()

                    # held while a broker kill is under way, and spaced (held ones come due together):
                    # one failure at a time
                    spacing = cfg.kill_spacing_s if cfg.kill_brokers > 0 else 0.0
                    if time.monotonic() - last_kill[0] < spacing or not killer.disrupt(kill):
                        continue
                    rec["target"] = name
                    if ev.by == "time" and now - ev.at > 1.0:
                        rec["held_s"] = round(now - ev.at, 1)
                pending.remove(ev)
                if ev.action == "kill_broker":
                    killer.kill(rec)  # filled in on the killer's thread: which broker, why, when back
                elif ev.action == "restart_broker":
                    if broker_thread is not None:
                        broker_thread.join()
                    broker_thread = threading.Thread(target=_restart_broker, args=(s, broker_log), daemon=True)
                    broker_thread.start()
                fired.append(rec)
                _say(f"{now:6.1f}s {ev.action} {rec.get('target', '')} ({len(progress.seen)} answered)")
            # an orchestrator restarts a process that exits on its own (a fenced worker does)
            for p in sup.procs.values():
                if p.popen is not None and p.popen.poll() is not None:
                    crash_restarts += 1
                    if crash_restarts > 10 * (len(events) + 1):
                        raise RuntimeError(f"{p.name} keeps exiting; {p.log_path}:\n{p.log_tail()}")
                    _say(f"{now:6.1f}s {p.name} exited with {p.popen.returncode}; restarting")
                    sup.restart(p.name)
            # ... and one that is alive but stuck (its /healthz failing), as a liveness probe would
            if time.monotonic() - last_probe > 2.0:
                last_probe = time.monotonic()
                for p in sup.unhealthy(grace_s=cfg.liveness_grace_s):
                    liveness_restarts += 1
                    _say(f"{now:6.1f}s {p.name} failed its liveness probe for {cfg.liveness_grace_s:.0f}s; restarting")
                    sup.restart(p.name, sig=signal.SIGKILL)
            for recd in reader.poll(0.2):
                try:
                    c = decode_completion(recd.value)
                except SchemaError:
                    continue
                progress.add(c.request_id, recd.received)
            if i == len(reqs):
                if deadline is None:
                    pub.flush(120)
                    timings["publish_s"] = round(time.monotonic() - t_pub, 1)
                    deadline = time.monotonic() + cfg.timeout_s
                if not pending and all(rid in progress.seen for rid in by_id):
                    break
                if time.monotonic() > deadline:
                    _say(f"timeout: {len(by_id) - sum(1 for r in by_id if r in progress.seen)} requests unanswered")
                    break
        if broker_thread is not None:
            broker_thread.join()
        killer.join()
        if private:  # what the stack costs after a run under load (resident memory per server process)
            stack_rss = {svc: e.get("rss_mb") for svc, e in stack.status(s).items()}
        timings["first_publish_to_last_answer_s"] = round((progress.last_at or time.time()) - wall_pub, 1)
        reader.close()
        # every request's publish and first answer (seconds after the first publish), for looking
        # at a run's stalls after the fact
        (run_dir / "logs" / "timeline.json").write_text(json.dumps(
            {"events": fired, "requests": {rid: [round(t - wall_pub, 3),
                                                 round(progress.answered_at[rid] - wall_pub, 3)
                                                 if rid in progress.answered_at else None]
                                           for rid, t in published_at.items()}}))

        # 3. stop everything, then read the whole completions topic as a user would
        codes = sup.stop_all()
        _say(f"stopped: {codes}")
        with TopicReader(s.kafka, s.kafka.topic_completed, start="beginning", eof=True) as final_reader:
            for recd in final_reader.read_to_end(timeout=120):
                try:
                    c = decode_completion(recd.value)
                except SchemaError:
                    undecodable += 1
                    continue
                final.append((c.request_id, c.status))
                completions.setdefault(c.request_id, []).append(c)
        t = tally(by_id, final)
        lost_where = _where_lost(s, {r for r in by_id if r not in completions}) if t.lost else {}

        # 4. check every ok completion's audio in S3
        s3 = s3_client(s)
        bad_audio: dict[str, list[str]] = {}
        checked = 0
        for rid, cs in completions.items():
            for c in cs:
                if c.status != "ok" or rid not in by_id or rid in bad:
                    continue
                if c.audio is None:
                    bad_audio[rid] = ["ok completion without audio"]
                    continue
                try:
                    data = s3.get_object(Bucket=c.audio.bucket, Key=c.audio.key)["Body"].read()
                except s3.exceptions.NoSuchKey:
                    data = None
                probs = check_audio(data, sha256=c.audio.sha256, nbytes=c.audio.bytes,
                                    sample_rate=c.audio.sample_rate, duration_s=c.audio.duration_s,
                                    text_chars=len(by_id[rid].text), speed=by_id[rid].speed)
                checked += 1
                if probs:
                    bad_audio.setdefault(rid, []).extend(probs)
        timings["total_s"] = round(time.monotonic() - t_start, 1)
        failed_codes = Counter(c.error.code for cs in completions.values() for c in cs[:1]
                               if c.status != "ok" and c.error is not None)
        # bad content: the first answer must be failed with the stage's code; a valid request must not fail
        wrong = {rid: (cs[0].status, cs[0].error.code if cs[0].error else None) for rid, cs in completions.items()
                 if rid in bad and (cs[0].status != "failed" or cs[0].error is None
                                    or cs[0].error.code != bad[rid][1])}
        valid_failed = sum(1 for rid, cs in completions.items()
                           if rid in by_id and rid not in bad and cs[0].status != "ok")
        return {
            "run_id": run_id, "seed": seed, "workers": cfg.workers,
            **{k: v for k, v in asdict(t).items() if k not in ("lost_ids", "duplicate_ids")},
            "bad_audio": len(bad_audio), "audio_checked": checked, "undecodable_completions": undecodable,
            "failed_codes": dict(failed_codes), "bad_content": len(bad),
            "bad_content_answered": sum(1 for rid in bad if rid in completions),
            "bad_content_wrong": len(wrong), "bad_content_wrong_sample": dict(list(wrong.items())[:5]),
            "valid_failed": valid_failed,
            "kills": {"worker": sum(1 for f in fired if f["action"] == "kill_worker"),
                      "stage": sum(1 for f in fired if f["action"] == "kill_stage"),
                      "broker_restarts": len(broker_log),
                      **({"broker": sum(1 for k in killer.log if "killed_at" in k)} if cfg.kill_brokers else {})},
            **({"brokers": cfg.brokers, "replication": replication} if cfg.brokers > 1 else {}),
            **({"stack_rss_mb": stack_rss} if stack_rss else {}),
            **(_broker_kills(killer.log, published_at, progress.answered_at, wall_pub) if cfg.kill_brokers else {}),
            "crash_restarts": crash_restarts, "liveness_restarts": liveness_restarts, "events": fired, "broker": broker_log,
            "lost_ids": list(t.lost_ids), "lost_where": lost_where, "duplicate_ids": list(t.duplicate_ids),
            "bad_audio_sample": dict(list(bad_audio.items())[:5]),
            "private_stack": private, "logs": str(run_dir / "logs"),
            "timings": timings,
        }
    finally:
        sup.stop_all()
        if broker_thread is not None:
            broker_thread.join(120)
        killer.join(120)
        clean_up()


def _broker_kills(log: list[dict[str, Any]], published: dict[str, float], answered: dict[str, float],
                  t0: float) -> dict[str, Any]:
    from streams.bench.harness import percentile

    """The report's ``broker_kills`` (each kill: broker, why, what it led or coordinated, times
    relative to the first publish, the answers around it) and ``broker_kill_stall``: the worst
    p99 and gap over all kills."""
    kills = []
    for rec in log:
        k = {key: v for key, v in rec.items() if key not in ("killed_at", "back_at")}
        if "killed_at" in rec and "back_at" in rec:
            k["killed_at_s"] = round(rec["killed_at"] - t0, 1)
            k["back_at_s"] = round(rec["back_at"] - t0, 1)
            k["answers"] = kill_window_stats(rec["killed_at"], rec["back_at"], published, answered)
        kills.append(k)
    p99s = [k["answers"]["p99_s"] for k in kills if "answers" in k and k["answers"]["p99_s"] is not None]
    gaps = [k["answers"]["max_gap_s"] for k in kills if "answers" in k and k["answers"]["max_gap_s"] is not None]
    # the same latency for requests published while every broker was up: what the kills add is the difference
    windows = [(r["killed_at"], r["back_at"]) for r in log if "killed_at" in r and "back_at" in r]
    calm = [answered[rid] - t for rid, t in published.items()
            if rid in answered and not any(a <= t <= b for a, b in windows)]
    calm_p99 = percentile(calm, 99)
    return {"broker_kills": kills,
            "broker_kill_stall": {"worst_p99_s": max(p99s) if p99s else None, "worst_gap_s": max(gaps) if gaps else None,
                                  "outside_windows_requests": len(calm),
                                  "outside_windows_p99_s": None if calm_p99 is None else round(calm_p99, 2)}}


def _where_lost(s: Any, lost: set[str]) -> dict[str, int]:
    """Read the run's requests and segments topics (``read_committed``) to place the lost requests."""
    from schemas import SchemaError, decode_segment, peek_request_id
    from streams.bench.harness import TopicReader

    with TopicReader(s.kafka, s.kafka.topic_requests, eof=True) as r:
        published = [rid for rec in r.read_to_end(120) if (rid := peek_request_id(rec.value))]
    segs: list[tuple[str, int, int]] = []
    with TopicReader(s.kafka, s.kafka.topic_segments, eof=True) as r:
        for rec in r.read_to_end(120):
            try:
                seg = decode_segment(rec.value)
            except SchemaError:
                continue
            segs.append((seg.request_id, seg.seq, seg.total))
    return classify_lost(lost, published, segs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="requests to publish (short texts)")
    ap.add_argument("--kill-workers", type=int, default=2, help="SIGKILLs of a worker, each restarted at once")
    ap.add_argument("--kill-stage", type=int, default=1, help="SIGKILLs of the stage, each restarted at once")
    ap.add_argument("--restart-broker", type=int, default=0,
                    help="broker restarts (runs on a private stack instance when > 0)")
    ap.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                    help="brokers of the stack (3: a private three-broker stack, replication factor 3)")
    ap.add_argument("--kill-brokers", type=int, default=0,
                    help="SIGKILLs of a broker (needs --brokers 3): the leader of the most segments partitions or a "
                         "worker's transaction coordinator, alternating; each restarted --broker-down-seconds later")
    ap.add_argument("--broker-down-seconds", type=float, default=10.0, help="how long a killed broker stays dead")
    ap.add_argument("--workers", type=int, default=2, help="worker processes")
    ap.add_argument("--seed", type=int, default=None, help="seed of texts and event moments (default: random)")
    ap.add_argument("--publish-seconds", type=float, default=None, help="spread publishing over this many seconds")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds after the last publish to wait for answers")
    ap.add_argument("--bad-share", type=float, default=0.2,
                    help="share of requests with a readable id and bad content (0 for none)")
    ap.add_argument("--keep", action="store_true", help="keep the run's topics / private stack")
    ap.add_argument("--json", action="store_true", help="print only the JSON report on stdout")
    ns = ap.parse_args(argv)
    if ns.requests < 1 or ns.workers < 1 or min(ns.kill_workers, ns.kill_stage, ns.restart_broker, ns.kill_brokers) < 0 \
            or not 0 <= ns.bad_share <= 1:
        print("ttsflow chaos: --requests and --workers must be >= 1, counts >= 0, --bad-share in [0, 1]",
              file=sys.stderr)
        return 2
    if ns.kill_brokers and ns.brokers < 3:
        print("ttsflow chaos: --kill-brokers needs --brokers 3 (one broker: --restart-broker)", file=sys.stderr)
        return 2
    cfg = ChaosConfig(requests=ns.requests, kill_workers=ns.kill_workers, kill_stage=ns.kill_stage,
                      restart_broker=ns.restart_broker, workers=ns.workers, seed=ns.seed,
                      publish_s=ns.publish_seconds, timeout_s=ns.timeout, keep=ns.keep, bad_share=ns.bad_share,
                      brokers=ns.brokers, kill_brokers=ns.kill_brokers, broker_down_s=ns.broker_down_seconds)
    try:
        report = run_chaos(cfg)
    except Exception as e:
        print(f"ttsflow chaos: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not ns.json:
        print(f"requests {report['requests']}  completed {report['completed']}  lost {report['lost']}  "
              f"duplicates {report['duplicates']}  bad_audio {report['bad_audio']}  failed {report['failed']}  "
              f"bad_content {report['bad_content_answered']}/{report['bad_content']} "
              f"(wrong {report['bad_content_wrong']})  "
              f"in {report['timings']['total_s']}s")
    print(json.dumps(report))
    ok = (report["lost"] == 0 and report["duplicates"] == 0 and report["bad_audio"] == 0
          and report["bad_content_wrong"] == 0)
    return 0 if ok else 1
