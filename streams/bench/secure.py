"""Secured vs plaintext latency: N requests, one at a time, through a real stage and worker.

``python -m streams.bench.secure secure N`` runs on the secured stack of ``TTS_HOME``
(``ttsflow stack up --secure``), the stage, worker and client each as its own principal;
``python -m streams.bench.secure plain N`` on a plaintext stack with topics and groups of its
own (deleted afterwards). Latency is submit to completion seen by the client, after one
warm-up request. Prints one JSON object as the last line.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from streams.settings import Settings, load_settings


def _run(stage: Settings, worker: Settings, user: Settings, n: int, log_dir: Path) -> list[float]:
    from streams.client import TTSClient
    from streams.devstack.procs import Supervisor

    with Supervisor(log_dir) as sup:
        w, st = sup.worker("worker", worker), sup.stage("stage", stage)
        sup.wait_ready(w, timeout=240)
        sup.wait_ready(st, timeout=240)
        lat = []
        with TTSClient(user, lookback_s=5) as c:
            c.wait(c.submit("A warm up sentence.", "warm"), 120)
            for i in range(n):
                t0 = time.monotonic()
                done = c.wait(c.submit(f"Request number {i} says hello {uuid.uuid4().hex[:6]}.", f"user-{i % 4}"), 120)
                if done.status == "ok":
                    lat.append(time.monotonic() - t0)
        sup.check_alive()
    return lat


def main(argv: list[str] | None = None) -> int:
    from streams.bench.harness import isolated
    from streams.devstack import secure
    from streams.devstack.stack import delete_topics, ensure_topics

    args = sys.argv[1:] if argv is None else argv
    mode = args[0] if args else "secure"
    n = int(args[1]) if len(args) > 1 else 20
    base = load_settings()
    if mode == "secure":
        home = Path(base.process.home)
        stage, worker, user = (secure.client_settings(base, home, secure.PRINCIPALS[r])
                               for r in ("stage", "worker", "user"))
        cleanup: list[str] = []
    else:
        stage = worker = user = isolated(base, f"plain-{uuid.uuid4().hex[:6]}")
        cleanup = ensure_topics(stage)
    worker = worker.replace(transactional_id=f"{worker.kafka.effective_transactional_id_prefix}-bench-{uuid.uuid4().hex[:6]}")
    try:
        lat = _run(stage, worker, user, n, Path(tempfile.mkdtemp(prefix=f"ttsflow-bench-{mode}-")))
    finally:
        delete_topics(stage, cleanup)
    print(json.dumps({"mode": mode, "requests": n, "answered": len(lat),
                      "p50_s": round(statistics.median(lat), 3) if lat else None,
                      "mean_s": round(statistics.mean(lat), 3) if lat else None,
                      "max_s": round(max(lat), 3) if lat else None}))
    return 0 if len(lat) == n else 1


if __name__ == "__main__":
    sys.exit(main())
