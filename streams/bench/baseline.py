"""``ttsflow bench baseline``: ttsflow against the seeds' design (Celery + Redis), side by side.

Both systems run at once on this machine, on the same stack (Kafka, S3, Redis), same
backend, voice and model version (the model store's current one), same number of worker
processes (``--workers``; engine threads = cores / workers for both):

* **ttsflow**: one ``ttsflow stage`` and N ``ttsflow worker`` processes on topics of their
  own; a request is a Kafka record, its answer the committed completion a
  ``read_committed`` reader sees.
* **baseline** (``streams/bench/celery_peer``, needs the ``bench`` extra): one Celery worker node,
  prefork pool of N processes, Redis broker (DB 2) and result backend (DB 3),
  ``acks_late`` + ``reject_on_worker_lost`` + prefetch 1; a request is one
  ``apply_async`` (what an HTTP front's ``.delay()`` does; no web server is measured),
  its answer the task's result seen in the result backend.

Both are driven by the same seeded open-loop (Poisson) arrival process, phases
interleaved (ttsflow, then the baseline, per phase) so load on the shared machine hits
both alike, with fresh texts per phase (neither audio cache helps) and the same texts
for both systems within a phase:

1. **burst**: a batch of requests at once: a first estimate C of capacity;
2. **rates**: open loop at fractions of C, up to saturation (a system's sweep stops at its
   first rate after the lowest that it does not sustain); a rate is *sustained* when
   completions keep up (answered / (last answer - first send) >= 97% of the offered
   rate, nothing unanswered: on a 15-20 s run, at most ~0.5 s of backlog left when the
   sending stops) and latency does not grow through the run (median of the last third
   of requests <= 2 x that of the first third + 0.5 s). Max sustained
   throughput: the highest completion rate of a sustained run, in requests/s and audio
   seconds/s;
3. **at 70%**: open loop at 0.7 x the system's own max sustained throughput: p50/p99;
4. **kill**: open loop at that rate while worker processes are SIGKILLed (``--kills``,
   evenly spread). ttsflow: a worker process, restarted at once (as an orchestrator
   would); with ``--standby`` each worker has a warm standby (``TTS_WORKER_SLOTS``): the
   serving process is killed, its standby takes over, the restarted one becomes the standby. Baseline: alternately a pool process (Celery respawns it and requeues its
   task) and the whole worker node (restarted at once; its unacked tasks come back after
   the broker's visibility timeout). Counted per request id: *lost* = never answered
   within the deadline, *duplicated* = answered (ttsflow: committed completions) or
   executed to the end (baseline: execution log) more than once. ``answered_late``: lost at
   the deadline but answered while the phase drains (every phase drains its leftovers,
   uncounted, before the next one starts, so no backlog spills into the next measurement).

The machine is shared: read the ratios (ttsflow / baseline), measured in one run. The
last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.bench.tail import baseline_path, breakdown, ttsflow_path

__all__ = ["keep_up_rps", "main", "run_bench", "sustained"]

ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages): the Celery node's cwd


def _say(msg: str) -> None:
    print(f"bench baseline: {msg}", file=sys.stderr, flush=True)


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


# Answers per second at least this share of the arrival rate, the answers counted over the sends' span
# plus the median wait of the run's last third (how far answers trail the sends at its end).
# 0.9 until 2026-12-05 passed runs that ended with 1.5-2 s of backlog (a 15 s step whose median answer
# took 1.3 s, for either system): a rate 10-15% past what a system keeps up with counted as sustained,
# and "70% of capacity" then meant 80% or more of it. Until 2026-12-06 the span ran to the last answer,
# so one slow answer at the very end (0.5 s: the p99 of either system at 70%) failed a 15 s step whose
# median answer took 160 ms, and the ramp stopped there: Celery's capacity read 7.4-11.7 requests/s in
# one run, every later phase at a fraction of it.
_KEEP_UP = 0.97


def keep_up_rps(answered: int, send_span_s: float, last_third_p50_s: float | None) -> float:
    """Answers per second, counted over the sends' span and how far the answers trail them at its end
    (the median wait of the last third: a backlog shows there, one slow last answer does not)."""
    return answered / max(1e-6, send_span_s + (last_third_p50_s or 0.0))


def sustained(offered_rps: float, keep_up_rps: float, lost: int, first_third_p50: float | None,
              last_third_p50: float | None) -> bool:
    """A rate is sustained: completions keep up (``keep_up_rps``: answers over the sends' span plus the
    last third's median wait) and latency does not grow through the run."""
    if lost or first_third_p50 is None or last_third_p50 is None:
        return False
    return keep_up_rps >= _KEEP_UP * offered_rps and last_third_p50 <= 2 * first_third_p50 + 0.5


# --- the two systems ----------------------------------------------------------------------
@dataclass
class _Answers:
    sent: dict[str, float] = field(default_factory=dict)   # request id -> time.time() at send
    got: dict[str, tuple[bool, float, float]] = field(default_factory=dict)  # id -> (ok, audio s, time seen)
    answers: Counter[str] = field(default_factory=Counter)  # id -> answers seen (ttsflow)
    paths: dict[str, dict[str, float]] = field(default_factory=dict)  # id -> seconds per place (streams.bench.tail)


class _Ttsflow:
    name = "ttsflow"
    guarantee = "exactly_once"

    def __init__(self, s: Any, workers: int, run_id: str, sup: Any, *, standby: bool = False) -> None:
        self.s, self.sup, self.workers, self.standby = s, sup, workers, standby
        self.a = _Answers()
        self.rng = random.Random(run_id)
        self.restarts = 0
        sup.stage("tf-stage", s)
        if standby:  # N serving slots, each with a warm standby: 2N processes, which of a pair serves changes
            self.slots = s.replace(transactional_id="", transactional_id_prefix=f"ttsflow-blbench-{run_id}",
                                   worker_slots=workers)
            for i in range(2 * workers):
                sup.worker(f"tf-worker-{i}", self.slots, claim_id=True)
        else:
            for i in range(workers):
                sup.worker(f"tf-worker-{i}", s.replace(transactional_id=f"ttsflow-blbench-{run_id}-{i}"))
        self.pub: Any = None
        self.reader: Any = None

    def wait_ready(self, timeout: float) -> None:
        from streams.bench.harness import Publisher, TopicReader

        for p in list(self.sup.procs.values()):
            if p.name.startswith("tf-"):
                self.sup.wait_ready(p, timeout=timeout)
        # sent at once, as the Celery peer's client sends its task (and as ttsflow's own client does):
        # the Publisher's 2 ms linger, a batching choice of the caller's, is no part of either system
        self.pub = Publisher(self.s.kafka, **{"linger.ms": 0})
        self.reader = TopicReader(self.s.kafka, self.s.kafka.topic_completed, start="end")

    def _logged(self, pattern: str) -> tuple[str, ...] | None:
        """The groups of ``pattern``'s last match in the first worker's log, if any."""
        import re

        log = self.sup.procs["tf-worker-0"].log_path.read_text(errors="replace")
        m = list(re.finditer(pattern, log))
        return m[-1].groups() if m else None

    def model(self) -> str:
        """The model the first worker says it loaded (its ``event=model_loaded`` log line)."""
        m = self._logged(r"event=model_loaded model=(\S+) version=(\S+) precision=(\S+)")
        return ":".join(m) if m else "?"

    def lanes(self) -> str:
        """The first worker's model lanes and threads per call (its ``event=engine_loaded`` log line)."""
        m = self._logged(r"event=engine_loaded .*lanes=(\d+) threads_per_call=(\S+)")
        return f"{m[0]} x {m[1]} threads" if m else "?"

    def _request(self, rid: str, text: str) -> Any:
        from schemas import Request

        return Request(request_id=rid, user_id=f"bench-user-{self.rng.randrange(16):02d}", text=text)

    def publish(self, rid: str, text: str) -> None:
        from streams.bench.corpus import encode_request

        req = self._request(rid, text)
        self.a.sent[rid] = self.pub.publish(self.s.kafka.topic_requests, req.user_id.encode(), encode_request(req))

    def _answered(self, c: Any, received: float) -> None:
        """A request's first completion, seen at ``received`` (a hook for richer benchmarks)."""

    def pump(self, timeout: float) -> None:
        from schemas import SchemaError, decode_completion

        for rec in self.reader.poll(timeout):
            try:
                c = decode_completion(rec.value)
            except SchemaError:
                continue
            if c.request_id not in self.a.sent:
                continue
            self.a.answers[c.request_id] += 1
            if c.request_id not in self.a.got:
                dur = c.audio.duration_s if c.audio is not None else 0.0
                self.a.got[c.request_id] = (c.status == "ok", dur, rec.received)
                path = ttsflow_path(c, self.a.sent[c.request_id], rec.received) if c.status == "ok" else None
                if path is not None:
                    self.a.paths[c.request_id] = path
                self._answered(c, rec.received)

    def flush(self) -> None:
        self.pub.flush(60)

    def gc_pauses(self, t0: float, t1: float) -> dict[str, Any]:
        """The workers' logged garbage collections (``event=gc_pause``, 5 ms or more) between ``t0`` and ``t1``."""
        import re

        ms: list[float] = []
        for p in self.sup.procs.values():
            if p.name.startswith("tf-worker"):
                log = p.log_path.read_text(errors="replace") if p.log_path.exists() else ""
                for m in re.finditer(r"event=gc_pause generation=\d+ ms=([\d.]+) at=([\d.]+)", log):
                    if t0 <= float(m.group(2)) <= t1:
                        ms.append(float(m.group(1)))
        return {"count_5ms": len(ms), "count_50ms": sum(1 for x in ms if x >= 50), "sum_ms": round(sum(ms), 1),
                "max_ms": round(max(ms), 1) if ms else 0.0}

    def executions(self) -> Counter[str]:
        return self.a.answers

    def kill(self, k: int) -> str:
        slot = k % self.workers
        name = self._serving(slot) if self.standby else f"tf-worker-{slot}"
        self.sup.restart(name, sig=signal.SIGKILL)
        return f"SIGKILL {name}, restarted" + (" (its standby takes over; it becomes one)" if self.standby else "")

    def _serving(self, slot: int) -> str:
        """The process serving ``slot`` (not its standby, which takes the slot over when it dies)."""
        from streams.identity import slot_holder

        kafka = self.slots.kafka
        pid = slot_holder("member", kafka.bootstrap_servers, kafka.effective_transactional_id_prefix, slot)
        for p in self.sup.procs.values():
            if p.name.startswith("tf-worker") and p.popen is not None and p.popen.pid == pid:
                return str(p.name)
        raise RuntimeError(f"no worker of this run holds slot {slot} (holder pid {pid})")

    def keep_alive(self) -> None:
        for p in self.sup.procs.values():
            if p.name.startswith("tf-") and p.popen is not None and p.popen.poll() is not None:
                _say(f"{p.name} exited with {p.popen.returncode}; restarting")
                self.restarts += 1
                if self.restarts > 20:
                    raise RuntimeError(f"{p.name} keeps exiting; {p.log_path}:\n{p.log_tail()}")
                self.sup.restart(p.name)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


class _Baseline:
    name = "baseline"
    guarantee = "at_least_once"

    def __init__(self, s: Any, workers: int, run_id: str, log_dir: Path, visibility_s: int) -> None:
        import redis

        from streams.bench.celery_peer.app import RESULT_DB, make_app
        from streams.bench.harness import redis_db_url
        from streams.devstack.procs import settings_env

        self.s, self.workers, self.run_id = s, workers, run_id
        self.queue = f"baseline-{run_id}"
        self.a = _Answers()
        self.app = make_app(s.redis.redis_url, visibility_timeout_s=visibility_s)
        self.backend = self.app.backend
        self.r: Any = redis.Redis.from_url(redis_db_url(s.redis.redis_url, RESULT_DB), socket_timeout=10)
        env = {**settings_env(s), "PYTHONUNBUFFERED": "1"}
        self.argv = [shutil.which("env") or "/usr/bin/env", *(f"{k}={v}" for k, v in env.items()),
                     sys.executable, "-m", "streams.bench.celery_peer.worker", "--queue", self.queue, "--run-id", run_id,
                     "--concurrency", str(workers), "--visibility-timeout", str(visibility_s),
                     "--loglevel", "WARNING"]
        self.log_path = log_dir / "baseline-node.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._last_poll = 0.0
        self._spawn()

    def _spawn(self) -> None:
        from streams.devstack.procs import _die_with_parent

        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start at {time.strftime('%H:%M:%S')} ====\n".encode())
            log.flush()
            self.popen = subprocess.Popen(self.argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          preexec_fn=_die_with_parent)

    def _ready_pids(self) -> set[int]:
        from streams.bench.celery_peer.app import READY_NS

        keys = self.r.keys(f"{READY_NS}{self.run_id}:*")
        return {int(k.decode().rsplit(":", 1)[1]) for k in keys}

    def _children(self) -> list[int]:
        assert self.popen is not None
        try:
            raw = Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children").read_text()
        except OSError:
            return []
        return [int(x) for x in raw.split()]

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self._ready_pids() & set(self._children())) < self.workers:
            if self.popen is None or self.popen.poll() is not None:
                raise RuntimeError(f"baseline worker exited before it was ready; {self.log_path}:\n{self._tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"baseline worker not ready after {timeout:.0f}s; {self.log_path}:\n{self._tail()}")
            time.sleep(0.2)

    def _tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-15:])
        except OSError:
            return "(no log)"

    def model(self) -> str:
        pid = next(iter(self._ready_pids()), None)
        if pid is None:
            return "?"
        from streams.bench.celery_peer.app import READY_NS

        v = self.r.get(f"{READY_NS}{self.run_id}:{pid}")
        return v.decode() if v else "?"

    def publish(self, rid: str, text: str) -> None:
        from streams.bench.celery_peer.app import TASK

        self.a.sent[rid] = time.time()
        self.app.send_task(TASK, args=[rid, text, self.run_id], task_id=rid, queue=self.queue)

    def pump(self, timeout: float) -> None:
        # What a client of the result backend does: read the results of the pending tasks.
        wait = self._last_poll + 0.02 - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, timeout))
        self._last_poll = time.monotonic()
        pending = [rid for rid in self.a.sent if rid not in self.a.got]
        for k in range(0, len(pending), 500):
            chunk = pending[k:k + 500]
            raws = self.backend.client.mget([self.backend.get_key_for_task(rid) for rid in chunk])
            now = time.time()
            for rid, raw in zip(chunk, raws, strict=True):
                if raw is None:
                    continue
                meta = self.backend.decode_result(raw)
                status = meta.get("status")
                if status == "SUCCESS":
                    res = meta.get("result") or {}
                    self.a.got[rid] = (True, float(res.get("duration_s", 0.0)), now)
                    path = baseline_path(res, self.a.sent[rid], now)
                    if path is not None:
                        self.a.paths[rid] = path
                elif status in ("FAILURE", "REVOKED"):
                    self.a.got[rid] = (False, 0.0, now)
        if not pending:
            time.sleep(timeout)

    def flush(self) -> None:
        pass

    def executions(self) -> Counter[str]:
        from streams.bench.celery_peer.app import EXEC_NS

        return Counter(x.decode() for x in self.r.lrange(EXEC_NS + self.run_id, 0, -1))

    def kill(self, k: int) -> str:
        assert self.popen is not None
        kids = self._children()
        if k % 2 == 0 and kids:
            os.kill(kids[0], signal.SIGKILL)  # a pool process we started (child of our node)
            return f"SIGKILL pool process {kids[0]} (Celery respawns it)"
        os.killpg(self.popen.pid, signal.SIGKILL)  # the node's own session: master and pool
        self.popen.wait(30)
        self.restarts += 1
        self._spawn()
        return "SIGKILL whole worker node, restarted"

    def keep_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            _say(f"baseline node exited with {self.popen.returncode}; restarting")
            self.restarts += 1
            if self.restarts > 20:
                raise RuntimeError(f"baseline node keeps exiting; {self.log_path}:\n{self._tail()}")
            self._spawn()

    def close(self) -> None:
        from streams.bench.celery_peer.app import EXEC_NS, READY_NS

        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        with contextlib.suppress(Exception):  # cleanup must not hide the run's result
            keys = [EXEC_NS + self.run_id, *self.r.keys(f"{READY_NS}{self.run_id}:*")]
            self.r.delete(*keys)
            broker = self.app.connection_for_write()
            with broker as conn:
                conn.default_channel.client.delete(self.queue)
        self.r.close()


# --- phases -------------------------------------------------------------------------------
def unit_gaps(rng: random.Random, n: int) -> list[float]:
    """``n`` gaps of a Poisson process of rate 1: one phase's arrivals, drawn once and shared by
    both systems (:func:`schedule`), so neither is served a luckier sequence than the other."""
    return [rng.expovariate(1.0) for _ in range(n)]


def schedule(unit: Sequence[float], n: int, rate: float) -> list[float]:
    """When to send each of ``n`` requests at ``rate``/s (seconds from the phase's start): the first
    ``n`` of the shared ``unit`` gaps, scaled so the ``n``-th falls at exactly ``n / rate``. A Poisson
    process given its count (the gaps keep their random shape; the rate achieved is the one offered,
    where free draws put it 7% off at 200 requests, and at 80% of a capacity that is the difference
    between a short queue and a long one)."""
    gaps = unit[:n]
    if len(gaps) < n or n <= 0 or rate <= 0:
        raise ValueError(f"need {n} gaps at a positive rate, have {len(gaps)} at {rate}")
    k = n / (rate * sum(gaps))
    return list(itertools.accumulate(g * k for g in gaps))


def ramp(systems: list[Any], burst: dict[str, float], fractions: Sequence[float], texts: Callable[[int], list[str]],
         rng: random.Random, seconds: float, prefix: str, label: str) -> dict[str, list[dict[str, Any]]]:
    """Each system open loop at ``fractions`` of its burst's rate, ``seconds`` a step (both systems on
    one arrival shape per step, :func:`schedule`), up to its first rate not sustained twice running
    after the first step (past its saturation point higher rates only grow the backlog); each system's
    steps, in order. A step not sustained is run once more at its rate, on fresh texts and arrivals
    (``retry``: true), before the ramp ends there: one stall of the shared machine in a step's last
    third (Celery's p50 201 ms but its last third's 466 ms at 6.6 requests/s, in a repeat whose
    neighbour sustained 9.1) used to end the ramp, and the system's capacity read 30% low."""
    steps: dict[str, list[dict[str, Any]]] = {x.name: [] for x in systems}
    saturated: set[str] = set()
    for k, f in enumerate(fractions):
        n = {x.name: max(6, int(f * burst[x.name] * seconds)) for x in systems}
        shared, unit = texts(max(n.values())), unit_gaps(rng, max(n.values()))
        for sysm in systems:
            if sysm.name in saturated:
                continue
            rate = f * burst[sysm.name]
            for again in range(2 if k > 0 else 1):
                mine, gaps = (texts(n[sysm.name]), unit_gaps(rng, n[sysm.name])) if again else (shared, unit)
                _say(f"{sysm.name}: open loop {n[sysm.name]} requests at {rate:.2f}/s ({f:.0%} of its burst)"
                     + (", again" if again else ""))
                ph = _phase(sysm, f"{label}{k}" + ("again" if again else ""), mine[:n[sysm.name]],
                            schedule(gaps, n[sysm.name], rate), answer_timeout=max(60.0, 3 * seconds), prefix=prefix)
                ph["fraction_of_burst"] = f
                if again:
                    ph["retry"] = True
                steps[sysm.name].append(ph)
                _say(f"{sysm.name}: -> {ph['throughput_rps']}/s, p50 {ph['p50_ms']} ms, sustained {ph['sustained']}")
                if ph["sustained"]:
                    break
            else:
                if k > 0:
                    saturated.add(sysm.name)
    return steps


def _phase(sysm: Any, label: str, texts: list[str], at: Sequence[float] | None, *,
           answer_timeout: float, prefix: str, events: list[tuple[float, Callable[[], str]]] | None = None
           ) -> dict[str, Any]:
    """Send ``texts`` (all at once if ``at`` is None, else each at its time in ``at``, seconds from the
    phase's start: :func:`schedule`); wait; measure."""
    from streams.bench.harness import percentile

    ids = [f"{prefix}-{sysm.name[:2]}-{label}-{i:05d}" for i in range(len(texts))]
    pending_events = sorted(events or [], key=lambda e: e[0])
    fired: list[dict[str, Any]] = []
    rate = None if at is None else len(texts) / at[len(texts) - 1]
    t0 = time.monotonic()

    def fire_due() -> None:
        while pending_events and time.monotonic() - t0 >= pending_events[0][0]:
            _at, fn = pending_events.pop(0)
            fired.append({"at_s": round(time.monotonic() - t0, 1), "what": fn()})
            _say(f"{sysm.name} {label}: {fired[-1]['what']} at {fired[-1]['at_s']}s")

    for i, (rid, text) in enumerate(zip(ids, texts, strict=True)):
        if at is not None:
            due = t0 + at[i]
            while time.monotonic() < due:
                fire_due()
                sysm.pump(min(0.02, max(0.0, due - time.monotonic())))
        sysm.publish(rid, text)
    send_span = max(1e-6, time.monotonic() - t0)
    sysm.flush()
    deadline = time.monotonic() + answer_timeout
    # every planned kill fires, even if the last request was answered before its moment
    while (pending_events or not all(i in sysm.a.got for i in ids)) and time.monotonic() < deadline:
        fire_due()
        sysm.keep_alive()
        sysm.pump(0.05)
    # a little longer, so late duplicates of the kill run are seen too
    if events:
        t_end = time.monotonic() + 3.0
        while time.monotonic() < t_end:
            sysm.pump(0.1)
    got = [sysm.a.got[i] for i in ids if i in sysm.a.got]
    lat = [sysm.a.got[i][2] - sysm.a.sent[i] for i in ids if i in sysm.a.got]
    first_send = min(sysm.a.sent[i] for i in ids)
    last_answer = max((g[2] for g in got), default=first_send)
    span = max(1e-6, last_answer - first_send)
    audio = sum(g[1] for g in got if g[0])
    third = max(1, len(ids) // 3)
    l1 = [sysm.a.got[i][2] - sysm.a.sent[i] for i in ids[:third] if i in sysm.a.got]
    l3 = [sysm.a.got[i][2] - sysm.a.sent[i] for i in ids[-third:] if i in sysm.a.got]
    out: dict[str, Any] = {
        "label": label, "requests": len(ids), "offered_rps": None if rate is None else round(rate, 3),
        "sent_rps": round(len(ids) / send_span, 3), "answered": len(got), "failed": sum(1 for g in got if not g[0]),
        "lost": len(ids) - len(got), "throughput_rps": round(len(got) / span, 3),
        "audio_s_per_s": round(audio / span, 2), "audio_s": round(audio, 2),
        "send_span_s": round(send_span, 3), "served_audio_s_per_s": round(audio / send_span, 2),
        "p50_ms": _ms(percentile(lat, 50)), "p99_ms": _ms(percentile(lat, 99)), "max_ms": _ms(max(lat, default=None)),
        "first_third_p50_ms": _ms(percentile(l1, 50)), "last_third_p50_ms": _ms(percentile(l3, 50)),
    }
    if rate is not None:
        trail = percentile(l3, 50)
        out["keep_up_rps"] = round(keep_up_rps(len(got), send_span, trail), 3)
        out["sustained"] = sustained(len(ids) / send_span, out["keep_up_rps"], out["lost"],
                                     percentile(l1, 50), trail)
    if events is not None:
        ex = sysm.executions()
        dup = {i: ex[i] for i in ids if ex[i] > 1}
        out["kills"] = fired
        out["duplicated"] = len(dup)
        out["extra_answers"] = sum(n - 1 for n in dup.values())
        out["duplicate_ids"] = sorted(dup)[:10]
        out["lost_ids"] = [i for i in ids if i not in sysm.a.got][:10]
    # Drain what is left before the next phase (uncounted above), so a backlog never spills
    # into the next measurement; what only came now was late, not lost for good.
    missing = [i for i in ids if i not in sysm.a.got]
    drain_end = time.monotonic() + answer_timeout
    while missing and time.monotonic() < drain_end:
        sysm.keep_alive()
        sysm.pump(0.1)
        missing = [i for i in missing if i not in sysm.a.got]
    out["answered_late"] = out["lost"] - len(missing)
    out["breakdown"] = breakdown(sysm.a.paths[i] for i in ids if i in sysm.a.paths)
    if hasattr(sysm, "gc_pauses"):
        out["gc"] = sysm.gc_pauses(first_send, last_answer)
    out["never_answered"] = len(missing)
    return out


def run_bench(*, workers: int = 1, quick: bool = False, seed: int | None = None, run_s: float | None = None,
              fractions: list[float] | None = None, kills: int = 2, visibility_s: int | None = None,
              standby: bool = False, out_dir: Path = Path("out/bench-baseline")) -> dict[str, Any]:
    if importlib.util.find_spec("celery") is None:
        raise RuntimeError("celery is not installed: pip install -e '.[bench]'")
    from streams.bench.corpus import bench_texts
    from streams.bench.harness import cleanup_run, isolated, new_run_id, require_stack_up
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    t_start = time.monotonic()
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    run_s = run_s if run_s is not None else (8.0 if quick else 30.0)
    fractions = fractions or ([0.6, 1.0] if quick else [0.5, 0.75, 0.9, 1.0, 1.2])
    visibility_s = visibility_s if visibility_s is not None else (20 if quick else 60)
    burst_n = 10 if quick else 100  # ~10 s of work: the pipeline's own first-answer latency is a small part of it
    run_id = new_run_id()
    base = load_settings()
    require_stack_up(base)
    cpus = os.cpu_count() or 1
    threads = max(1, cpus // workers)
    s = isolated(base, run_id).replace(threads=threads)
    stack.ensure_topics(s)
    rng = random.Random(seed)
    pool = iter(bench_texts(6000 if quick else 20000, seed=seed))

    def texts(n: int) -> list[str]:
        return [next(pool) for _ in range(n)]

    prefix = f"blb-{run_id}"
    report: dict[str, Any] = {
        "run_id": run_id, "seed": seed, "quick": quick, "cpus": cpus, "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        "workers": workers, "ttsflow_standby": standby, "engine_threads": threads, "backend": s.engine.backend, "max_batch": s.batching.max_batch,
        "max_wait_ms": s.batching.max_wait_ms, "short_first": s.batching.short_first, "run_s": run_s, "fractions": fractions,
        "baseline_config": {"pool": "prefork", "concurrency": workers, "prefetch_multiplier": 1, "acks_late": True,
                            "reject_on_worker_lost": True, "visibility_timeout_s": visibility_s,
                            "broker": "redis db 2", "result_backend": "redis db 3"},
    }
    log_dir = out_dir / run_id
    sup = Supervisor(log_dir / "logs")
    systems: list[Any] = []
    try:
        _say(f"run {run_id}: starting ttsflow (1 stage + {workers} workers{', each with a warm standby' if standby else ''}) "
             f"and the Celery baseline "
             f"({workers} pool processes), engine threads {threads}")
        tf = _Ttsflow(s, workers, run_id, sup, standby=standby)
        systems.append(tf)
        bl = _Baseline(s, workers, run_id, log_dir / "logs", visibility_s)
        systems.append(bl)
        tf.wait_ready(240)
        bl.wait_ready(240)
        report["model"] = {"baseline": bl.model(), "ttsflow": tf.model()}
        for sysm in systems:  # warm-up (first Kafka/Redis connections, first inference)
            _phase(sysm, "warm", texts(3), None, answer_timeout=120, prefix=prefix)
        warm_texts = texts(4 if quick else 24)  # a burst to a steady state before the one that measures
        for sysm in systems:
            _phase(sysm, "warmburst", warm_texts, None, answer_timeout=300, prefix=prefix)
        res: dict[str, dict[str, Any]] = {x.name: {"guarantee": x.guarantee, "rates": []} for x in systems}

        # 1) burst: first capacity estimate
        burst_texts = texts(burst_n)
        for sysm in systems:
            _say(f"{sysm.name}: burst of {burst_n}")
            res[sysm.name]["burst"] = _phase(sysm, "burst", burst_texts, None, answer_timeout=300, prefix=prefix)
        cap = {x.name: max(0.05, res[x.name]["burst"]["throughput_rps"]) for x in systems}

        # 2) open loop at fractions of the estimate
        for name, steps in ramp(systems, cap, fractions, texts, rng, run_s, prefix, "r").items():
            res[name]["rates"] += steps

        for sysm in systems:
            ok = [p for p in res[sysm.name]["rates"] if p["sustained"]]
            best = max(ok, key=lambda p: p["sent_rps"]) if ok else None
            # a sustained run served every arrival as it came: its rate is the arrival rate achieved
            res[sysm.name]["max_sustained"] = None if best is None else {
                "requests_per_s": best["sent_rps"], "audio_s_per_s": best["served_audio_s_per_s"],
                "completion_rps": best["throughput_rps"], "offered_rps": best["offered_rps"],
                "phase": best["label"]}

        def capacity(name: str) -> float:
            ms = res[name]["max_sustained"]
            return float(ms["requests_per_s"]) if ms else 0.5 * cap[name]  # none sustained: half the burst

        # 3) latency at 70% of the system's own capacity
        n70 = {x.name: max(6, int(0.7 * capacity(x.name) * run_s)) for x in systems}
        shared = texts(max(n70.values()))
        unit = unit_gaps(rng, max(n70.values()))
        for sysm in systems:
            rate = 0.7 * capacity(sysm.name)
            _say(f"{sysm.name}: 70% run, {n70[sysm.name]} requests at {rate:.2f}/s")
            res[sysm.name]["at_70"] = _phase(sysm, "p70", shared[:n70[sysm.name]], schedule(unit, n70[sysm.name], rate),
                                             answer_timeout=max(120.0, 4 * run_s), prefix=prefix)

        # 4) SIGKILL mid-run
        kill_s = max(run_s, 15.0)
        # Celery brings a dead node's unacked tasks back only after visibility_timeout, and
        # kombu scans for them on every 10th idle poll: leave it room before calling them lost.
        kill_deadline = 2.0 * visibility_s + 120.0
        n_most = max(max(6, int(0.7 * capacity(x.name) * kill_s)) for x in systems)
        shared, unit = texts(n_most), unit_gaps(rng, n_most)
        for sysm in systems:
            rate = 0.7 * capacity(sysm.name)
            n_kill = max(6, int(rate * kill_s))
            window = n_kill / rate
            events: list[tuple[float, Callable[[], str]]] = [
                ((j + 1) * window / (kills + 1), functools.partial(sysm.kill, j)) for j in range(kills)]
            _say(f"{sysm.name}: kill run, {n_kill} requests at {rate:.2f}/s, {kills} SIGKILLs")
            res[sysm.name]["kill"] = _phase(sysm, "kill", shared[:n_kill], schedule(unit, n_kill, rate), events=events,
                                            answer_timeout=kill_deadline, prefix=prefix)
            res[sysm.name]["kill"]["answer_deadline_s"] = kill_deadline
        # duplicates outside the kill run (should be none for either)
        for sysm in systems:
            ex = sysm.executions()
            res[sysm.name]["duplicates_without_kills"] = sum(
                1 for rid, c in ex.items() if c > 1 and "-kill-" not in rid)
        report["systems"] = res
        report["ratios"] = _ratios(res)
    finally:
        for sysm in systems:
            with contextlib.suppress(Exception):
                sysm.close()
        sup.stop_all()
        cleanup_run(s, _say)
    report["logs"] = str(log_dir / "logs")
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    return report


def _ratios(res: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    tf, bl = res["ttsflow"], res["baseline"]

    def r(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else round(a / b, 3)

    ms_t, ms_b = tf.get("max_sustained") or {}, bl.get("max_sustained") or {}
    return {
        "max_sustained_rps": r(ms_t.get("requests_per_s"), ms_b.get("requests_per_s")),
        "max_sustained_audio_s_per_s": r(ms_t.get("audio_s_per_s"), ms_b.get("audio_s_per_s")),
        "burst_rps": r(tf["burst"]["throughput_rps"], bl["burst"]["throughput_rps"]),
        "p50_at_70": r(tf["at_70"]["p50_ms"], bl["at_70"]["p50_ms"]),
        "p99_at_70": r(tf["at_70"]["p99_ms"], bl["at_70"]["p99_ms"]),
        "kill_p50": r(tf["kill"]["p50_ms"], bl["kill"]["p50_ms"]),
        "kill_p99": r(tf["kill"]["p99_ms"], bl["kill"]["p99_ms"]),
    }


def _table(r: dict[str, Any]) -> str:
    lines = [f"{'':10} {'max rps':>8} {'audio s/s':>9} {'p50@70':>8} {'p99@70':>8} {'kill lost':>9} {'kill dup':>8}"]
    for name, x in r["systems"].items():
        ms = x.get("max_sustained") or {}
        lines.append(f"{name:10} {ms.get('requests_per_s', '-')!s:>8} {ms.get('audio_s_per_s', '-')!s:>9} "
                     f"{x['at_70']['p50_ms']!s:>8} {x['at_70']['p99_ms']!s:>8} {x['kill']['lost']:>9} "
                     f"{x['kill']['duplicated']:>8}")
    lines.append(f"ratios ttsflow/baseline: {r['ratios']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench baseline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1, help="worker processes for each system (ttsflow adds 1 stage)")
    ap.add_argument("--quick", action="store_true", help="2 rates, 8 s runs: about 3-4 minutes")
    ap.add_argument("--seconds", type=float, default=None, help="length of each open-loop run (default 30, quick 8)")
    ap.add_argument("--fractions", default=None,
                    help="open-loop rates as fractions of the burst capacity, comma separated "
                         "(default 0.5,0.75,0.9,1.0,1.2; quick 0.6,1.0)")
    ap.add_argument("--kills", type=int, default=2, help="SIGKILLs in the kill run")
    ap.add_argument("--standby", action="store_true",
                    help="ttsflow: each worker with a warm standby (TTS_WORKER_SLOTS); a kill's restart becomes the "
                         "new standby")
    ap.add_argument("--visibility-timeout", type=int, default=None,
                    help="baseline broker visibility timeout, s (default 60, quick 20)")
    ap.add_argument("--seed", type=int, default=None, help="corpus and arrival seed (default: random)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the whole benchmark N times; the JSON then has each figure's median and spread")
    ap.add_argument("--json", action="store_true", help="print only the JSON object (always the last line)")
    ns = ap.parse_args(argv)
    fr = [float(x) for x in ns.fractions.split(",")] if ns.fractions else None
    if ns.workers < 1 or ns.kills < 0 or ns.repeat < 1 or (fr is not None and not all(0 < f <= 5 for f in fr)):
        print("ttsflow bench baseline: --workers >= 1, --kills >= 0, --repeat >= 1, 0 < fractions <= 5",
              file=sys.stderr)
        return 2
    from streams.bench.tail import run_repeats

    def one(k: int) -> dict[str, Any]:
        return run_bench(workers=ns.workers, quick=ns.quick, seed=None if ns.seed is None else ns.seed + k,
                         run_s=ns.seconds, fractions=fr, kills=ns.kills, visibility_s=ns.visibility_timeout,
                         standby=ns.standby)

    return run_repeats("baseline", ns.repeat, one, repeat_summary, _table, as_json=ns.json)


def repeat_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread over the repeats of every figure a claim rests on."""
    from streams.bench.tail import summarize_repeats

    figures: dict[str, Any] = {"loadavg_1m": lambda r: r["loadavg_1m_at_start"]}
    for k in ("max_sustained_rps", "burst_rps", "p50_at_70", "p99_at_70", "kill_p50", "kill_p99"):
        figures[f"ratio.{k}"] = lambda r, k=k: r["ratios"][k]
    for name in ("ttsflow", "baseline"):
        figures[f"max_sustained_rps.{name}"] = lambda r, name=name: r["systems"][name]["max_sustained"]["requests_per_s"]
        for ph in ("at_70", "kill"):
            for q in ("p50_ms", "p99_ms"):
                figures[f"{ph}.{q}.{name}"] = lambda r, name=name, ph=ph, q=q: r["systems"][name][ph][q]
        figures[f"kill.lost.{name}"] = lambda r, name=name: r["systems"][name]["kill"]["never_answered"]
        figures[f"kill.duplicated.{name}"] = lambda r, name=name: r["systems"][name]["kill"]["duplicated"]
    return summarize_repeats(runs, figures)
