# ruff: noqa: RUF001 - Mandarin text with its full-width commas
"""``python -m streams.bench.solo``: kokoro's lone call on every core against its lanes, side by side.

One kokoro engine built as a two-lane worker builds it (one thread a call), with and without its
solo session (:mod:`engine.solo`), alternated ``--rounds`` times in one process: the model time
of a stream's first segment (a 10-character clause) called alone, and the calls per second of a
burst of ``--burst`` sentence segments on two lanes (the worker's throughput when busy). The
machine is shared: compare the pairs, and read the load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["main"]

FIRST = "第4821号通知，"
SENTENCE = "各位乘客请注意，本次列车即将到达终点站，请带好您的随身物品。"


def run(rounds: int, burst: int, voice: str) -> dict[str, Any]:
    from engine.base import SynthItem
    from engine.reload import open_engine
    from engine.store import ModelStore
    from streams.settings import load_settings

    mv = ModelStore(load_settings().effective_model_dir).current("kokoro")
    eng = open_engine(mv, threads=1)
    be: Any = eng.backend
    first = be.prepare(SynthItem(text=FIRST, voice=voice))
    sent = be.prepare(SynthItem(text=SENTENCE, voice=voice))
    be.infer([first])
    rows: list[dict[str, Any]] = []
    for k in range(rounds):
        for solo in (False, True):
            be.solo.enabled = solo
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            be.infer([first])
            alone = time.perf_counter() - t0
            t0 = time.perf_counter()
            with ThreadPoolExecutor(2) as ex:
                list(ex.map(lambda _: be.infer([sent]), range(burst)))
            rate = burst / (time.perf_counter() - t0)
            rows.append({"round": k, "solo": solo, "first_call_ms": round(alone * 1000, 1),
                         "busy_calls_per_s": round(rate, 4), "loadavg_1m": round(load, 2)})
            print(f"bench solo: {rows[-1]}", file=sys.stderr, flush=True)

    def med(solo: bool, key: str) -> float:
        import statistics

        return round(statistics.median(r[key] for r in rows if r["solo"] is solo), 4)

    return {"model": mv.ref, "first_text": FIRST, "sentence": SENTENCE, "burst": burst, "rounds": rows,
            "has_solo_session": be._solo_session is not None,
            "median": {"lanes": {"first_call_ms": med(False, "first_call_ms"),
                                 "busy_calls_per_s": med(False, "busy_calls_per_s")},
                       "solo": {"first_call_ms": med(True, "first_call_ms"),
                                "busy_calls_per_s": med(True, "busy_calls_per_s")}},
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m streams.bench.solo", description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burst", type=int, default=6, help="sentence calls per busy burst (two lanes)")
    ap.add_argument("--voice", default="zf_xiaobei")
    a = ap.parse_args(argv)
    print(json.dumps(run(a.rounds, a.burst, a.voice)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
