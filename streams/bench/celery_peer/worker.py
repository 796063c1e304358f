"""Start one Celery worker node of the baseline: ``python -m streams.bench.celery_peer.worker --queue Q ...``.

Engine, S3 and Redis settings come from the ``TTS_*`` variables (``streams.settings``),
exactly as for ``ttsflow worker``; the Celery-specific knobs are flags. The node is a
prefork pool of ``--concurrency`` processes consuming ``--queue`` only; each pool process
loads the engine once at start and marks itself ready in Redis
(``baseline:ready:<run_id>:<pid>``).
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m streams.bench.celery_peer.worker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", required=True, help="the only queue this node consumes")
    ap.add_argument("--run-id", required=True, help="names the readiness and execution-log keys")
    ap.add_argument("--concurrency", type=int, default=1, help="prefork pool processes")
    ap.add_argument("--visibility-timeout", type=int, default=60,
                    help="seconds before an unacked task of a dead node is redelivered")
    ap.add_argument("--loglevel", default="INFO")
    ns = ap.parse_args(argv)
    from streams.bench.celery_peer.app import install_process_hooks, make_app
    from streams.settings import load_settings

    s = load_settings()
    app = make_app(s.redis.redis_url, visibility_timeout_s=ns.visibility_timeout)
    install_process_hooks(ns.run_id)
    app.worker_main(["worker", "-Q", ns.queue, "-c", str(ns.concurrency), "-P", "prefork",
                     "-n", f"baseline-{ns.run_id}@%h", "--without-gossip", "--without-mingle",
                     "--without-heartbeat", "-l", ns.loglevel])
    return 0


if __name__ == "__main__":
    sys.exit(main())
