"""Lag-based scaling: a deterministic simulation of KEDA's Kafka-scaler rule against a request-rate trace.

The rule itself (``keda_desired_replicas``, ``KedaRule``, ``partition_lag``) is
:mod:`streams.ops.keda`; ``ttsflow lag`` and this simulation both call it.

``simulate`` replays a request-rate trace (a diurnal day or a 10x burst) second by
second as a fluid queue: segments arrive at rate x segments-per-request, replicas that
are ready drain them at ``capacity`` segments/s each, limited by the partition count and
by how unevenly ``P`` partitions spread over ``R`` consumers (the busiest consumer owns
``ceil(P/R)`` partitions). The lag KEDA sees includes work consumed but not yet
committed (``inflight_s`` x arrival rate): a transactional worker commits after the
upload. KEDA polls every ``polling_interval``; the HPA scales up at
once (bounded by its default policy: double or +4 pods per 15 s), scales down only to
the highest recommendation of the last ``cooldown`` seconds (stabilization window); a
new pod serves after ``startup_s``; every membership change pauses the group for
``rebalance_s``. It is pure and deterministic: same arguments, same output.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from streams.ops.keda import KedaRule, keda_desired_replicas

__all__ = ["KedaRule", "SimResult", "keda_desired_replicas", "main", "simulate"]

_DAY_S = 86_400


# --- traces --------------------------------------------------------------------------

def diurnal_trace(peak_per_hour: float, *, trough_fraction: float = 0.2,
                  peak_hour: float = 16.0) -> Callable[[float], float]:
    """Requests/s over a day: a cosine from ``trough_fraction`` x peak (12 h before the
    peak) up to ``peak_per_hour`` at ``peak_hour``. Mean = (1 + trough) / 2 x peak."""
    peak = peak_per_hour / 3600.0

    def rate(t: float) -> float:
        phase = 2 * math.pi * ((t / 3600.0) - peak_hour) / 24.0
        return peak * (trough_fraction + (1 - trough_fraction) * (1 + math.cos(phase)) / 2)

    return rate


def burst_trace(base_per_hour: float, *, factor: float = 10.0, start_s: float = 3600.0,
                length_s: float = 600.0) -> Callable[[float], float]:
    """Requests/s: ``base_per_hour`` steady, ``factor`` times that for ``length_s``."""
    base = base_per_hour / 3600.0

    def rate(t: float) -> float:
        return base * factor if start_s <= t < start_s + length_s else base

    return rate


# --- simulation ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SimParams:
    trace: str = "diurnal"
    rate_per_hour: float = 1e6
    capacity: float = 50.0
    segments_per_request: float = 3.0
    partitions: int = 4
    rule: KedaRule = field(default_factory=KedaRule)
    polling_interval_s: int = 30
    cooldown_s: int = 300
    startup_s: int = 60
    rebalance_s: int = 5
    inflight_s: float = 2.0  # consumed but not yet committed: counted as lag by Kafka
    duration_s: int = 0  # 0: the trace's natural length (a day, or 3 h for a burst)
    sample_s: int = 0  # 0: 24 samples over the run
    initial_replicas: int = -1  # -1: what the rule asks for at t=0 with zero lag, at least 1

    def __post_init__(self) -> None:
        if self.capacity <= 0 or self.segments_per_request <= 0 or self.rate_per_hour < 0:
            raise ValueError("capacity and segments-per-request must be > 0, rate >= 0")
        if self.partitions < 1 or self.polling_interval_s < 1:
            raise ValueError("partitions and polling interval must be >= 1")
        if self.trace not in ("diurnal", "burst"):
            raise ValueError("trace must be diurnal or burst")


@dataclass(frozen=True, slots=True)
class SimResult:
    params: dict[str, object]
    samples: list[dict[str, float]]
    peak_lag_segments: float
    final_lag_segments: float
    worst_queue_delay_s: float
    p99_queue_delay_s: float
    delay_unbounded: bool  # some arrivals were still queued when the run ended
    max_replicas: int
    replica_hours: float
    served_fraction: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _effective_consumers(ready: int, partitions: int) -> float:
    """Throughput in replica units of ``ready`` consumers over ``partitions`` equally loaded
    partitions: the busiest consumer owns ceil(P/R) of them and saturates first."""
    r = min(ready, partitions)
    if r <= 0:
        return 0.0
    return partitions / math.ceil(partitions / r)


def simulate(p: SimParams) -> SimResult:
    """Run the fluid simulation (1 s steps); see the module docstring for the model."""
    if p.trace == "diurnal":
        rate_fn = diurnal_trace(p.rate_per_hour)
        duration = p.duration_s or _DAY_S
    else:
        rate_fn = burst_trace(p.rate_per_hour)
        duration = p.duration_s or 3 * 3600
    sample_every = p.sample_s or max(duration // 24, 1)
    rule = p.rule

    lag = 0.0
    cum_in = 0.0
    cum_out = 0.0
    arrivals: list[float] = []  # cumulative arrivals at the end of each second
    served: list[float] = []  # cumulative service at the end of each second
    if p.initial_replicas >= 0:
        replicas = p.initial_replicas
    else:  # a warm start: the trace's first second already served by enough ready pods
        replicas = math.ceil(rate_fn(0) * p.segments_per_request / p.capacity)
        if not rule.allow_idle_consumers:
            replicas = min(replicas, p.partitions)
        replicas = min(max(replicas, rule.min_replicas, 1), rule.max_replicas)
    ready = replicas
    pending: deque[int] = deque()  # ready-at times of pods still starting, oldest first
    paused_until = 0
    recs: deque[tuple[int, int]] = deque([(0, replicas)])  # (time, recommendation): stabilization window
    last_up = -10**9
    desired = replicas
    samples: list[dict[str, float]] = []
    peak_lag = 0.0
    max_reps = replicas
    replica_seconds = 0.0

    for t in range(duration):
        # 1) KEDA polls the lag and the HPA acts on its recommendation.
        if t % p.polling_interval_s == 0:
            seen = lag + (rate_fn(t) * p.segments_per_request * p.inflight_s if ready else 0.0)
            desired = keda_desired_replicas(seen, partitions=p.partitions, rule=rule)
            recs.append((t, desired))
            while recs and recs[0][0] < t - p.cooldown_s:
                recs.popleft()
            target = desired
            if desired < replicas:
                # scale-down stabilization: the highest recommendation of the window
                target = max(r for _, r in recs)
            elif desired > replicas:
                if t - last_up < 15:
                    target = replicas
                else:  # HPA default scale-up policy: max(+100 %, +4 pods) per 15 s
                    target = min(desired, max(2 * replicas, replicas + 4))
                    last_up = t
            if target > replicas:
                pending.extend([t + p.startup_s] * (target - replicas))
            elif target < replicas:
                drop = replicas - target
                while drop and pending:  # a ReplicaSet deletes pods that are not ready first
                    pending.pop()
                    drop -= 1
                if drop:
                    ready -= drop
                    paused_until = max(paused_until, t + p.rebalance_s)
            replicas = target
        while pending and pending[0] <= t:
            pending.popleft()
            ready += 1
            paused_until = max(paused_until, t + p.rebalance_s)  # a joiner triggers a rebalance
        # 2) arrivals and service in this second.
        a = rate_fn(t) * p.segments_per_request
        cap = 0.0 if t < paused_until else _effective_consumers(ready, p.partitions) * p.capacity
        out = min(lag + a, cap)
        lag = lag + a - out
        cum_in += a
        cum_out += out
        arrivals.append(cum_in)
        served.append(cum_out)
        peak_lag = max(peak_lag, lag)
        max_reps = max(max_reps, replicas)
        replica_seconds += replicas
        if t % sample_every == 0:
            samples.append({"t_s": t, "hour": round(t / 3600, 2), "requests_per_s": round(rate_fn(t), 2),
                            "lag_segments": round(lag, 1), "desired": desired, "replicas": replicas,
                            "ready": ready})

    worst, p99, unbounded = _queue_delays(arrivals, served)
    return SimResult(
        params={**{k: v for k, v in asdict(p).items() if k != "rule"}, **asdict(rule), "duration_s": duration},
        samples=samples, peak_lag_segments=round(peak_lag, 1), final_lag_segments=round(lag, 1),
        worst_queue_delay_s=worst, p99_queue_delay_s=p99, delay_unbounded=unbounded, max_replicas=max_reps,
        replica_hours=round(replica_seconds / 3600, 2),
        served_fraction=round(cum_out / cum_in, 6) if cum_in else 1.0)


def _queue_delays(arrivals: Sequence[float], served: Sequence[float]) -> tuple[float, float, bool]:
    """FIFO delay of the work arriving in each second: the time until cumulative service
    reaches cumulative arrivals. Returns (worst, arrival-weighted p99, unbounded)."""
    n = len(arrivals)
    delays: list[tuple[float, float]] = []  # (delay, weight)
    j = 0
    unbounded = False
    prev = 0.0
    for t in range(n):
        need = arrivals[t] - 1e-9
        while j < n and served[j] < need:
            j += 1
        weight = arrivals[t] - prev
        prev = arrivals[t]
        if j >= n:
            unbounded = True
            delays.append((float(n - t), weight))
        else:
            delays.append((float(max(j - t, 0)), weight))
    if not delays:
        return 0.0, 0.0, False
    worst = max(d for d, _ in delays)
    total = sum(w for _, w in delays)
    acc = 0.0
    p99 = 0.0
    for d, w in sorted(delays):
        acc += w
        if total and acc >= 0.99 * total:
            p99 = d
            break
    return worst, p99, unbounded


# --- recommendation ------------------------------------------------------------------

def recommend(p: SimParams, *, target_delay_s: float, headroom: float = 1.25) -> dict[str, object]:
    """Partitions, lag threshold and replica floor that keep the worst queueing delay under
    the target, at the fewest replica-hours among those tried.

    Starting point from the steady state: the HPA settles where lag ~= replicas x
    threshold while replicas drain ``capacity`` each, so delay ~= threshold / capacity;
    partitions must cover the peak segment rate / capacity (x ``headroom``). Candidates
    around that point (threshold x 4 ... / 8, partitions x 1 ... x 2, replica floor 0 or
    a quarter of the peak) are checked by simulation, because flapping and pod startup,
    not the steady state, usually set the worst delay.
    """
    peak_rate = p.rate_per_hour / 3600.0 * (10.0 if p.trace == "burst" else 1.0)
    peak_segments = peak_rate * p.segments_per_request
    need = max(1, math.ceil(peak_segments * headroom / p.capacity))
    base_threshold = max(1, int(target_delay_s * p.capacity))
    tried: list[dict[str, object]] = []
    best: dict[str, object] | None = None
    for floor in (p.rule.min_replicas, max(p.rule.min_replicas, need // 4)):
        for mult in (1.0, 1.5, 2.0):
            partitions = math.ceil(need * mult)
            for tmult in (4.0, 2.0, 1.0, 0.5, 0.25, 0.125):
                threshold = max(1, int(base_threshold * tmult))
                rule = KedaRule(lag_threshold=threshold,
                                activation_lag_threshold=min(p.rule.activation_lag_threshold, threshold),
                                allow_idle_consumers=p.rule.allow_idle_consumers, min_replicas=floor,
                                max_replicas=max(p.rule.max_replicas, partitions))
                r = simulate(dataclasses.replace(p, partitions=partitions, rule=rule))
                row: dict[str, object] = {
                    "partitions": partitions, "lag_threshold": threshold, "min_replicas": floor,
                    "worst_queue_delay_s": r.worst_queue_delay_s, "p99_queue_delay_s": r.p99_queue_delay_s,
                    "max_replicas": r.max_replicas, "replica_hours": r.replica_hours,
                    "met": r.worst_queue_delay_s <= target_delay_s}
                tried.append(row)
                if row["met"] and (best is None or r.replica_hours < best["replica_hours"]):  # type: ignore[operator]
                    best = row
        if best is not None:
            break
    out: dict[str, object] = {"target_delay_s": target_delay_s, "peak_segments_per_s": round(peak_segments, 1),
                              "replicas_at_peak": need, "met": best is not None, "tried": len(tried)}
    if best is not None:
        out.update({k: best[k] for k in ("partitions", "lag_threshold", "min_replicas", "worst_queue_delay_s",
                                          "p99_queue_delay_s", "max_replicas", "replica_hours")})
        out["max_replica_count"] = best["partitions"]
    else:
        closest = min(tried, key=lambda r: r["worst_queue_delay_s"])  # type: ignore[arg-type,return-value]
        out["closest"] = closest
        out["hint"] = "pod startup and polling alone exceed the target: raise the replica floor or cut startup time"
    return out


# --- CLI -----------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ttsflow scale simulate",
                                 description="Replay a request-rate trace against KEDA's Kafka rule.")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--trace", choices=("diurnal", "burst"), default="diurnal",
                    help="diurnal: a day peaking at --rate-per-hour; burst: 3 h at that rate with 10 min at 10x")
    ap.add_argument("--rate-per-hour", type=float, default=1e6, help="peak (diurnal) or base (burst) requests/hour")
    ap.add_argument("--capacity", type=float, default=50.0,
                    help="segments/s one worker replica sustains (default 50: an assumed GPU replica; "
                         "measure yours with ttsflow bench engine/pipeline)")
    ap.add_argument("--segments-per-request", type=float, default=3.0, help="mean segments per request")
    ap.add_argument("--partitions", type=int, default=None, help="partitions of tts.segments (default TTS_PARTITIONS)")
    ap.add_argument("--lag-threshold", type=int, default=None,
                    help="KEDA lagThreshold, segments per replica (default TTS_LAG_THRESHOLD)")
    ap.add_argument("--activation", type=int, default=None,
                    help="KEDA activationLagThreshold (default TTS_ACTIVATION_LAG_THRESHOLD)")
    ap.add_argument("--allow-idle-consumers", action="store_true")
    ap.add_argument("--min-replicas", type=int, default=0)
    ap.add_argument("--max-replicas", type=int, default=100)
    ap.add_argument("--polling-interval", type=int, default=30, help="KEDA pollingInterval, s")
    ap.add_argument("--cooldown", type=int, default=300, help="scale-down stabilization window, s")
    ap.add_argument("--startup-s", type=int, default=60, help="seconds from pod creation to consuming")
    ap.add_argument("--rebalance-s", type=int, default=5, help="group pause per membership change, s")
    ap.add_argument("--inflight-s", type=float, default=2.0,
                    help="seconds a consumed segment stays uncommitted (batch wait + synth + upload + commit)")
    ap.add_argument("--duration-s", type=int, default=0, help="run length (0: a day, or 3 h for burst)")
    ap.add_argument("--sample-s", type=int, default=0, help="sampling period of the printed series")
    ap.add_argument("--target-delay-s", type=float, default=120.0, help="queueing delay the recommendation aims for")
    return ap


def main(argv: list[str]) -> int:
    usage = "usage: ttsflow scale simulate [--json] [--trace diurnal|burst] [...]; ttsflow scale simulate --help"
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] != "simulate":
        print(usage, file=sys.stderr)
        return 2
    a = _parser().parse_args(argv[1:])
    from streams.settings import load_settings

    st = load_settings()
    partitions = st.kafka.partitions if a.partitions is None else a.partitions
    a.lag_threshold = st.scaling.lag_threshold if a.lag_threshold is None else a.lag_threshold
    a.activation = st.scaling.activation_lag_threshold if a.activation is None else a.activation
    try:
        rule = KedaRule(lag_threshold=a.lag_threshold, activation_lag_threshold=a.activation,
                        allow_idle_consumers=a.allow_idle_consumers, min_replicas=a.min_replicas,
                        max_replicas=a.max_replicas)
        params = SimParams(trace=a.trace, rate_per_hour=a.rate_per_hour, capacity=a.capacity,
                           segments_per_request=a.segments_per_request, partitions=partitions, rule=rule,
                           polling_interval_s=a.polling_interval, cooldown_s=a.cooldown, startup_s=a.startup_s,
                           rebalance_s=a.rebalance_s, inflight_s=a.inflight_s, duration_s=a.duration_s, sample_s=a.sample_s)
    except ValueError as e:
        print(f"ttsflow scale: {e}", file=sys.stderr)
        return 2
    res = simulate(params)
    rec = recommend(params, target_delay_s=a.target_delay_s)
    if a.json:
        print(json.dumps({**res.to_dict(), "recommendation": rec}))
        return 0
    _print_human(res, rec)
    return 0


def _print_human(res: SimResult, rec: dict[str, object]) -> None:
    p = res.params
    print(f"trace={p['trace']} rate={p['rate_per_hour']:.0f}/h x {p['segments_per_request']} seg/req  "
          f"capacity={p['capacity']} seg/s/replica  partitions={p['partitions']}  "
          f"lagThreshold={p['lag_threshold']} activation={p['activation_lag_threshold']}")
    print(f"{'hour':>6} {'req/s':>8} {'lag':>10} {'desired':>7} {'replicas':>8} {'ready':>5}")
    for s in res.samples:
        print(f"{s['hour']:>6} {s['requests_per_s']:>8} {s['lag_segments']:>10} {s['desired']:>7} "
              f"{s['replicas']:>8} {s['ready']:>5}")
    more = " (lower bound: work still queued at the end)" if res.delay_unbounded else ""
    print(f"peak lag {res.peak_lag_segments:.0f} segments, final lag {res.final_lag_segments:.0f}; "
          f"worst queueing delay {res.worst_queue_delay_s:.0f} s{more}, p99 {res.p99_queue_delay_s:.0f} s; "
          f"max replicas {res.max_replicas}, {res.replica_hours} replica-hours")
    if rec.get("met"):
        print(f"recommendation: partitions={rec['partitions']} lagThreshold={rec['lag_threshold']} "
              f"minReplicaCount={rec['min_replicas']} maxReplicaCount={rec['max_replica_count']} keeps the worst queueing delay at "
              f"{rec['worst_queue_delay_s']:.0f} s (target {rec['target_delay_s']:.0f} s) at "
              f"{rec['replica_hours']} replica-hours (peak {rec['peak_segments_per_s']} segments/s, "
              f"{rec['replicas_at_peak']} replicas with headroom)")
        print(f"  ({rec['tried']} configurations simulated; "
              "rerun with --capacity from your own measurement)")
    else:
        c: dict[str, Any] = rec["closest"]  # type: ignore[assignment]
        print(f"recommendation: no configuration tried keeps the worst queueing delay under "
              f"{rec['target_delay_s']:.0f} s; closest: partitions={c['partitions']} "
              f"lagThreshold={c['lag_threshold']} minReplicaCount={c['min_replicas']} -> worst "
              f"{c['worst_queue_delay_s']:.0f} s, p99 {c['p99_queue_delay_s']:.0f} s, {c['replica_hours']} replica-hours. "
              f"{rec['hint']}")
