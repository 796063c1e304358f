"""``ttsflow bench KIND``: benchmarks that print one JSON object as their last line.

Each kind lives in its own module (``streams.bench.<kind>``) exposing
``main(argv) -> int``. Benchmarks are not tests: they measure, side by side in one
run, and report ratios rather than absolute times on a noisy machine. The package also
holds the chaos run and the demo (each a ``ttsflow`` command), what they share
(:mod:`~streams.bench.harness`, :mod:`~streams.bench.corpus`) and the Celery peer of
``bench baseline`` (:mod:`~streams.bench.celery_peer`). No product room imports it.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["main"]

_KINDS = {
    "engine": "streams.bench.engine",
    "stage": "streams.bench.stage",
    "pipeline": "streams.bench.pipeline",
    "baseline": "streams.bench.baseline",
    "bigrequest": "streams.bench.bigrequest",
    "gateway": "streams.bench.gateway",
    "latency": "streams.bench.latency",
    "soak": "streams.bench.soak",
    "align": "streams.bench.align",
    "sweep": "streams.bench.sweep",
    "streaming-input": "streams.bench.streaming_input",
}


def main(argv: list[str]) -> int:
    usage = f"usage: ttsflow bench {{{','.join(_KINDS)}}} [--json] [ARGS...]; ttsflow bench KIND --help for its options"
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] not in _KINDS:
        print(usage, file=sys.stderr)
        return 2
    return int(importlib.import_module(_KINDS[argv[0]]).main(argv[1:]) or 0)
