"""``ttsflow bench KIND``: benchmarks that print one JSON object as their last line.

Each kind lives in its own module (``streams.bench_<kind>``) exposing
``main(argv) -> int``. Benchmarks are not tests: they measure, side by side in one
run, and report ratios rather than absolute times on a noisy machine.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["main"]

_KINDS = {
    "engine": "streams.bench_engine",
    "stage": "streams.bench_stage",
    "pipeline": "streams.bench_pipeline",
    "baseline": "streams.bench_baseline",
    "bigrequest": "streams.bench_bigrequest",
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
