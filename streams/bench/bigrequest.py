"""``ttsflow bench bigrequest``: one request at the text limit, and other users meanwhile.

One stage and one worker (real processes, topics and an S3 prefix of their own). After a
warm-up, short one-sentence requests of other users are published at a steady rate
(``--short-rate``) for ``--baseline-s`` seconds alone, then one request of ``--chars``
characters (default: just under ``TTS_MAX_TEXT_CHARS``) is published and the short
requests go on until it is answered. Reported:

* the big request: status (and code), segments, audio seconds and bytes, seconds from
  publish to its committed completion;
* the worker's memory: ``VmHWM`` (peak RSS, reset after the warm-up through
  ``/proc/<pid>/clear_refs`` where the kernel allows it) and the highest ``VmRSS``
  sampled every 0.2 s, with the RSS before the big request;
* the short requests' publish-to-completion latency (p50/p95/p99/max) before and during the
  big one, split by whether the user shares the big request's partition (a partition is
  the unit of order, so those wait behind it) or not.

``--max-rss-mb`` stops the worker (SIGKILL) if its RSS passes that much, so the run is
bounded even against a worker that does not bound its memory. The run's S3 objects are
deleted at the end. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.bench.harness import status_kb

__all__ = ["RssSampler", "long_text", "main", "run_bench"]


def _say(msg: str) -> None:
    print(f"bench bigrequest: {msg}", file=sys.stderr, flush=True)


def long_text(chars: int, seed: int) -> str:
    """Distinct sentences joined by spaces, as long as possible without passing ``chars``."""
    from streams.bench.corpus import sentences

    out: list[str] = []
    n = -1
    for s in sentences(seed):
        if n + 1 + len(s) > chars:
            break
        out.append(s)
        n += 1 + len(s)
    return " ".join(out)


@dataclass
class RssSampler:
    """Samples a process's ``VmRSS`` on a thread; ``peak_kb`` is the highest seen since :meth:`reset`."""

    pid: int
    interval_s: float = 0.2
    limit_kb: int | None = None  # SIGKILL the process above this
    peak_kb: int = 0
    killed: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            kb = status_kb(self.pid, "VmRSS")
            if kb is None:
                return
            self.peak_kb = max(self.peak_kb, kb)
            if self.limit_kb is not None and kb > self.limit_kb and not self.killed:
                self.killed = True
                _say(f"worker RSS {kb // 1024} MiB passed the limit: SIGKILL pid {self.pid}")
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass

    def reset(self) -> bool:
        """Start a new peak; also reset the kernel's VmHWM (True if the kernel allowed it)."""
        self.peak_kb = status_kb(self.pid, "VmRSS") or 0
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def rss_kb(self) -> int | None:
        return status_kb(self.pid, "VmRSS")

    def hwm_kb(self) -> int | None:
        return status_kb(self.pid, "VmHWM")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def _mib(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def _lat(xs: list[float]) -> dict[str, Any]:
    from streams.bench.harness import percentile

    def s(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    return {"n": len(xs), "p50_s": s(percentile(xs, 50)), "p95_s": s(percentile(xs, 95)), "p99_s": s(percentile(xs, 99)),
            "max_s": s(max(xs) if xs else None)}


def run_bench(*, chars: int | None = None, short_rate: float = 1.0, baseline_s: float = 20.0, users: int = 12,
              seed: int | None = None, timeout_s: float = 1800.0, max_rss_mb: int = 4096,
              out_dir: Path = Path("out/bench-bigrequest"), keep_audio: bool = False) -> dict[str, Any]:
    from schemas import Request, SchemaError, decode_completion
    from streams.bench.corpus import encode_request, sentences
    from streams.bench.harness import Publisher, TopicReader, cleanup_run, isolated, new_run_id, require_stack_up
    from streams.devstack import stack
    from streams.devstack.procs import ProcError, Supervisor
    from streams.settings import load_settings

    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    run_id = new_run_id()
    base = load_settings()
    require_stack_up(base)
    chars = chars if chars is not None else base.stage.max_text_chars - 1000
    s = isolated(base, run_id).replace(max_text_chars=max(base.stage.max_text_chars, chars))
    stack.ensure_topics(s)
    text = long_text(chars, seed)
    shorts = sentences(seed ^ 0x5A5A)
    next(shorts)
    short_users = [f"short-user-{i:02d}" for i in range(users)]
    report: dict[str, Any] = {"run_id": run_id, "seed": seed, "cpus": os.cpu_count(),
                              "load_avg_start": [round(x, 2) for x in os.getloadavg()],
                              "max_text_chars": s.stage.max_text_chars, "chars": len(text), "short_rate": short_rate}
    sup = Supervisor(out_dir / run_id / "logs")
    pub = Publisher(s.kafka)
    reader: TopicReader | None = None
    sampler: RssSampler | None = None
    sent: dict[str, float] = {}
    got: dict[str, tuple[Any, float, int]] = {}  # request id -> (completion, received, partition)

    def pump(timeout: float) -> None:
        assert reader is not None
        for rec in reader.poll(timeout):
            try:
                c = decode_completion(rec.value)
            except SchemaError:
                continue
            if c.request_id in sent and c.request_id not in got:
                got[c.request_id] = (c, rec.received, rec.partition)

    k = 0

    def publish_short(label: str) -> str:
        nonlocal k
        r = Request(request_id=f"big-{run_id}-{label}-{k:05d}", user_id=short_users[k % users], text=next(shorts))
        k += 1
        sent[r.request_id] = pub.publish(s.kafka.topic_requests, r.user_id.encode(), encode_request(r))
        return r.request_id

    def wait(ids: list[str], timeout: float) -> None:
        pub.flush(60)
        deadline = time.monotonic() + timeout
        while not all(i in got for i in ids):
            sup.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sum(i not in got for i in ids)} of {len(ids)} requests unanswered")
            pump(0.2)

    def steady(label: str, until: Any) -> list[str]:
        """Short requests at ``short_rate`` until ``until()``; their ids."""
        ids: list[str] = []
        due = time.monotonic()
        while not until():
            sup.check_alive()
            if time.monotonic() >= due:
                ids.append(publish_short(label))
                due += 1.0 / short_rate
            pump(min(0.1, max(0.0, due - time.monotonic())))
        return ids

    try:
        sup.stage("stage", s)
        worker = sup.worker("worker", s.replace(transactional_id=f"ttsflow-bench-{run_id}"))
        for p in list(sup.procs.values()):
            sup.wait_ready(p, timeout=180)
        reader = TopicReader(s.kafka, s.kafka.topic_completed, start="end")
        assert worker.pid is not None
        sampler = RssSampler(worker.pid, limit_kb=max_rss_mb * 1024)
        sampler.start()
        wait([publish_short("warm") for _ in range(4)], 300)

        _say(f"{baseline_s:.0f} s of short requests alone at {short_rate}/s")
        t_end = time.monotonic() + baseline_s
        before = steady("before", lambda: time.monotonic() >= t_end)
        hwm_reset = sampler.reset()
        report["worker_rss_before_mib"] = _mib(sampler.rss_kb())
        report["hwm_reset"] = hwm_reset

        big_id = f"big-{run_id}-big"
        big_user = "big-user"
        _say(f"one request of {len(text)} characters, short requests meanwhile")
        sent[big_id] = pub.publish(s.kafka.topic_requests, big_user.encode(),
                                   encode_request(Request(request_id=big_id, user_id=big_user, text=text)))
        t_big = time.monotonic()
        deadline = t_big + timeout_s
        try:
            during = steady("during", lambda: big_id in got or time.monotonic() > deadline or sampler.killed)
        except Exception as e:  # the worker died (killed at the RSS limit, or on its own)
            report["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            during = []
        big_s = time.monotonic() - t_big
        report["worker_peak_rss_mib"] = _mib(sampler.peak_kb)
        report["worker_vmhwm_mib"] = _mib(sampler.hwm_kb())
        report["worker_rss_after_mib"] = _mib(sampler.rss_kb())
        report["worker_killed_at_rss_limit"] = sampler.killed
        big: dict[str, Any] = {"answered": big_id in got, "wall_s": round(big_s, 1)}
        if big_id in got:
            c, received, part = got[big_id]
            big.update(status=c.status, code=c.error.code if c.error else None, segments=c.segments,
                       e2e_s=round(received - sent[big_id], 1), partition=part,
                       audio_s=c.audio.duration_s if c.audio else None, bytes=c.audio.bytes if c.audio else None,
                       synth_s=round(c.timings.synth_ms / 1000, 1) if c.timings else None)
        report["big"] = big
        if big_id in got and not sampler.killed:
            try:
                wait(during, 300)
            except (TimeoutError, RuntimeError, ProcError) as e:  # ProcError: a process of the run died
                report["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        big_part = got[big_id][2] if big_id in got else None

        def lat(ids: list[str], same: bool | None) -> dict[str, Any]:
            xs = [got[i][1] - sent[i] for i in ids if i in got and (same is None or (got[i][2] == big_part) == same)]
            out = _lat(xs)
            out["unanswered"] = sum(1 for i in ids if i not in got)
            out["failed"] = sum(1 for i in ids if i in got and got[i][0].status != "ok")
            return out

        report["short_before"] = lat(before, None)
        report["short_during_other_partitions"] = lat(during, False)
        report["short_during_same_partition"] = lat(during, True)
        report["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if sampler is not None:
            sampler.stop()
        if reader is not None:
            reader.close()
        sup.stop_all()
        deleted = cleanup_run(s, _say, keep_audio=keep_audio)
        if not keep_audio:
            report["s3_objects_deleted"] = deleted
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench bigrequest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--chars", type=int, default=None,
                    help="length of the big request (default: TTS_MAX_TEXT_CHARS - 1000; raises the limit if above)")
    ap.add_argument("--short-rate", type=float, default=1.0, help="short requests of other users per second")
    ap.add_argument("--baseline-seconds", type=float, default=20.0, help="short requests alone before the big one")
    ap.add_argument("--users", type=int, default=12, help="distinct users of the short requests")
    ap.add_argument("--timeout", type=float, default=1800.0, help="longest wait for the big request, seconds")
    ap.add_argument("--max-rss-mb", type=int, default=4096, help="SIGKILL the worker above this RSS")
    ap.add_argument("--seed", type=int, default=None, help="text seed (default: random, so nothing is cached)")
    ap.add_argument("--keep-audio", action="store_true", help="leave the run's S3 objects in place")
    ap.add_argument("--json", action="store_true", help="print only the JSON object (always the last line)")
    ns = ap.parse_args(argv)
    if (ns.chars is not None and ns.chars < 100) or not 0 < ns.short_rate <= 50 or ns.users < 1:
        print("ttsflow bench bigrequest: --chars >= 100, 0 < --short-rate <= 50, --users >= 1", file=sys.stderr)
        return 2
    try:
        r = run_bench(chars=ns.chars, short_rate=ns.short_rate, baseline_s=ns.baseline_seconds, users=ns.users,
                      seed=ns.seed, timeout_s=ns.timeout, max_rss_mb=ns.max_rss_mb, keep_audio=ns.keep_audio)
    except Exception as e:
        print(f"ttsflow bench bigrequest: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not ns.json:
        b = r.get("big", {})
        print(f"big request {r['chars']} chars: {b.get('status')} in {b.get('e2e_s')} s, {b.get('audio_s')} s of audio; "
              f"worker peak RSS {r.get('worker_peak_rss_mib')} MiB; short requests on other partitions "
              f"p50/p99 {r.get('short_during_other_partitions', {}).get('p50_s')}/"
              f"{r.get('short_during_other_partitions', {}).get('p99_s')} s")
    print(json.dumps(r))
    return 0
