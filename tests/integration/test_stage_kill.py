# ruff: noqa: RUF001 - CJK input is the point
"""The stage loses no request when its processes are SIGKILLed and restarted while
requests keep arriving, including a second kill while the restarted stage is still
starting (rebalancing, recovering its table).

The loss this guards against (seen in ``ttsflow chaos``): a contiguous block of input
offsets, published just after a stage restart, committed by the stage group but never
turned into segments. faust's stream acks events it skips in a rebalance (older consumer
generation or flow suspended); that ack counted as "done" and the next commit moved past
them. :func:`streams.stage.patches.guard_consumer_acks` refuses those acks.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from schemas import decode_segment
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from streams.stage.text import normalize, split_segments
from tests.integration.conftest import drain_topic, producer_conf

pytestmark = pytest.mark.integration

_TEXTS = ["Dr. Smith paid $3.14 for the tea. Is it raining again?", "今天天气很好，我们去公园散步吧！我们明天见。",
          "The U.S. team won, e.g. in the final. Wait... what happened next?", "He said: come here, please; now."]


def test_kills_during_restart_and_recovery_while_publishing_lose_nothing(settings: Settings,
                                                                          tmp_path: Path) -> None:
    # log_level: input_gap and crash lines in the logs; backend: a voice that speaks the Chinese
    # texts too, so they are split, not refused (the stage loads no model)
    s = settings.replace(home=str(tmp_path / "home"), max_segment_chars=40, log_level="INFO", backend="chattts",
                         voice="")
    n, rate = 1500, 75.0  # about 20 s of requests
    reqs = [(f"q{i}", f"user-{i % 53}", f"Request {i}. {_TEXTS[i % len(_TEXTS)]}") for i in range(n)]
    want = {(rid, j) for rid, _, t in reqs for j in range(len(split_segments(normalize(t), s.stage.max_segment_chars)))}
    with Supervisor(tmp_path / "logs") as sup:
        for name in ("stage-a", "stage-b"):
            sup.stage(name, s)
        sup.wait_group(s, s.stage.stage_app_id, 2, timeout=90)
        sent = [0]
        errors: list[object] = []

        def publish() -> None:
            def on_delivery(err: object, _msg: object) -> None:
                if err is not None:
                    errors.append(err)

            p = Producer(producer_conf(s, **{"enable.idempotence": True}))
            t0 = time.monotonic()
            for i, (rid, user, text) in enumerate(reqs):
                while time.monotonic() - t0 < i / rate:
                    p.poll(0.002)
                p.produce(s.kafka.topic_requests, key=user.encode(),
                          value=json.dumps({"request_id": rid, "user_id": user, "text": text}).encode(),
                          on_delivery=on_delivery)
                sent[0] = i + 1
            assert p.flush(30) == 0

        t = threading.Thread(target=publish)
        t.start()
        try:
            # (seconds after the start of publishing, victim): a restart while requests arrive,
            # a second kill while that restart is still joining / recovering, then the other one
            plan = [(3.0, "stage-a"), (4.0, "stage-a"), (8.0, "stage-b"), (8.7, "stage-b"), (13.0, "stage-a"),
                    (13.5, "stage-b")]
            t0 = time.monotonic()
            for at, victim in plan:
                while time.monotonic() - t0 < at:
                    time.sleep(0.02)
                sup.restart(victim, sig=signal.SIGKILL)
        finally:
            t.join(120)
        assert not errors and sent[0] == n
        deadline = time.monotonic() + 120
        while True:
            segs = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, count=len(want), timeout=30)
            got = Counter((e.request_id, e.seq) for e in (decode_segment(m.value() or b"") for m in segs))
            lost = want - set(got)
            if not lost or time.monotonic() > deadline:
                break
            sup.check_alive()
    lost_reqs = sorted({rid for rid, _ in lost}, key=lambda r: int(r[1:]))
    print(f"kill-during-recovery: {len(want)} segments expected, lost={len(lost)}, "
          f"duplicated={sum(c - 1 for c in got.values())}")
    assert not lost, f"{len(lost)} segments of {len(lost_reqs)} requests lost, e.g. {lost_reqs[:10]}"
