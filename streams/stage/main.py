"""``ttsflow stage``: the CPU stream stage on faust-streaming.

Process start-up only: settings, logging, wait for the broker, create the topics, serve the
metrics, then faust runs the app of :mod:`streams.stage.app` until it stops.
"""

from __future__ import annotations

import argparse
import logging
import sys

from streams.settings import SettingsError, load_settings
from streams.stage.app import build_app, prepare_topics

__all__ = ["main"]

_BROKER_WAIT_S = 120.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow stage", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--metrics-port", type=int, default=None,
                    help="port of /metrics, /healthz, /readyz (default TTS_METRICS_PORT; 0 disables)")
    ns = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"ttsflow stage: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.process.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("aiokafka", "faust", "mode"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(settings.process.log_level)))

    from faust import Worker

    # faust exits at once when it cannot bootstrap; a stage started during a broker restart
    # waits for it instead (bounded: past that, exit non-zero for the orchestrator)
    from streams.errors import KafkaAccessError, RetriableError
    from streams.kafka import wait_for_broker
    from streams.kafka.access import require, role_needs
    from streams.stage.metrics import StageMetrics

    try:
        if not wait_for_broker(settings.kafka, timeout_s=_BROKER_WAIT_S):
            print(f"ttsflow stage: no broker at {settings.kafka.bootstrap_servers} after {_BROKER_WAIT_S:.0f} s",
                  file=sys.stderr)
            return 1
        # the ACLs it needs, checked before faust starts (faust retries a refused group or topic forever)
        require(settings.kafka, role_needs(settings.kafka, "stage", stage_app_id=settings.stage.stage_app_id), role="stage")
    except KafkaAccessError as e:
        print(f"ttsflow stage: {e}", file=sys.stderr)
        return 1
    except RetriableError as e:  # the check itself got no answer in time: start, faust waits for the broker
        logging.getLogger("ttsflow.stage").warning("event=access_not_checked error=%s", e)

    settings = prepare_topics(settings)
    port = settings.process.metrics_port if ns.metrics_port is None else ns.metrics_port
    metrics = StageMetrics(port)
    try:
        app = build_app(settings, metrics)
        worker = Worker(app, loglevel=settings.process.log_level.lower(), quiet=True, override_logging=False)
        worker.execute_from_commandline()  # returns or raises SystemExit when the worker stops
    except SystemExit as e:
        code = e.code
        return int(code) if isinstance(code, int) else (0 if code is None else 1)
    finally:
        metrics.ready(False)
        metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
