"""``ttsflow bench soak``: memory over time of one worker serving many requests.

One stage and one worker on topics of their own; ``--requests`` requests are kept flowing
closed-loop (at most ``--window`` unanswered at a time, so the
worker is busy all along without a backlog growing in Kafka). The worker's resident set
(``VmRSS`` of ``/proc/<pid>/status``) is sampled every ``--sample-s`` seconds. Texts are fresh (nothing cached) except a
``--repeat`` fraction that reuses an earlier text under a new request id: those take the
cache path (Redis hit, S3 HEAD, joined object found), so a long soak fits in less time on a
slow machine while every request still crosses the stage, the ledger, the joiner and a
transaction; the fresh ones keep the engine, the uploads and the joins working.

Verdict: after a warm-up (the first ``--warmup`` fraction of the requests: model arenas,
librdkafka buffers, thread pools reach their working size) the RSS must not grow by 5% or
more: *growth* compares the median of the last 10% of samples with the median of the
first 10% after warm-up. Also reported: the RSS curve at every tenth of the run, the
peak (``VmHWM``), a least-squares slope in MiB per 1000 requests after warm-up, the
stage's RSS alongside, and that every request was answered once and ok. The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "rss_verdict", "run_soak"]

GROWTH_LIMIT = 0.05


def _say(msg: str) -> None:
    print(f"bench soak: {msg}", file=sys.stderr, flush=True)


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    n = len(ys)
    return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


def rss_verdict(samples: list[tuple[int, float]], total: int, warmup: float) -> dict[str, Any]:
    """From ``(requests answered, RSS MiB)`` samples: growth after warm-up and the curve.

    Pure, so it is unit-tested: the warm-up ends when ``warmup * total`` requests are answered;
    growth = median of the last 10% of later samples / median of their first 10% - 1."""
    after = [(n, r) for n, r in samples if n >= warmup * total]
    if len(after) < 4:
        return {"ok": None, "reason": f"only {len(after)} samples after warm-up", "samples": len(samples)}
    k = max(1, len(after) // 10)
    start, end = _median([r for _, r in after[:k]]), _median([r for _, r in after[-k:]])
    growth = end / start - 1 if start > 0 else 0.0
    xs, ys = [n for n, _ in after], [r for _, r in after]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    curve = []
    for tenth in range(11):
        target = tenth * total / 10
        near = min(samples, key=lambda s: abs(s[0] - target))
        curve.append({"answered": near[0], "rss_mib": near[1]})
    return {"ok": growth < GROWTH_LIMIT, "growth_pct": round(100 * growth, 2), "limit_pct": 100 * GROWTH_LIMIT,
            "rss_after_warmup_mib": round(start, 1), "rss_end_mib": round(end, 1),
            "rss_min_mib": round(min(r for _, r in samples), 1), "rss_max_mib": round(max(r for _, r in samples), 1),
            "slope_mib_per_1000_requests": round(slope * 1000, 3), "samples": len(samples),
            "samples_after_warmup": len(after), "curve": curve}


def run_soak(*, requests: int = 10_000, window: int = 16, warmup: float = 0.1, sample_s: float = 1.0,
             repeat: float = 0.0,
             seed: int | None = None, timeout_s: float = 600.0, out_dir: Path = Path("out/bench-soak")) -> dict[str, Any]:
    from schemas import Request, SchemaError, decode_completion
    from streams.bench.corpus import bench_texts, encode_request
    from streams.bench.harness import (
        Publisher,
        TopicReader,
        cleanup_run,
        isolated,
        new_run_id,
        proc_status_mib,
        require_stack_up,
    )
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    t_start = time.monotonic()
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    run_id = new_run_id()
    base = load_settings()
    require_stack_up(base)
    s = isolated(base, run_id)
    stack.ensure_topics(s)
    rng = random.Random(seed)
    texts = bench_texts(requests, seed=seed, per_text=(1, 2))
    users = [f"soak-user-{i:02d}" for i in range(16)]
    fresh_ids = 0
    report: dict[str, Any] = {"run_id": run_id, "seed": seed, "requests": requests, "window": window, "repeat": repeat,
                              "warmup_fraction": warmup, "backend": s.engine.backend, "max_batch": s.batching.max_batch,
                              "cpus": os.cpu_count(), "loadavg_1m_at_start": round(os.getloadavg()[0], 2)}
    sup = Supervisor(out_dir / run_id / "logs")
    pub = reader = None
    try:
        stage = sup.stage("soak-stage", s)
        worker = sup.worker("soak-worker", s.replace(transactional_id=f"ttsflow-soak-{run_id}"))
        for p in (stage, worker):
            sup.wait_ready(p, timeout=240)
        pub = Publisher(s.kafka)
        reader = TopicReader(s.kafka, s.kafka.topic_completed, start="end")
        sent: dict[str, float] = {}
        answers: dict[str, int] = {}
        failed = 0
        samples: list[tuple[int, float]] = []
        stage_rss: list[float] = []
        next_sample = time.monotonic()
        last_progress = time.monotonic()
        i = 0
        t_first = time.monotonic()
        while len(answers) < requests:
            while i < requests and i - len(answers) < window:
                rid = f"soak-{run_id}-{i:06d}"
                if i >= 100 and rng.random() < repeat:
                    text = texts[rng.randrange(fresh_ids)]  # answered earlier: the cache path
                else:
                    text = texts[fresh_ids]
                    fresh_ids += 1
                req = Request(request_id=rid, user_id=rng.choice(users), text=text)
                sent[rid] = pub.publish(s.kafka.topic_requests, req.user_id.encode(), encode_request(req))
                i += 1
            pub.flush(30)
            for rec in reader.poll(0.2):
                try:
                    c = decode_completion(rec.value)
                except SchemaError:
                    continue
                if c.request_id in sent:
                    if c.request_id not in answers:
                        last_progress = time.monotonic()
                        failed += c.status != "ok"
                    answers[c.request_id] = answers.get(c.request_id, 0) + 1
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + sample_s
                rss = proc_status_mib(worker.pid, "VmRSS")
                if rss is not None:
                    samples.append((len(answers), rss))
                srss = proc_status_mib(stage.pid, "VmRSS")
                if srss is not None:
                    stage_rss.append(srss)
                if len(samples) % 60 == 0:
                    _say(f"{len(answers)}/{requests} answered, worker RSS {rss} MiB")
            if now - last_progress > timeout_s:
                raise TimeoutError(f"no completion for {timeout_s:.0f}s at {len(answers)}/{requests}")
            sup.check_alive()
        wall = time.monotonic() - t_start
        report["fresh_texts"] = fresh_ids
        report["answered"] = len(answers)
        report["failed"] = failed
        report["duplicated"] = sum(1 for n in answers.values() if n > 1)
        report["worker_restarts"] = worker.starts - 1
        report["worker_rss"] = rss_verdict(samples, requests, warmup)
        report["worker_peak_mib"] = proc_status_mib(worker.pid, "VmHWM")
        report["stage_rss"] = {"first_mib": stage_rss[0] if stage_rss else None,
                               "last_mib": stage_rss[-1] if stage_rss else None,
                               "max_mib": max(stage_rss) if stage_rss else None}
        report["throughput_rps"] = round(requests / (time.monotonic() - t_first), 2)
        report["wall_s"] = round(wall, 1)
        report["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
        report["logs"] = str(out_dir / run_id / "logs")
    finally:
        if reader is not None:
            reader.close()
        sup.stop_all()
        cleanup_run(s, _say)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000, help="requests to serve (fresh 1-2 sentence texts)")
    ap.add_argument("--repeat", type=float, default=0.0,
                    help="fraction of requests reusing an earlier text (cache path); the rest are fresh")
    ap.add_argument("--window", type=int, default=16, help="most requests unanswered at a time (closed loop)")
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of the requests counted as warm-up")
    ap.add_argument("--sample-seconds", type=float, default=1.0, help="RSS sampling interval")
    ap.add_argument("--seed", type=int, default=None, help="corpus seed (default: random, so nothing is cached)")
    ap.add_argument("--json", action="store_true", help="print only the JSON object (always the last line)")
    ns = ap.parse_args(argv)
    if ns.requests < 10 or ns.window < 1 or not 0 <= ns.warmup < 0.9 or ns.sample_seconds <= 0 \
            or not 0 <= ns.repeat < 1:
        print("ttsflow bench soak: --requests >= 10, --window >= 1, 0 <= --warmup < 0.9, --sample-seconds > 0, 0 <= --repeat < 1",
              file=sys.stderr)
        return 2
    try:
        r = run_soak(requests=ns.requests, window=ns.window, warmup=ns.warmup, sample_s=ns.sample_seconds,
                     repeat=ns.repeat, seed=ns.seed)
    except Exception as e:
        print(f"ttsflow bench soak: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not ns.json:
        v = r["worker_rss"]
        print(f"{r['answered']} answered ({r['failed']} failed, {r['duplicated']} duplicated) at "
              f"{r['throughput_rps']}/s; worker RSS {v.get('rss_after_warmup_mib')} -> {v.get('rss_end_mib')} MiB "
              f"after warm-up ({v.get('growth_pct')}%, ok={v.get('ok')})")
    print(json.dumps(r))
    return 0
