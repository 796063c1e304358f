"""``ttsflow bench gateway``: the gateway against the Kafka client, side by side in one run.

On topics of its own on the running stack it starts one stage, one worker and one gateway,
then measures, printing one JSON object last:

1. latency of one request through the gateway (HTTP, wav) and through ``TTSClient``
   (submit, wait, fetch), alternating, each on a text nobody asked for before (cold: every
   segment synthesized), then the same texts again (cached: every segment a cache hit);
2. streaming: time to the first byte and to the last of a multi-segment text
   (``stream_format=audio``, pcm) against the same length unstreamed;
3. concurrent load: C callers (8 and 32 by default) each sending requests back to back over
   cached texts, mp3 (so transcoding is in the cost); requests/s and p50/p99 latency.

The load average is printed with every phase (``os.getloadavg``): on a shared machine only
the side-by-side ratios carry over.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from streams.bench.corpus import ASR_SENTENCES
from streams.bench.harness import isolated, percentile

__all__ = ["main"]

_SENTENCES = ASR_SENTENCES[:8]


def _fresh(i: int, salt: int) -> str:
    s = _SENTENCES[i % len(_SENTENCES)]
    return f"{s[:-1]}, number {salt + i}{s[-1]}"


def _post(url: str, body: dict[str, Any], timeout: float = 300.0) -> tuple[float, float, int]:
    """(seconds to first byte, seconds to last byte, bytes) of one POST."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        first = r.read(1)
        t1 = time.monotonic()
        rest = r.read()
    return t1 - t0, time.monotonic() - t0, len(first) + len(rest)


def _stats(xs: list[float]) -> dict[str, float | None]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {"n": len(xs), "p50_ms": r(percentile(xs, 50)), "p99_ms": r(percentile(xs, 99)),
            "mean_ms": r(sum(xs) / len(xs) if xs else None)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow bench gateway", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--requests", type=int, default=6, help="cold (and cached) requests per path")
    ap.add_argument("--concurrency", default="8,32", help="caller counts of the load phase")
    ap.add_argument("--per-caller", type=int, default=4, help="requests each caller sends in the load phase")
    ap.add_argument("--json", action="store_true", help="(the JSON object is always the last line)")
    a = ap.parse_args(argv)
    from streams.client import TTSClient
    from streams.devstack.procs import Supervisor
    from streams.devstack.stack import delete_topics, ensure_topics
    from streams.settings import load_settings

    run = f"bgw-{uuid.uuid4().hex[:8]}"
    s = isolated(load_settings(), run).replace(max_segment_chars=64)
    ensure_topics(s)
    salt = random.randint(10_000, 90_000)
    out: dict[str, Any] = {"run": run}
    logs = Path(s.process.home) / "logs" / run
    try:
        with Supervisor(logs) as sup:
            gw = sup.serving(s, timeout=300)
            url = f"http://127.0.0.1:{gw.settings.gateway.gateway_port}/v1/audio/speech"
            with TTSClient(s) as client:
                def via_client(text: str) -> float:
                    t0 = time.monotonic()
                    rid = client.submit(text, "bench-user", voice="heart", format="wav", sample_rate=24_000)
                    client.fetch(client.wait(rid, 300))
                    return time.monotonic() - t0

                def via_gateway(text: str) -> float:
                    return _post(url, {"model": "tts-1", "input": text, "voice": "heart", "response_format": "wav"})[1]

                via_gateway("Warm up.")
                via_client("Warm up, too.")
                texts = [_fresh(i, salt) for i in range(2 * a.requests)]
                res: dict[str, list[float]] = {"gateway_cold": [], "client_cold": [], "gateway_cached": [],
                                               "client_cached": []}
                for i in range(a.requests):  # alternate, so load drifts hit both alike
                    res["gateway_cold"].append(via_gateway(texts[2 * i]))
                    res["client_cold"].append(via_client(texts[2 * i + 1]))
                for i in range(a.requests):  # the other path's text: cached, and never the same request
                    res["gateway_cached"].append(via_gateway(texts[2 * i + 1]))
                    res["client_cached"].append(via_client(texts[2 * i]))
                out["latency"] = {k: _stats(v) for k, v in res.items()}
                out["latency"]["load_avg"] = os.getloadavg()
            long = " ".join(_fresh(i, salt + 500) for i in range(4))
            long2 = " ".join(_fresh(i, salt + 900) for i in range(4))
            fb, last, n = _post(url, {"model": "tts-1", "input": long, "voice": "heart", "response_format": "pcm",
                                      "stream_format": "audio"})
            fb2, last2, n2 = _post(url, {"model": "tts-1", "input": long2, "voice": "heart", "response_format": "pcm"})
            out["streaming"] = {"segments": 4, "streamed_first_byte_ms": round(fb * 1000), "streamed_last_byte_ms":
                                round(last * 1000), "unstreamed_first_byte_ms": round(fb2 * 1000),
                                "unstreamed_last_byte_ms": round(last2 * 1000), "bytes": [n, n2],
                                "load_avg": os.getloadavg()}
            pool_texts = list(_SENTENCES)
            for t in pool_texts:  # cache every segment of the load phase's texts
                _post(url, {"model": "tts-1", "input": t, "voice": "heart", "response_format": "mp3"})
            out["load"] = {}
            for c in (int(x) for x in a.concurrency.split(",")):
                lat: list[float] = []
                errors = 0

                def caller(k: int, c: int = c) -> list[float]:
                    got = []
                    for j in range(a.per_caller):
                        got.append(_post(url, {"model": "tts-1", "input": pool_texts[(k + j) % len(pool_texts)],
                                               "voice": "alloy", "response_format": "mp3"})[1])
                    return got

                t0 = time.monotonic()
                with concurrent.futures.ThreadPoolExecutor(c) as ex:
                    for f in [ex.submit(caller, k) for k in range(c)]:
                        try:
                            lat += f.result()
                        except OSError:
                            errors += 1
                wall = time.monotonic() - t0
                out["load"][str(c)] = {"requests": len(lat), "errors": errors, "wall_s": round(wall, 2),
                                       "requests_per_s": round(len(lat) / wall, 2), **_stats(lat),
                                       "load_avg": os.getloadavg()}
            sup.check_alive()
    finally:
        from streams.kafka.admin import topic_names

        delete_topics(s, [t for t in topic_names(s.kafka) if run in t])  # its stage's changelogs too
    print(json.dumps(out))
    return 0
