"""``ttsflow bench streaming-input``: text sent in pieces, word by word, and fast first audio.

One ``ttsflow stage`` and one ``ttsflow worker`` on topics of their own (``--backend``, hibari
by default), the stack's services shared. Phases:

1. **capacity**: a burst of one-sentence requests; its answer rate B (sentences/s). Then (``--capacity
   ramp``, the default) a ramp of word-by-word phases (as in 2) at ``--ramp`` fractions of B, each
   judged sustained as ``bench baseline`` judges a rate (chunks keep up; the last third's median
   latency not far above the first third's), up to the first that is not: the word-by-word capacity
   C is the highest sentence rate achieved in a step sustained (Poisson arrivals over a step's
   seconds miss its nominal rate by ~10%; ``bench baseline`` takes the achieved rate too). A piece
   per word costs the stage and the broker a record each, so a burst of whole requests is not this
   load (``--capacity burst``: C = B, as before 2026-12-05).
2. **word by word under load** at each ``--loads`` fraction of C: streams arrive open-loop
   (Poisson), each a paragraph of ``--sentences`` one-segment sentences published one word per
   piece at ``--words-per-s`` (the last piece ``final``, empty). Per sentence: the time from the
   publish of its last word to its chunk on ``tts.chunks`` (a ``read_committed`` reader), p50/p99;
   the paragraph's last sentence separately (``tail``: from the final piece).
3. **first chunk** of whole streaming requests (``stream: true``) on an idle worker, one at a
   time, ``--first-runs`` each, fresh texts: before (``TTS_FIRST_SEGMENT_CHARS=""``, the first
   segment a whole sentence) and after (the short first segment), the stage restarted between.
   English: a first sentence of ~60-90 characters with a clause; ``--zh``: a Mandarin first
   sentence of ~60 characters on a kokoro worker (started for this phase), its first clause an
   opening of the corpus (``--zh-first openers``) or ``第N号通知`` (``numbered``), the worker's
   cache emptied before each request so that no first segment is a cache hit.

Or one phase alone, other users sending a sentence a second on every partition meanwhile:
``--hostile`` (a million tiny pieces, one user opening thousands of streams), ``--flood`` (one
user's whole requests as fast as it can send them), ``--open-stream SECONDS`` (one user's request
in pieces left open that long); their answer times on the affected partition and on the others.

The last line printed is one JSON object (``--json``: only that). The machine is shared:
compare the numbers of one run, and read ``loadavg``.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import random
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["main", "run_bench"]


def _say(msg: str) -> None:
    print(f"bench streaming-input: {msg}", file=sys.stderr, flush=True)


def _ms(xs: list[float]) -> dict[str, Any]:
    from streams.bench.harness import percentile

    def r(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {"n": len(xs), "p50_ms": r(percentile(xs, 50)), "p99_ms": r(percentile(xs, 99)),
            "max_ms": r(max(xs) if xs else None)}


class _Seen:
    """``read_committed`` readers of ``tts.chunks`` and ``tts.completed``: when each (request, seq) chunk
    and each completion was first seen."""

    def __init__(self, s: Any) -> None:
        from schemas import decode_chunk, decode_completion
        from streams.bench.plain import assigned_reader

        self.chunks: dict[tuple[str, int], float] = {}
        self.cached: set[tuple[str, int]] = set()  # chunks that were cache hits
        self.done: dict[str, Any] = {}
        self.epoch = time.time() - time.monotonic()  # monotonic + epoch: wall-clock seconds
        self._stop = threading.Event()
        self._c = assigned_reader(s.kafka, [s.kafka.topic_chunks, s.kafka.topic_completed],
                                  **{"enable.partition.eof": False})
        chunks_topic = s.kafka.topic_chunks

        def run() -> None:
            while not self._stop.is_set():
                for m in self._c.consume(500, 0.1):
                    if m.error() is not None:
                        continue
                    now = time.monotonic()
                    if m.topic() == chunks_topic:
                        ch = decode_chunk(m.value() or b"")
                        self.chunks.setdefault((ch.request_id, ch.seq), now)
                        if ch.cached:
                            self.cached.add((ch.request_id, ch.seq))
                    else:
                        c = decode_completion(m.value() or b"")
                        self.done.setdefault(c.request_id, (now, c))

        self._t = threading.Thread(target=run, daemon=True)
        self._t.start()

    def wait(self, pred: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)
        self._c.close()


def _one_segment_sentences(seed: int) -> Any:
    """English sentences that are one segment each, also as a first segment (no clause mark, <= 60 chars)."""
    from streams.bench.corpus import sentences

    for s in sentences(seed):
        if len(s) <= 60 and not any(c in s for c in ",;:") and s.endswith("."):
            yield s


def _streams_under_load(s: Any, seen: _Seen, producer: Any, rate_streams: float, run_s: float, n_sent: int,
                        wps: float, texts: Any, rng: random.Random) -> dict[str, Any]:
    """Open-loop streams, one word per piece; per sentence its last word's publish time and its chunk's."""
    from schemas import Request, encode

    topic = s.kafka.topic_requests
    events: list[tuple[float, int, str, str, int, str, bool]] = []  # (at, tie, rid, user, seq, text, final)
    sentence_ends: list[tuple[str, int, int]] = []  # (rid, sentence index, piece seq of its last word)
    finals: dict[str, int] = {}
    t0 = time.monotonic() + 0.5
    t, k = t0, 0
    while t < t0 + run_s:
        rid, user = f"si-{uuid.uuid4().hex[:12]}", f"user-{k % 16}"
        sents = [next(texts) for _ in range(n_sent)]
        seq = 0
        at = t
        for i, sent in enumerate(sents):
            words = sent.split(" ")
            for j, w in enumerate(words):
                events.append((at, len(events), rid, user, seq, (" " if seq else "") + w, False))
                if j == len(words) - 1:
                    sentence_ends.append((rid, i, seq))
                seq += 1
                at += 1.0 / wps
        events.append((at, len(events), rid, user, seq, "", True))
        finals[rid] = seq
        k += 1
        t += rng.expovariate(rate_streams)
    heapq.heapify(events)
    published: dict[tuple[str, int], float] = {}
    while events:
        at, _, rid, user, seq, text, final = heapq.heappop(events)
        delay = at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        req = Request(request_id=rid, user_id=user, text=text, seq=seq, final=final,
                      stream=True if seq == 0 else False)
        producer.produce(topic, key=user.encode(), value=encode(req))
        producer.poll(0)
        published[(rid, seq)] = time.monotonic()
    producer.flush(30)
    want = {(rid, i) for rid, i, _ in sentence_ends}
    seen.wait(lambda: want <= set(seen.chunks), timeout=max(60.0, run_s * 3))
    mid: list[float] = []
    tail: list[float] = []
    missing = 0
    timed: list[tuple[float, float]] = []  # (when its reference piece was published, its latency)
    for rid, i, seq in sentence_ends:
        got = seen.chunks.get((rid, i))
        if got is None:
            missing += 1
            continue
        at = published[(rid, finals[rid])] if i == n_sent - 1 else published[(rid, seq)]
        (tail if i == n_sent - 1 else mid).append(got - at)
        timed.append((at, got - at))
    first_pub = min(published.values(), default=0.0)
    span_pub = max(1e-6, max(published.values(), default=0.0) - first_pub)
    span_got = max(1e-6, max((seen.chunks[(rid, i)] for rid, i, _ in sentence_ends if (rid, i) in seen.chunks),
                             default=first_pub) - first_pub)
    verdict = phase_sustained(timed, offered=len(sentence_ends) / span_pub,
                              answered=(len(sentence_ends) - missing) / span_got, missing=missing)
    return {"streams": len(finals), "sentences": len(sentence_ends), "missing_chunks": missing,
            "sentence_to_audio": _ms(mid), "tail_after_final": _ms(tail),
            "answered": sum(1 for r in finals if r in seen.done), **verdict}


def phase_sustained(timed: list[tuple[float, float]], *, offered: float, answered: float,
                    missing: int) -> dict[str, Any]:
    """Whether a phase of word-by-word streams was sustained, judged as ``bench baseline`` judges a rate
    (:func:`streams.bench.baseline.sustained`): chunks keep up with the sentences sent, and the median
    latency of the last third of the sentences (by when their last piece was published) is not far
    above the first third's (a backlog that grows through the phase)."""
    from streams.bench.baseline import sustained
    from streams.bench.harness import percentile

    lat = [x for _, x in sorted(timed)]
    third = max(1, len(lat) // 3)
    first, last = percentile(lat[:third], 50), percentile(lat[-third:], 50)
    return {"sentences_per_s_sent": round(offered, 3), "chunks_per_s": round(answered, 3),
            "first_third_p50_ms": None if first is None else round(first * 1000, 1),
            "last_third_p50_ms": None if last is None else round(last * 1000, 1),
            "sustained": sustained(offered, answered, missing, first, last)}


def _first_clause(text: str) -> str:
    """``text`` up to its first clause or sentence boundary, as the stage finds them (the mark included)."""
    from streams.stage.text import clause_cuts, sentence_cuts

    cuts = sentence_cuts(text) + clause_cuts(text)
    return text[:min(cuts)] if cuts else text


def _first_chunks(s: Any, seen: _Seen, producer: Any, texts: list[str], user: str, voice: str | None,
                  timeout: float, before_each: Any = None) -> dict[str, Any]:
    """Whole streaming requests one at a time on an idle worker: publish to first chunk. ``before_each``:
    called before each request is published (the Mandarin phase empties its worker's cache there)."""
    from schemas import Request, encode

    xs: list[float] = []
    segs: list[int] = []
    failed: list[str] = []
    ids: list[str] = []
    for text in texts:
        if before_each is not None:
            before_each()
        rid = f"fc-{uuid.uuid4().hex[:12]}"
        req = Request(request_id=rid, user_id=user, text=text, voice=voice, stream=True)
        t = time.monotonic()
        producer.produce(s.kafka.topic_requests, key=user.encode(), value=encode(req))
        producer.flush(10)
        # its completion, and its first chunk unless it failed
        if not seen.wait(lambda rid=rid: rid in seen.done and ((rid, 0) in seen.chunks  # type: ignore[misc]
                                                             or seen.done[rid][1].status != "ok"), timeout):
            continue
        c = seen.done[rid][1]
        if c.status != "ok":
            failed.append(c.error.code if c.error else "?")
            continue
        xs.append(seen.chunks[(rid, 0)] - t)
        segs.append(c.segments)
        ids.append(rid)
    return {**_ms(xs), "segments": segs, "failed": failed, "request_ids": ids,
            "values_ms": [round(x * 1000, 1) for x in xs],
            "first_cached": sum(1 for r in ids if (r, 0) in seen.cached),
            "first_sentence_chars": [len(x.split("\u3002")[0].split(". ")[0]) for x in texts],
            "first_clause_chars": [len(_first_clause(x)) for x in texts]}


def _others(s: Any, seen: _Seen, producer: Any, texts: Any, seconds: float, tag: str) -> list[tuple[str, int, float]]:
    """Other users' one-sentence requests at 1/s (16 users, every partition): (request id, partition, publish time)."""
    from schemas import Request, encode
    from streams.kafka.partitioner import partition_for

    out = []
    for i in range(int(seconds)):
        user = f"other-{i % 16}"
        rid = f"{tag}-{uuid.uuid4().hex[:10]}"
        producer.produce(s.kafka.topic_requests, key=user.encode(), value=encode(Request(
            request_id=rid, user_id=user, text=next(texts))))
        producer.poll(0)
        out.append((rid, partition_for(user.encode(), s.kafka.partitions), time.monotonic()))
        time.sleep(1.0)
    return out


def _latency_of(seen: _Seen, sent: list[tuple[str, int, float]], partitions: set[int],
                inside_name: str = "hostile_partitions") -> dict[str, Any]:
    """Other users' answer times on ``partitions`` (reported as ``inside_name``) and on the others, and
    where each one's time went (the completion's timings, :func:`streams.bench.tail.ttsflow_path`):
    p50/p95 per place."""
    from streams.bench.harness import percentile
    from streams.bench.tail import ttsflow_path

    seen.wait(lambda: all(r in seen.done for r, _, _ in sent), 300)
    out: dict[str, Any] = {}
    for name, inside in ((inside_name, True), ("other_partitions", False)):
        mine = [(r, t) for r, p, t in sent if r in seen.done and (p in partitions) == inside]
        xs = [seen.done[r][0] - t for r, t in mine]
        paths = [x for r, t in mine if (x := ttsflow_path(seen.done[r][1], t + seen.epoch,
                                                          seen.done[r][0] + seen.epoch)) is not None]
        out[name] = {"n": len(xs), "p50_s": _r(percentile(xs, 50)), "p95_s": _r(percentile(xs, 95)),
                     "max_s": _r(max(xs) if xs else None), "phases_s": {
                         k: {"p50": _r(percentile([x[k] for x in paths], 50)),
                             "p95": _r(percentile([x[k] for x in paths], 95))} for k in (paths[0] if paths else ())}}
    return out | {"unanswered": sum(1 for r, _, _ in sent if r not in seen.done)}


def _stage_log(log: Path) -> dict[str, int]:
    """What the stage's log says about the run: watchdog restarts, and stages started."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return {"watchdog_restarts": text.count("event=input_stalled") + text.count("event=commit_stalled"),
            "stage_starts": text.count("event=stage_started")}


def _stage_metrics(port: int) -> dict[str, float]:
    """The stage's own counters at the end of a run (``/metrics``): records, time spent on them, pieces."""
    import urllib.request

    want = ("ttsflow_stage_requests_consumed_total", "ttsflow_stage_processing_seconds_sum",
            "ttsflow_stage_processing_seconds_count", "ttsflow_stage_pieces_total", "ttsflow_stage_requests_failed_total",
            "ttsflow_stage_duplicates_total", "ttsflow_stage_refused_total")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    return {k: round(float(v), 3) for line in body.splitlines() if line.startswith(want)
            for k, v in [line.rsplit(" ", 1)]}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _hostile(s: Any, seen: _Seen, producer: Any, texts: Any, *, tiny: int, streams: int) -> dict[str, Any]:
    """A request of ``tiny`` one-character pieces and one user opening ``streams`` streams, while other
    users send one sentence a second; each hostile request answered once with its documented code."""
    from collections import Counter

    from schemas import Request, encode
    from streams.kafka.partitioner import partition_for

    before = _latency_of(seen, _others(s, seen, producer, texts, 15, "calm"), set())
    big, flood = f"tiny-{uuid.uuid4().hex[:8]}", f"flood-{uuid.uuid4().hex[:6]}"
    hostile = {partition_for(b"mallory", s.kafka.partitions), partition_for(b"trudy", s.kafka.partitions)}
    done = threading.Event()

    def attack() -> None:
        for seq in range(tiny):
            producer.produce(s.kafka.topic_requests, key=b"mallory", value=encode(Request(
                request_id=big, user_id="mallory", text="a", seq=seq)))
            if seq % 10_000 == 0:
                producer.poll(0)
        for i in range(streams):
            producer.produce(s.kafka.topic_requests, key=b"trudy", value=encode(Request(
                request_id=f"{flood}-{i}", user_id="trudy", text="Hello", seq=0)))
        producer.flush(60)
        done.set()

    t0 = time.monotonic()
    th = threading.Thread(target=attack, daemon=True)
    th.start()
    during = _others(s, seen, producer, texts, 30, "busy")
    th.join(120)
    publish_s = time.monotonic() - t0
    floods = {f"{flood}-{i}" for i in range(streams)}
    seen.wait(lambda: big in seen.done and floods <= set(seen.done), 300 + s.stage.stream_timeout_s)
    codes = Counter((seen.done[r][1].error.code if seen.done[r][1].error else seen.done[r][1].status)
                    for r in floods if r in seen.done)
    c = seen.done.get(big)
    return {"tiny_pieces": tiny, "streams_opened": streams, "publish_s": round(publish_s, 1),
            "hostile_partitions": sorted(hostile),
            "tiny_request": (c[1].error.code if c[1].error else c[1].status) if c else None,
            "tiny_request_answered_after_s": round(c[0] - t0, 1) if c else None,
            "flood_codes": dict(codes), "flood_unanswered": len(floods - set(seen.done)),
            "others_before": before, "others_during": _latency_of(seen, during, hostile)}


def _open_stream(s: Any, seen: _Seen, producer: Any, texts: Any, *, seconds: float) -> dict[str, Any]:
    """One user's request in pieces left open for ``seconds`` (a word every 2 s, within the stream
    timeout, then its final piece), while other users send one sentence a second on every partition:
    their answer times on the open request's partition and on the others, and the open request's own."""
    from schemas import Request, encode
    from streams.kafka.partitioner import partition_for

    before = _latency_of(seen, _others(s, seen, producer, texts, 10, "calm"), set(), "open_partition")
    rid, user = f"open-{uuid.uuid4().hex[:8]}", "olivia"
    part = {partition_for(user.encode(), s.kafka.partitions)}
    pieces: list[int] = []

    def talk() -> None:
        end = time.monotonic() + seconds
        words = (w for sentence in _one_segment_sentences(7) for w in sentence.split(" "))  # not ``texts``: a
        # generator is not shared between threads
        seq = 0
        while time.monotonic() < end:
            producer.produce(s.kafka.topic_requests, key=user.encode(), value=encode(Request(
                request_id=rid, user_id=user, text=(" " if seq else "") + next(words), seq=seq, stream=seq == 0)))
            producer.poll(0)
            seq += 1
            time.sleep(min(2.0, max(0.0, end - time.monotonic())))
        producer.produce(s.kafka.topic_requests, key=user.encode(), value=encode(Request(
            request_id=rid, user_id=user, text="", seq=seq, final=True)))
        producer.flush(30)
        pieces.append(seq + 1)

    t0 = time.monotonic()
    th = threading.Thread(target=talk, daemon=True)
    th.start()
    during = _others(s, seen, producer, texts, seconds, "busy")
    th.join(seconds + 60)
    seen.wait(lambda: rid in seen.done, 120)
    c = seen.done.get(rid)
    return {"open_s": seconds, "open_pieces": pieces[0] if pieces else None, "open_partition": sorted(part),
            "open_request": (c[1].error.code if c[1].error else c[1].status) if c else None,
            "open_request_answered_after_s": round(c[0] - t0, 1) if c else None,
            "open_request_chunks": sum(1 for r, _ in seen.chunks if r == rid),
            "others_before": before, "others_during": _latency_of(seen, during, part, "open_partition")}


def _flood(s: Any, seen: _Seen, producer: Any, texts: Any, *, n: int, distinct: bool) -> dict[str, Any]:
    """One user publishing ``n`` whole one-word requests as fast as it can, while other users send one
    sentence a second; each flood request answered once (ok, or refused with its documented code).
    ``distinct``: every word a new one (each a model call); else words of a small vocabulary (cache hits
    after the first of each: the cost is the pipeline's, not the model's)."""
    from collections import Counter

    from schemas import Request, encode
    from streams.kafka.partitioner import partition_for

    words = ["yes", "no", "hello", "thanks", "okay", "maybe", "sure", "later", "again", "stop"]
    before = _latency_of(seen, _others(s, seen, producer, texts, 15, "calm"), set())
    tag = f"fl-{uuid.uuid4().hex[:6]}"
    ids = [f"{tag}-{i}" for i in range(n)]
    hostile = {partition_for(b"flooder", s.kafka.partitions)}

    def attack() -> None:
        for i, rid in enumerate(ids):
            text = f"{words[i % len(words)]} {i}." if distinct else f"{words[i % len(words)]}."
            producer.produce(s.kafka.topic_requests, key=b"flooder", value=encode(Request(
                request_id=rid, user_id="flooder", text=text)))
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(60)

    t0 = time.monotonic()
    th = threading.Thread(target=attack, daemon=True)
    th.start()
    during = _others(s, seen, producer, texts, 30, "busy")
    th.join(120)
    want = set(ids)
    seen.wait(lambda: want <= set(seen.done), 300)
    codes = Counter((seen.done[r][1].error.code if seen.done[r][1].error else seen.done[r][1].status)
                    for r in ids if r in seen.done)
    last = max((seen.done[r][0] for r in ids if r in seen.done), default=None)
    return {"flood_requests": n, "distinct": distinct, "hostile_partitions": sorted(hostile),
            "flood_codes": dict(codes), "flood_unanswered": len(want - set(seen.done)),
            "flood_answered_after_s": round(last - t0, 1) if last else None,
            "others_before": before, "others_during": _latency_of(seen, during, hostile)}


# Redis database of the Mandarin first-chunk phase's worker, emptied before each of its requests: every
# first segment is synthesized (an opening such as 您好 is in any used cache), none a cache hit.
COLD_CACHE_DB = 4

ZH_FIRST_KINDS = ("openers", "numbered")


def _zh_first(rng: random.Random, kind: str = "openers") -> str:
    """A Mandarin text whose first sentence is ~60 characters (clauses joined by commas), then a second.
    Its first clause, by ``kind``: ``openers``, one of the corpus's openings of a notice, a call or a
    news item (您好, 尊敬的客户, 据新华社报道, 记者从有关部门获悉: 2-9 characters); ``numbered``,
    第N号通知 ("notice No. N", N of 3-5 digits: 9-10 characters but 13-15 syllables read out)."""
    from streams.bench.corpus import _ZH_OPENERS, _zh_sentence

    comma = "\uff0c"
    first = rng.choice(_ZH_OPENERS) if kind == "openers" else f"\u7b2c{rng.randint(100, 99999)}\u53f7\u901a\u77e5"
    clauses: list[str] = [first]
    while len(comma.join(clauses)) < 55:
        clauses += [c for c in _zh_sentence(rng).split("\u3002")[0].split(comma) if c]
    return comma.join(clauses) + "\u3002" + _zh_sentence(rng)


def _en_first(texts: Any) -> str:
    """An English text whose first sentence is ~60-90 characters with a clause, then a second."""
    from streams.bench.corpus import sentences

    while True:
        a = next(texts)
        if 45 <= len(a) <= 75 and "," not in a:  # a first clause of its own each time: no cache hit
            return f"Order {random.randint(1000, 99999)}, {a[0].lower()}{a[1:]} {next(sentences(len(a)))}"


def run_bench(*, quick: bool = False, loads: list[float] | None = None, run_s: float | None = None,
              n_sent: int = 3, wps: float = 20.0, first_runs: int = 5, zh: bool = True,
              seed: int | None = None, zh_only: bool = False, zh_lanes: int = 0, zh_first: str = "openers",
              hostile: tuple[int, int] | None = None, flood: int | None = None, distinct: bool = False,
              stage_env: dict[str, Any] | None = None, open_s: float | None = None,
              ramp: list[float] | None = None, ramp_s: float = 15.0) -> dict[str, Any]:
    from schemas import Request, encode
    from streams.bench.corpus import sentences
    from streams.bench.harness import cleanup_run, isolated, new_run_id, require_stack_up
    from streams.bench.plain import config_producer
    from streams.devstack import stack
    from streams.devstack.procs import Supervisor
    from streams.kafka import producer_config
    from streams.settings import load_settings

    t_start = time.monotonic()
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    loads = [0.3, 0.7] if loads is None else loads
    run_s = run_s if run_s is not None else (8.0 if quick else 30.0)
    first_runs = 2 if quick else first_runs
    run_id = new_run_id()
    out = Path("out/bench-streaming-input") / run_id
    base = load_settings()
    require_stack_up(base)
    s = isolated(base, run_id)
    if stage_env:  # settings of this run's stage and worker (``--set``)
        s = s.replace(**stage_env)
    stack.ensure_topics(s)
    report: dict[str, Any] = {"run_id": run_id, "seed": seed, "quick": quick, "cpus": os.cpu_count(),
                              "loadavg_at_start": [round(x, 2) for x in os.getloadavg()], "backend": s.engine.backend,
                              "words_per_s": wps, "sentences_per_stream": n_sent, "run_s": run_s,
                              "idle_cut_ms": s.stage.stream_idle_cut_ms, "first_budgets": s.stage.first_budgets}
    sup = Supervisor(out / "logs")
    seen: _Seen | None = None
    producer = config_producer(producer_config(s.kafka))
    texts = _one_segment_sentences(seed)
    try:
        _say(f"run {run_id}: one stage + one {s.engine.backend} worker")
        stage_proc = sup.stage("stage", s)
        sup.worker("worker", s)
        for p in ("stage", "worker"):
            sup.wait_ready(p, timeout=300)
        seen = _Seen(s)
        if hostile is not None:  # only the hostile phase
            report["hostile"] = _hostile(s, seen, producer, texts, tiny=hostile[0], streams=hostile[1])
        if flood is not None:  # only the flood phase
            report["flood"] = _flood(s, seen, producer, texts, n=flood, distinct=distinct)
        if open_s is not None:  # only the open-stream phase
            report["open_stream"] = _open_stream(s, seen, producer, texts, seconds=open_s)
        if hostile is not None or flood is not None or open_s is not None:
            report["settings"] = stage_env or {}
            report["stage_metrics"] = _stage_metrics(stage_proc.settings.process.metrics_port)
            report["stage_log"] = _stage_log(stage_proc.log_path)
        only_phase = hostile is not None or flood is not None or open_s is not None
        only_zh = zh_only or only_phase
        zh = zh and not only_phase
        if only_zh:
            loads = []
        burst_n = 0 if only_zh or not loads else 10 if quick else 40
        warm = [next(texts) for _ in range(3)]
        ids = []
        for t in warm + [next(texts) for _ in range(burst_n)]:
            rid = f"cap-{uuid.uuid4().hex[:12]}"
            ids.append(rid)
            producer.produce(s.kafka.topic_requests, key=b"cap", value=encode(Request(
                request_id=rid, user_id="cap", text=t)))
            if len(ids) == len(warm):
                producer.flush(10)
                seen.wait(lambda: all(r in seen.done for r in ids), 120)
                t_burst = time.monotonic()
        producer.flush(10)
        seen.wait(lambda: all(r in seen.done for r in ids), 300)
        cap = burst_n / max(1e-3, max((seen.done[r][0] for r in ids[len(warm):]), default=t_burst) - t_burst)
        report["capacity_sentences_per_s"] = round(cap, 2) if burst_n else None  # None: not measured
        if burst_n:
            _say(f"capacity {cap:.2f} sentences/s")

        def under_load(key: str, f: float, rate_streams: float, seconds: float) -> dict[str, Any]:
            """One phase of word-by-word streams at ``rate_streams``, labelled ``key: f``."""
            ph = _streams_under_load(s, seen, producer, rate_streams, seconds, n_sent, wps, texts, rng)
            ph.update({key: f, "streams_per_s": round(rate_streams, 3), "loadavg_1m": round(os.getloadavg()[0], 2)})
            return ph

        base_cap = cap
        report["ramp"] = []
        if burst_n and ramp:  # the word-by-word capacity: the highest rate of the ramp sustained
            best = None
            for k, f in enumerate(ramp):
                rate_streams = f * cap / n_sent
                _say(f"ramp {f:.0%} of the burst: {rate_streams:.2f} streams/s for {ramp_s:.0f} s")
                ph = under_load("fraction_of_burst", f, rate_streams, ramp_s)
                report["ramp"].append(ph)
                _say(f"  -> sustained {ph['sustained']}: thirds {ph['first_third_p50_ms']} / "
                     f"{ph['last_third_p50_ms']} ms, sentence to audio {ph['sentence_to_audio']}")
                if ph["sustained"]:  # served every arrival as it came: its rate is the arrival rate achieved
                    best = max(best or 0.0, ph["sentences_per_s_sent"])
                elif k > 0:
                    break  # past saturation (as bench baseline's sweep: the first after the lowest not sustained)
            base_cap = best or 0.0
            report["streaming_capacity_sentences_per_s"] = round(base_cap, 2)
            # every step sustained: the capacity is a lower bound (the ramp stopped short of saturation)
            report["ramp_saturated"] = any(not p["sustained"] for p in report["ramp"])
            _say(f"word-by-word capacity {base_cap:.2f} sentences/s")
        report["loads_of"] = "streaming_capacity" if burst_n and ramp else "burst_capacity"
        report["loads"] = []
        for f in loads if base_cap > 0 else []:
            rate_streams = f * base_cap / n_sent
            _say(f"load {f:.0%}: {rate_streams:.2f} streams/s for {run_s:.0f} s")
            ph = under_load("fraction", f, rate_streams, run_s)
            report["loads"].append(ph)
            _say(f"  -> sentence to audio {ph['sentence_to_audio']}, tail {ph['tail_after_final']}")

        def first_phase(label: str, make: Any, voice: str | None, ss: Any, before_each: Any = None) -> dict[str, Any]:
            """``ss``: the stage's settings (its backends name the voices it accepts)."""
            res: dict[str, Any] = {}
            for when, budgets in (("before", ""), ("after", s.stage.first_segment_chars)):
                sup.remove("stage")
                sup.add("stage", "stage", ss.replace(first_segment_chars=budgets))
                sup.wait_ready("stage", timeout=120)
                res[when] = _first_chunks(s, seen, producer, [make() for _ in range(first_runs)], f"fc-{label}",
                                          voice, timeout=300, before_each=before_each)
                _say(f"first chunk {label} {when}: {res[when]}")
            return res

        all_en = sentences(seed + 2)
        if not only_zh:
            report["first_chunk_en"] = first_phase("en", lambda: _en_first(all_en), None, s)
        if zh:
            sup.remove("worker")
            # zh_lanes: model calls at once (TTS_MODEL_LANES; 0 auto = 2 one-thread lanes on 2 cores)
            import redis

            from streams.bench.harness import redis_db_url

            cold_url = redis_db_url(s.redis.redis_url, COLD_CACHE_DB)
            cold = redis.Redis.from_url(cold_url, socket_timeout=10)
            zs = s.replace(backend="kokoro", backends="kokoro", voice="zf_xiaobei", model_lanes=zh_lanes,
                           redis_url=cold_url)
            report.update(zh_model_lanes=zh_lanes, zh_first=zh_first, zh_cache=f"database {COLD_CACHE_DB}, "
                          "emptied before each request")
            sup.add("worker-zh", "worker", zs)
            sup.wait_ready("worker-zh", timeout=600)
            zrng = random.Random(seed + 3)
            report["first_chunk_zh"] = first_phase("zh", lambda: _zh_first(zrng, zh_first), "zf_xiaobei", zs,
                                                   before_each=cold.flushdb)
    finally:
        if seen is not None:
            seen.close()
        with contextlib.suppress(Exception):
            producer.flush(5)
        sup.stop_all()
        cleanup_run(s, _say)
    report["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "streaming-input.json").write_text(json.dumps(report, indent=1))
    return report


def _settings_args(items: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs as settings fields, each value typed like the field's default."""
    import dataclasses

    from streams.settings import Settings

    defaults = {f.name: getattr(sec, f.name) for sec in (getattr(Settings(), x.name) for x in
                                                          dataclasses.fields(Settings)) for f in dataclasses.fields(sec)}
    out: dict[str, Any] = {}
    for item in items:
        name, _, value = (x.strip() for x in item.partition("="))
        cur = defaults[name]
        out[name] = value.lower() in ("1", "true", "yes") if isinstance(cur, bool) else type(cur)(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench streaming-input", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    ap.add_argument("--quick", action="store_true", help="short phases (a smoke run)")
    ap.add_argument("--loads", default="0.3,0.7", help="fractions of the measured capacity (none: skip that phase)")
    ap.add_argument("--capacity", choices=("ramp", "burst"), default="ramp",
                    help="what --loads are fractions of: the word-by-word rate sustained on a ramp of --ramp steps "
                         "(default), or the answer rate of a burst of whole one-sentence requests (as before 2026-12-05)")
    ap.add_argument("--ramp", default=",".join(f"{x / 10:g}" for x in range(4, 21)),
                    help="the ramp's steps, fractions of the burst's rate (a burst of 40 after a warm-up of 3 is "
                         "noisy: 16.5 to 44.3 sentences/s in six runs of 2026-12-05 on one machine), up to the first not "
                         "sustained (default 0.4 to 2.0 by 0.1)")
    ap.add_argument("--ramp-s", type=float, default=15.0, help="seconds of arrivals per ramp step")
    ap.add_argument("--run-s", type=float, default=None, help="seconds of arrivals per load (default 30; quick 8)")
    ap.add_argument("--sentences", type=int, default=3, help="sentences per stream")
    ap.add_argument("--words-per-s", type=float, default=20.0)
    ap.add_argument("--first-runs", type=int, default=5, help="first-chunk requests per phase")
    ap.add_argument("--no-zh", action="store_true", help="skip the Mandarin (kokoro) first-chunk phase")
    ap.add_argument("--zh-only", action="store_true", help="only the Mandarin first-chunk phase")
    ap.add_argument("--zh-lanes", type=int, default=0, help="TTS_MODEL_LANES of the kokoro worker (0: auto)")
    ap.add_argument("--zh-first", choices=ZH_FIRST_KINDS, default="openers",
                    help="the Mandarin texts' first clause: an opening from the corpus (2-9 characters) or "
                         "第N号通知 (9-10 characters, 13-15 syllables)")
    ap.add_argument("--hostile", default=None, metavar="TINY,STREAMS",
                    help="only the hostile phase: a request of TINY one-character pieces and one user opening "
                         "STREAMS streams while other users send a sentence a second (e.g. 1000000,10000)")
    ap.add_argument("--flood", type=int, default=None, metavar="N",
                    help="only the flood phase: one user publishes N whole one-word requests as fast as it can "
                         "while other users send a sentence a second (e.g. 20000)")
    ap.add_argument("--open-stream", type=float, default=None, metavar="SECONDS",
                    help="only the open-stream phase: one user's request in pieces left open SECONDS (a word every "
                         "2 s, then its final piece) while other users send a sentence a second (e.g. 60)")
    ap.add_argument("--distinct", action="store_true", help="--flood: every flood text a new one (a model call "
                                                            "each; default: a small vocabulary, cache hits)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting of this run's stage and worker (settings field name, e.g. "
                         "stage_buffer_records=4096), repeatable: before/after runs side by side")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    r = run_bench(quick=a.quick, loads=[] if a.loads == "none" else [float(x) for x in a.loads.split(",")], run_s=a.run_s, n_sent=a.sentences,
                  wps=a.words_per_s, first_runs=a.first_runs, zh=not a.no_zh, seed=a.seed,
                  zh_only=a.zh_only, zh_lanes=a.zh_lanes, zh_first=a.zh_first,
                  hostile=tuple(int(x) for x in a.hostile.split(",")) if a.hostile else None,  # type: ignore[arg-type]
                  flood=a.flood, distinct=a.distinct, stage_env=_settings_args(a.set), open_s=a.open_stream,
                  ramp=[float(x) for x in a.ramp.split(",")] if a.capacity == "ramp" else None, ramp_s=a.ramp_s)
    print(json.dumps(r))
    return 0
