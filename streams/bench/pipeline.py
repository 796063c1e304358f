"""``ttsflow bench pipeline``: what Kafka, S3, Redis and transactions cost on top of the engine.

In one run, on one generated corpus (a fresh seed, so nothing is cached):

1. **engine**: the bare engine (``Engine.synthesize``, the settings' backend and
   ``max_batch``) on the segments the stage would cut from the corpus texts:
   audio seconds per second of wall time.
2. **pipeline**: the same texts through one stage and one worker (real processes, topics
   of their own), all published at once: from the first publish to the last committed
   completion seen by a ``read_committed`` reader. ``ratio`` = engine wall time /
   pipeline wall time for the same work (1.0: the pipeline costs nothing).
3. **open loop at 70%**: fresh texts arriving as a Poisson process at 0.7 x the capacity
   measured in 2; p50/p99 of publish-to-completion latency.
4. **cached**: the texts of 2 again under new request ids at the same arrival rate: every
   segment is a cache hit; p50/p99 of that path.

Phases 2 and 3 also give each process's CPU milliseconds per request (``cpu_ms_per_request``: the
worker, the stage and the local stack's broker, S3 server and Redis, which share the machine): what
the same kind of requests cost when they arrive one by one rather than all at once.

Latencies are what a client sees (its publish time to its receipt of the committed
completion). The machine is shared: read the ratio, not the absolute numbers. The last
line printed is one JSON object.

``--timestamps-cost``: instead, what word timings cost the worker. One stage and one worker;
rounds of fresh texts (nothing cached) alternate between requests without and with
``"timestamps": true`` (ABBA order, so a drift of the machine's load falls on both), each round
published at once and waited for. Per side: audio seconds per wall second and the worker's own
synthesis milliseconds per audio second (the completions' ``synth_ms``: model, DSP, words), the
worker process's CPU milliseconds per audio second (all its threads: front end, model, words,
uploads) and every process's (``machine_cpu_ms_per_audio_s``: worker, stage, broker, S3 server,
Redis, which share this machine's cores, so at saturation its throughput is their inverse); the
ratios with/without. Both sides of a round speak the same texts (a timed part has its own
address, so neither finds the other's in the cache, and each side's request objects are deleted
after its round, so the other side's join finds none to answer with): with fresh texts per side, the two sides'
audio differed by 3-13 % a run and so did their cost per audio second. A round is 40 requests by default: each round starts from an idle worker and
ends with its last request's join, transaction and read while the lanes idle, and with rounds of 12
(~1.4 s) that ramp and drain were a tenth of the round, so a timed request's few extra
milliseconds of join weighed several times their share of the work (quiet runs of 12: ratio
0.90-0.98 with the worker's CPU per audio second +0.4-2.4%). Then one long request with timestamps (``--long-chars``, its sentences
repeating so most parts come from the cache) gives the size of its word-timing object.
``paired`` sets each round beside the other side's round of the same pair (they ran back to back):
the median ratio, the geometric mean and its 95 % interval over the pairs, the run's own noise.
``--pin-worker`` puts the worker's threads alone on one CPU and every other process (stage, broker,
S3 server, Redis, this client) on the rest, so what the worker can do is not shared with the local
servers' work for the extra objects (a deployment's S3 runs elsewhere); the servers get every CPU
back at the end.
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

__all__ = ["main", "run_bench", "run_timestamps_cost"]


def _say(msg: str) -> None:
    print(f"bench pipeline: {msg}", file=sys.stderr, flush=True)


def _segments(texts: list[str], max_chars: int) -> list[str]:
    from streams.stage.text import normalize, split_segments

    return [seg for t in texts for seg in split_segments(normalize(t), max_chars)]


def bench_engine(settings: Any, texts: list[str]) -> dict[str, Any]:
    """Bare engine throughput on the segments of ``texts``, in ``max_batch`` chunks."""
    from engine import Failure, SynthItem, load_engine

    segs = _segments(texts, settings.stage.max_segment_chars)
    if settings.engine.backend == "kokoro":  # joined into the model store from its wheels, as the worker loads it
        from engine.reload import open_engine
        from engine.store import ModelStore

        eng = open_engine(ModelStore(settings.effective_model_dir).current("kokoro"), providers=settings.engine.providers,
                          threads=settings.engine.threads, max_batch=settings.batching.max_batch)
    else:
        eng = load_engine(settings.engine.backend, precision=settings.engine.precision, providers=settings.engine.providers,
                          threads=settings.engine.threads, max_batch=settings.batching.max_batch)
    try:
        voice = settings.engine.voice or eng.default_voice
        items = [SynthItem(s, voice) for s in segs]
        t0 = time.perf_counter()
        audio_s = 0.0
        failures = 0
        for k in range(0, len(items), settings.batching.max_batch):
            for r in eng.synthesize(items[k:k + settings.batching.max_batch]):
                if isinstance(r, Failure):
                    failures += 1
                else:
                    audio_s += r.duration_s
        wall = time.perf_counter() - t0
        return {"segments": len(segs), "failures": failures, "audio_s": round(audio_s, 2),
                "wall_s": round(wall, 3), "audio_s_per_s": round(audio_s / wall, 2),
                "cold_start_s": round(eng.cold_start_s or 0.0, 2), "model": eng.info.name,
                "provider": eng.info.provider, "max_batch": settings.batching.max_batch}
    finally:
        eng.close()


class _Driver:
    """Publishes requests and matches committed completions to them."""

    def __init__(self, settings: Any) -> None:
        from streams.bench.harness import Publisher, TopicReader

        self.s = settings
        self.pub = Publisher(settings.kafka)
        self.reader = TopicReader(settings.kafka, settings.kafka.topic_completed, start="end")
        self.sent: dict[str, float] = {}
        self.got: dict[str, tuple[Any, float]] = {}

    def publish(self, req: Any) -> None:
        from streams.bench.corpus import encode_request

        self.sent[req.request_id] = self.pub.publish(self.s.kafka.topic_requests, req.user_id.encode(), encode_request(req))

    def pump(self, timeout: float = 0.05) -> None:
        from schemas import SchemaError, decode_completion

        for rec in self.reader.poll(timeout):
            try:
                c = decode_completion(rec.value)
            except SchemaError:
                continue
            if c.request_id in self.sent and c.request_id not in self.got:
                self.got[c.request_id] = (c, rec.received)

    def wait(self, ids: list[str], timeout: float, sup: Any) -> None:
        self.pub.flush(60)
        deadline = time.monotonic() + timeout
        while not all(i in self.got for i in ids):
            sup.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sum(i not in self.got for i in ids)} of {len(ids)} requests "
                                   f"unanswered after {timeout:.0f}s")
            self.pump(0.2)

    def open_loop(self, reqs: list[Any], rate: float, rng: random.Random, timeout: float, sup: Any) -> float:
        """Publish ``reqs`` as a Poisson process of ``rate`` per second; the achieved rate."""
        t0 = time.monotonic()
        due = t0
        for r in reqs:
            due += rng.expovariate(rate)
            while time.monotonic() < due:
                self.pump(min(0.05, max(0.0, due - time.monotonic())))
            self.publish(r)
        achieved = len(reqs) / max(1e-9, time.monotonic() - t0)
        self.wait([r.request_id for r in reqs], timeout, sup)
        return achieved

    def latencies(self, ids: list[str]) -> list[float]:
        return [self.got[i][1] - self.sent[i] for i in ids]

    def close(self) -> None:
        self.reader.close()


def _lat(xs: list[float]) -> dict[str, float | None]:
    from streams.bench.harness import percentile

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {"p50_ms": ms(percentile(xs, 50)), "p99_ms": ms(percentile(xs, 99)), "max_ms": ms(max(xs) if xs else None)}


def run_bench(*, requests: int = 60, open_loop_s: float = 30.0, load: float = 0.7, seed: int | None = None,
              out_dir: Path = Path("out/bench-pipeline"), timeout_s: float = 300.0,
              corpus: str = "en") -> dict[str, Any]:
    from schemas import Request
    from streams.bench.corpus import bench_texts, bench_texts_zh
    from streams.bench.harness import cleanup_run, isolated, new_run_id, require_stack_up
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    run_id = new_run_id()
    base = load_settings()
    require_stack_up(base)
    s = isolated(base, run_id)
    if corpus == "zh":  # Mandarin texts for the kokoro voice
        s = s.replace(backend="kokoro", backends="", voice="")
    stack.ensure_topics(s)
    rng = random.Random(seed)
    # One generator, three disjoint slices: saturation (also the engine's), open loop, warm-up.
    n_open = max(10, int(open_loop_s * 20))  # upper bound; trimmed once the rate is known
    texts = (bench_texts_zh if corpus == "zh" else bench_texts)(requests + n_open + 3, seed=seed)
    sat_texts, open_texts, warm_texts = texts[:requests], texts[requests:requests + n_open], texts[-3:]
    users = [f"bench-user-{i:02d}" for i in range(16)]

    def reqs(label: str, ts: list[str]) -> list[Request]:
        return [Request(request_id=f"bench-{run_id}-{label}-{i:05d}", user_id=rng.choice(users), text=t)
                for i, t in enumerate(ts)]

    report: dict[str, Any] = {"run_id": run_id, "seed": seed, "cpus": os.cpu_count(),
                              "backend": s.engine.backend, "corpus": corpus, "max_batch": s.batching.max_batch, "max_wait_ms": s.batching.max_wait_ms}
    _say(f"engine alone on {requests} texts")
    report["engine"] = bench_engine(s, sat_texts)
    sup = Supervisor(out_dir / run_id / "logs")
    driver: _Driver | None = None
    try:
        sup.stage("stage", s)
        sup.worker("worker", s.replace(transactional_id=f"ttsflow-bench-{run_id}"))
        for p in list(sup.procs.values()):
            sup.wait_ready(p, timeout=180)
        driver = _Driver(s)
        warm = reqs("warm", warm_texts)
        for r in warm:
            driver.publish(r)
        driver.wait([r.request_id for r in warm], timeout_s, sup)

        _say(f"pipeline, {requests} requests at once")
        sat = reqs("sat", sat_texts)
        cpu = _ProcessCpu(s, sup)
        t0 = time.time()
        for r in sat:
            driver.publish(r)
        driver.wait([r.request_id for r in sat], timeout_s, sup)
        wall = max(driver.got[r.request_id][1] for r in sat) - t0
        audio = sum(c.audio.duration_s for c, _ in (driver.got[r.request_id] for r in sat) if c.audio is not None)
        failed = sum(1 for r in sat if driver.got[r.request_id][0].status != "ok")
        capacity = requests / wall
        report["pipeline"] = {"requests": requests, "failed": failed, "audio_s": round(audio, 2),
                              "wall_s": round(wall, 3), "audio_s_per_s": round(audio / wall, 2),
                              "requests_per_s": round(capacity, 3), **_lat(driver.latencies([r.request_id for r in sat]))}
        report["pipeline"]["cpu_ms_per_request"] = cpu.per_request(requests)
        report["ratio"] = round(report["engine"]["wall_s"] / wall, 3)

        rate = load * capacity
        n = max(10, min(len(open_texts), int(rate * open_loop_s)))
        _say(f"open loop: {n} requests at {rate:.2f}/s ({load:.0%} of {capacity:.2f}/s)")
        op = reqs("open", open_texts[:n])
        cpu = _ProcessCpu(s, sup)
        achieved = driver.open_loop(op, rate, rng, timeout_s, sup)
        report["open_loop"] = {"load": load, "rate_rps": round(rate, 3), "achieved_rps": round(achieved, 3),
                               "requests": n, **_lat(driver.latencies([r.request_id for r in op])),
                               "cpu_ms_per_request": cpu.per_request(n)}

        cached = reqs("cached", [sat_texts[i % requests] for i in range(n)])
        _say(f"cached path: {n} repeated texts at {rate:.2f}/s")
        achieved = driver.open_loop(cached, rate, rng, timeout_s, sup)
        cs = [driver.got[r.request_id][0] for r in cached]
        report["cached"] = {"rate_rps": round(rate, 3), "achieved_rps": round(achieved, 3), "requests": n,
                            "segments": sum(c.segments for c in cs),
                            "cached_segments": sum(c.cached_segments for c in cs),
                            **_lat(driver.latencies([r.request_id for r in cached]))}
    finally:
        if driver is not None:
            driver.close()
        sup.stop_all()
        cleanup_run(s, _say)
    return report


def _pin_worker(pids: dict[str, int | None], cpus: set[int], pin: Any) -> dict[str, Any]:
    """The worker's threads onto the lowest of ``cpus``, every other process's onto the rest; what was
    pinned where. With fewer than two CPUs nothing is pinned."""
    if len(cpus) < 2:
        return {"worker": None, "others": None}
    first = min(cpus)
    rest = cpus - {first}
    done = {name: pin(pid, {first} if name == "worker" else rest) for name, pid in pids.items()}
    return {"worker": [first], "others": sorted(rest), "pinned": sorted(n for n, ok in done.items() if ok)}


class _ProcessCpu:
    """CPU seconds each process of the run spends from now (its worker and stage, and the local
    stack's servers, which share the machine): ``per_request(n)`` gives milliseconds per request.
    A phase's requests arriving one by one cost the stage and the broker more than the same requests
    sent at once (fewer, fuller batches and transactions): this says how much, per process."""

    def __init__(self, s: Any, sup: Any) -> None:
        self.pids = _pipeline_pids(s, sup)
        self.start = {name: _cpu_s(pid) for name, pid in self.pids.items()}

    def per_request(self, n: int) -> dict[str, float]:
        out = {name: round((_cpu_s(pid) - self.start[name]) * 1000 / max(1, n), 1) for name, pid in self.pids.items()}
        out["total"] = round(sum(out.values()), 1)
        return out


def _pipeline_pids(s: Any, sup: Any) -> dict[str, int | None]:
    """The run's worker and stage, and the local stack's servers (None where one is not found)."""
    from streams.devstack.paths import stack_paths
    from streams.devstack.pidfiles import owned_pid
    from streams.devstack.services import stack_services

    paths = stack_paths(s)
    pids: dict[str, int | None] = {name: sup.procs[name].pid for name in ("worker", "stage")}
    for svc in stack_services(s.local_stack.kafka_brokers):
        pids["broker" if svc.startswith("kafka") else svc] = owned_pid(paths, svc)
    return pids


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads; 0 if unknown)."""
    from streams.bench.harness import process_cpu_s

    return process_cpu_s(pid) or 0.0


def run_timestamps_cost(*, rounds: int = 8, per_round: int = 40, long_chars: int = 100_000, seed: int | None = None,
                        pin_worker: bool = False, out_dir: Path = Path("out/bench-pipeline"),
                        timeout_s: float = 900.0) -> dict[str, Any]:
    """Throughput with and without word timings, side by side in one run (see the module docstring)."""
    from schemas import Request, encode
    from streams.bench.corpus import ASR_SENTENCES, bench_texts
    from streams.bench.harness import (
        cleanup_run,
        isolated,
        new_run_id,
        paired_ratio,
        pin_threads,
        require_stack_up,
        s3_client,
    )
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    run_id = new_run_id()
    base = load_settings()
    require_stack_up(base)
    s = isolated(base, run_id)
    stack.ensure_topics(s)
    rng = random.Random(seed)
    texts = bench_texts(rounds * per_round + 3, seed=seed)
    users = [f"bench-user-{i:02d}" for i in range(16)]
    report: dict[str, Any] = {"mode": "timestamps_cost", "run_id": run_id, "seed": seed, "cpus": os.cpu_count(),
                              "backend": s.engine.backend, "rounds": rounds, "per_round": per_round,
                              "loadavg_start": list(os.getloadavg())}
    sides: dict[str, dict[str, float]] = {k: {"audio_s": 0.0, "wall_s": 0.0, "synth_ms": 0.0, "requests": 0.0,
                                              "words": 0.0, "worker_cpu_s": 0.0, "s3_cpu_s": 0.0, "join_ms": 0.0,
                                              "machine_cpu_ms": 0.0}
                                          for k in ("without", "with")}
    spread: dict[str, list[float]] = {"without": [], "with": []}  # audio s per s of each round (the spread)
    worker_rounds: dict[str, list[float]] = {"without": [], "with": []}  # the worker's CPU ms per audio s
    machine_rounds: dict[str, list[float]] = {"without": [], "with": []}  # every process's
    sup = Supervisor(out_dir / run_id / "logs")
    driver: _Driver | None = None
    everywhere = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    pinned: dict[str, int | None] = {}
    try:
        sup.stage("stage", s)
        sup.worker("worker", s.replace(transactional_id=f"ttsflow-bench-{run_id}"))
        for p in list(sup.procs.values()):
            sup.wait_ready(p, timeout=180)
        if pin_worker:  # the worker alone on one CPU, the rest of the pipeline (and this client) on the others
            pinned = _pipeline_pids(s, sup) | {"bench": os.getpid()}
            report["pinned"] = _pin_worker(pinned, everywhere, pin_threads)
        driver = _Driver(s)
        s3 = s3_client(s)
        warm = [Request(request_id=f"bench-{run_id}-warm-{i}", user_id=users[i], text=t, timestamps=bool(i % 2))
                for i, t in enumerate(texts[-3:])]
        for r in warm:
            driver.publish(r)
        driver.wait([r.request_id for r in warm], timeout_s, sup)
        for rnd in range(rounds):
            order = ("without", "with") if rnd % 2 == 0 else ("with", "without")  # ABBA
            # both sides of a round speak the same texts for the same users: a timed part has an address of
            # its own (streams.worker.keys), so neither side finds the other's audio in the cache
            k = rnd * per_round
            round_users = [rng.choice(users) for _ in range(per_round)]
            for side in order:
                batch = [Request(request_id=f"bench-{run_id}-{side}-{k + i:05d}", user_id=round_users[i],
                                 text=texts[k + i], timestamps=side == "with") for i in range(per_round)]
                cpu = _ProcessCpu(s, sup)  # the worker's, the S3 server's, every process's
                t0 = time.time()
                for r in batch:
                    driver.publish(r)
                driver.wait([r.request_id for r in batch], timeout_s, sup)
                cs = [driver.got[r.request_id][0] for r in batch]
                acc = sides[side]
                used = cpu.per_request(1)  # ms this round
                acc["worker_cpu_s"] += used["worker"] / 1000
                acc["s3_cpu_s"] += used.get("s3", 0.0) / 1000
                acc["machine_cpu_ms"] += used["total"]
                wall = max(driver.got[r.request_id][1] for r in batch) - t0
                audio = sum(c.audio.duration_s for c in cs if c.audio is not None)
                spread[side].append(round(audio / wall, 2))
                worker_rounds[side].append(used["worker"] / audio)
                machine_rounds[side].append(used["total"] / audio)
                acc["wall_s"] += wall
                acc["audio_s"] += audio
                acc["synth_ms"] += sum(c.timings.synth_ms for c in cs if c.timings is not None)
                # from its last part made to its answer: the join's queue, the join, the word objects' PUTs
                acc["join_ms"] += sum(c.timings.join_ms or 0.0 for c in cs if c.timings is not None)
                acc["requests"] += len(cs)
                acc["words"] += sum(c.words_count or 0 for c in cs)
                if any(c.status != "ok" for c in cs):
                    raise RuntimeError(f"failed requests in the {side} round: "
                                       f"{[c.error for c in cs if c.status != 'ok'][:3]}")
                for c in cs:  # the other side's join of the same texts finds no object to answer with
                    if c.audio is not None:
                        s3.delete_object(Bucket=c.audio.bucket, Key=c.audio.key)
                _say(f"round {rnd + 1}/{rounds} {side}: {len(cs)} requests")
        for side, acc in sides.items():
            report[side] = {"requests": int(acc["requests"]), "audio_s": round(acc["audio_s"], 2),
                            "wall_s": round(acc["wall_s"], 2), "audio_s_per_s": round(acc["audio_s"] / acc["wall_s"], 3),
                            "synth_ms_per_audio_s": round(acc["synth_ms"] / acc["audio_s"], 2),
                            "worker_cpu_ms_per_audio_s": round(acc["worker_cpu_s"] * 1000 / acc["audio_s"], 2),
                            "s3_server_cpu_ms_per_audio_s": round(acc["s3_cpu_s"] * 1000 / acc["audio_s"], 2),
                            "machine_cpu_ms_per_audio_s": round(acc["machine_cpu_ms"] / acc["audio_s"], 2),
                            "join_ms_per_request": round(acc["join_ms"] / max(1.0, acc["requests"]), 2),
                            "words": int(acc["words"]), "rounds_audio_s_per_s": spread[side]}
        w, wo = report["with"], report["without"]
        report["throughput_ratio"] = round(w["audio_s_per_s"] / wo["audio_s_per_s"], 4)  # < 1: timings cost
        report["synth_ratio"] = round(w["synth_ms_per_audio_s"] / wo["synth_ms_per_audio_s"], 4)  # > 1: timings cost
        # the worker process's own CPU seconds (all its threads) per audio second: what the timings cost the
        # worker, less swayed by other processes on a shared machine than wall time is
        report["worker_cpu_ratio"] = round(w["worker_cpu_ms_per_audio_s"] / wo["worker_cpu_ms_per_audio_s"], 4)
        # every process of the pipeline on this machine (> 1: timings cost; its inverse bounds the throughput ratio)
        report["machine_cpu_ratio"] = round(w["machine_cpu_ms_per_audio_s"] / wo["machine_cpu_ms_per_audio_s"], 4)
        # each round beside its pair (ABBA: the two sides of a round ran back to back), with the run's own noise
        report["paired"] = {"throughput": paired_ratio(spread["with"], spread["without"]),
                            "worker_cpu": paired_ratio(worker_rounds["with"], worker_rounds["without"]),
                            "machine_cpu": paired_ratio(machine_rounds["with"], machine_rounds["without"])}
        if wo["s3_server_cpu_ms_per_audio_s"] > 0:  # the local S3 server's work (a hosted S3's is not ours)
            report["s3_server_cpu_ratio"] = round(w["s3_server_cpu_ms_per_audio_s"] /
                                                  wo["s3_server_cpu_ms_per_audio_s"], 4)
        if long_chars > 0:
            sents: list[str] = []
            while sum(len(x) + 1 for x in sents) < long_chars:
                sents.append(ASR_SENTENCES[len(sents) % len(ASR_SENTENCES)])
            text = " ".join(sents)[:long_chars].rsplit(" ", 1)[0]
            _say(f"one long request with timestamps: {len(text)} characters")
            r = Request(request_id=f"bench-{run_id}-long", user_id="bench-long", text=text, timestamps=True)
            t0 = time.time()
            driver.publish(r)
            driver.wait([r.request_id], timeout_s, sup)
            c = driver.got[r.request_id][0]
            if c.status != "ok" or c.words is None:
                raise RuntimeError(f"the long request: {c.status} {c.error} {c.words_reason}")
            report["longest"] = {"chars": len(text), "segments": c.segments, "cached_segments": c.cached_segments,
                                 "audio_s": c.audio.duration_s if c.audio else None, "words": c.words_count,
                                 "words_object_bytes": c.words.bytes,
                                 "bytes_per_word": round(c.words.bytes / max(1, c.words_count or 0), 1),
                                 "vtt_bytes": (c.captions or {})["vtt"].bytes,
                                 "srt_bytes": (c.captions or {})["srt"].bytes,
                                 "completion_record_bytes": len(encode(c)),
                                 "wall_s": round(driver.got[r.request_id][1] - t0, 1)}
        report["loadavg_end"] = list(os.getloadavg())
    finally:
        if driver is not None:
            driver.close()
        for pid in pinned.values():  # the stack's servers outlive the run: every CPU again
            pin_threads(pid, everywhere)
        sup.stop_all()
        cleanup_run(s, _say)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench pipeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=60, help="texts in the saturation run (1-3 sentences each)")
    ap.add_argument("--open-loop-seconds", type=float, default=30.0, help="length of the open-loop runs")
    ap.add_argument("--load", type=float, default=0.7, help="open-loop arrival rate as a fraction of capacity")
    ap.add_argument("--seed", type=int, default=None, help="corpus seed (default: random, so nothing is cached)")
    ap.add_argument("--corpus", choices=("en", "zh"), default="en",
                    help="en: English texts, the configured backend; zh: Mandarin texts, the kokoro backend")
    ap.add_argument("--json", action="store_true", help="print only the JSON object (always the last line)")
    ap.add_argument("--timestamps-cost", action="store_true",
                    help="instead: throughput without and with \"timestamps\": true, ABBA rounds side by side, and the "
                         "word-timing object of one long request")
    ap.add_argument("--rounds", type=int, default=8, help="--timestamps-cost: rounds per side")
    ap.add_argument("--per-round", type=int, default=40, help="--timestamps-cost: requests per round")
    ap.add_argument("--long-chars", type=int, default=100_000,
                    help="--timestamps-cost: characters of the long request (0: none)")
    ap.add_argument("--pin-worker", action="store_true",
                    help="--timestamps-cost: the worker alone on one CPU and the stage, broker, S3 server, Redis and "
                         "this client on the others, so the worker's throughput is not shared with theirs")
    ns = ap.parse_args(argv)
    if ns.timestamps_cost:
        try:
            t = run_timestamps_cost(rounds=ns.rounds, per_round=ns.per_round, long_chars=ns.long_chars, seed=ns.seed,
                                    pin_worker=ns.pin_worker)
        except Exception as e:
            print(f"ttsflow bench pipeline: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        if not ns.json:
            print(f"throughput with/without timestamps {t['throughput_ratio']}, synth ms per audio s "
                  f"{t['synth_ratio']}, worker CPU per audio s {t['worker_cpu_ratio']}, all processes' CPU per audio s "
                  f"{t['machine_cpu_ratio']}; paired per round {t['paired']}; longest request's word-timing object "
                  f"{(t.get('longest') or {}).get('words_object_bytes')} bytes")
        print(json.dumps(t))
        return 0
    if ns.requests < 1 or not 0 < ns.load <= 2:
        print("ttsflow bench pipeline: --requests >= 1 and 0 < --load <= 2", file=sys.stderr)
        return 2
    try:
        r = run_bench(requests=ns.requests, open_loop_s=ns.open_loop_seconds, load=ns.load, seed=ns.seed,
                      corpus=ns.corpus)
    except Exception as e:
        print(f"ttsflow bench pipeline: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not ns.json:
        print(f"engine {r['engine']['audio_s_per_s']} audio s/s, pipeline {r['pipeline']['audio_s_per_s']} audio s/s, "
              f"ratio {r['ratio']}; open loop p50/p99 {r['open_loop']['p50_ms']}/{r['open_loop']['p99_ms']} ms; "
              f"cached p99 {r['cached']['p99_ms']} ms")
    print(json.dumps(r))
    return 0
