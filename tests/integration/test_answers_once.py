"""Exactly one answer per readable request id, bad content included, while stages die.

What a user's operator would notice, counted the way they would count it: a plain
producer publishes valid requests mixed with readable ids carrying bad content (empty
text, unknown voice, format ``mp9``, speed 99) while a stage is SIGKILLed again and again
and restarted at once; a ``read_committed`` reader of the completions topic must then see
exactly one completion per id, ``ok`` for the valid ones and ``failed`` with the stage's
code for the others. Before rejections went through the worker's transaction, a stage
killed between sending a failed completion and committing its input sent it twice.

Also: the first requests on a FRESH cluster (a wiped private stack) are answered without
the 35 s stall the first ``make demo`` on a new machine showed.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from schemas import decode_completion
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from tests.integration.conftest import drain_topic, producer_conf
from tests.support.metrics import metric_sum

pytestmark = pytest.mark.integration

_BAD: list[tuple[dict[str, Any], str]] = [
    ({"text": "\u200b \t"}, "empty_text"),
    ({"text": "Hello.", "voice": "nobody"}, "unknown_voice"),
    ({"text": "Hello.", "format": "mp9"}, "unsupported_format"),
    ({"text": "Hello.", "speed": 99}, "invalid_field"),
]
_GOOD = ["Your order has shipped.", "Thank you for calling.", "Please hold the line.", "Goodbye and good luck."]


def _mixed(n: int, tag: str) -> list[tuple[str, str, bytes, str | None]]:
    """``n`` requests (rid, user, value, expected code or None for ok); a third bad content."""
    out = []
    for i in range(n):
        rid, user = f"{tag}-{i}", f"user-{i % 13}"
        body: dict[str, Any] = {"request_id": rid, "user_id": user}
        code: str | None = None
        if i % 3 == 1:
            extra, code = _BAD[(i // 3) % len(_BAD)]
            body.update(extra)
        else:
            body["text"] = _GOOD[i % len(_GOOD)]
        out.append((rid, user, json.dumps(body).encode(), code))
    return out


def _answers(s: Settings, want: int, timeout: float) -> list[Any]:
    """Completions seen by a read_committed reader, once ``want`` distinct ids are there or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        cs = [decode_completion(m.value()) for m in drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_completed,
                                                                 count=want, timeout=10)]
        if len({c.request_id for c in cs}) >= want or time.monotonic() > deadline:
            return cs


@pytest.mark.parametrize("stages", [1, 2])
def test_bad_content_mixed_with_valid_is_answered_once_while_stages_are_sigkilled(
        settings: Settings, tmp_path: Path, unique: str, stages: int) -> None:
    s = settings.replace(home=str(tmp_path / "home"), s3_prefix=f"test/{unique}/", max_wait_ms=20,
                         transaction_timeout_ms=20_000, log_level="INFO")
    reqs = _mixed(240, "mix")
    kills = 4
    with Supervisor(tmp_path / "logs") as sup:
        names = [f"stage-{i}" for i in range(stages)]
        for name in names:
            sup.stage(name, s)
        w = sup.worker("w1", s)
        for name in names:
            sup.wait_ready(name, timeout=120)
        sup.wait_ready(w, timeout=120)
        sup.wait_group(s, s.stage.stage_app_id, stages, timeout=120)

        sent = threading.Event()

        def publish() -> None:  # ~20 requests/s, as a user's service would
            p = Producer(producer_conf(s, **{"enable.idempotence": True}))
            for i, (_, user, value, _) in enumerate(reqs):
                p.produce(s.kafka.topic_requests, key=user.encode(), value=value)
                if i % 10 == 9:
                    p.flush(30)
                    time.sleep(0.5)
            assert p.flush(30) == 0
            sent.set()

        t = threading.Thread(target=publish, daemon=True)
        t.start()
        for k in range(kills):  # spread over the publishing (~12 s), each restarted at once
            time.sleep(2.5)
            sup.restart(names[k % stages], sig=signal.SIGKILL)
        t.join(120)
        assert sent.is_set(), "publishing did not finish"
        cs = _answers(s, len(reqs), timeout=240)
        sup.check_alive()

    counts = Counter(c.request_id for c in cs)
    want = {rid for rid, *_ in reqs}
    lost = want - set(counts)
    dups = {rid: n for rid, n in counts.items() if n > 1}
    print(f"\nmixed kill test ({stages} stage(s)): {len(reqs)} requests ({sum(1 for *_, c in reqs if c)} bad content), "
          f"{kills} SIGKILLs; answered {len(set(counts) & want)}, duplicated {len(dups)}, lost {len(lost)}")
    assert not lost and not dups, f"lost={sorted(lost)[:10]} duplicated={dups}"
    assert set(counts) == want
    expected = {rid: code for rid, _, _, code in reqs}
    for c in cs:
        code = expected[c.request_id]
        if code is None:
            assert c.status == "ok" and c.audio is not None, (c.request_id, c.error)
        else:
            assert c.status == "failed" and c.error is not None and c.error.code == code, (c.request_id, c.error)


def _metric(port: int, name: str) -> float:
    return metric_sum(port, name, timeout=5, unreachable=None)


def test_a_stage_replaying_its_input_adds_no_second_answer(settings: Settings, tmp_path: Path, unique: str) -> None:
    """The stage is at-least-once: whatever it emits again (here ALL of it: a second stage app
    reads the requests topic from the start, as after a redeploy under a new app id or an
    offset reset) must not reach users twice, bad content included."""
    s = settings.replace(home=str(tmp_path / "home"), s3_prefix=f"test/{unique}/", max_wait_ms=20, log_level="INFO")
    reqs = _mixed(60, "replay")
    with Supervisor(tmp_path / "logs") as sup:
        sup.stage("stage", s)
        w = sup.worker("w1", s)
        sup.wait_ready("stage", timeout=120)
        sup.wait_ready(w, timeout=120)
        p = Producer(producer_conf(s, **{"enable.idempotence": True}))
        for _, user, value, _ in reqs:
            p.produce(s.kafka.topic_requests, key=user.encode(), value=value)
        assert p.flush(30) == 0
        first = _answers(s, len(reqs), timeout=180)
        assert len({c.request_id for c in first}) == len(reqs)
        emitted = len(drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_segments, timeout=5))
        replay = sup.stage("replay", s.replace(stage_app_id=f"{s.stage.stage_app_id}-replay"))
        sup.wait_ready(replay, timeout=120)
        deadline = time.monotonic() + 180
        while _metric(w.metrics_port, "ttsflow_worker_segments_consumed_total") < 2 * emitted:
            assert time.monotonic() < deadline, "the worker never read the replayed segments"
            sup.check_alive()
            time.sleep(0.5)
        again = [decode_completion(m.value()) for m in drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_completed,
                                                                    timeout=5)]
    counts = Counter(c.request_id for c in again)
    print(f"\nreplay test: {len(reqs)} requests, {emitted} segment records emitted twice; "
          f"completions {sum(counts.values())} for {len(counts)} ids")
    assert counts == Counter({rid: 1 for rid, *_ in reqs}), {k: v for k, v in counts.items() if v != 1}


def test_a_fresh_cluster_answers_its_first_requests_without_a_stall(private_stack: Settings, tmp_path: Path) -> None:
    """Wiped data, nothing created but the pipeline's own topics by ``stack up``: the stage's
    changelog and leader topic come from ``stack up`` / the stage, never from faust mid-run."""
    s = private_stack.replace(log_level="INFO", max_wait_ms=20)
    reqs = [(f"first-{i}", f"user-{i}", json.dumps({"request_id": f"first-{i}", "user_id": f"user-{i}",
                                                     "text": f"Welcome, caller number {i}."}).encode())
            for i in range(8)]
    with Supervisor(tmp_path / "logs") as sup:
        st = sup.stage("stage", s)
        w = sup.worker("w1", s)
        sup.wait_ready(st, timeout=180)
        sup.wait_ready(w, timeout=180)
        p = Producer(producer_conf(s, **{"enable.idempotence": True}))
        t0 = time.time()
        for _, user, value in reqs:
            p.produce(s.kafka.topic_requests, key=user.encode(), value=value)
        p.produce(s.kafka.topic_requests, key=b"user-x", value=b"not json")  # one dead letter
        assert p.flush(60) == 0
        cs = _answers(s, len(reqs), timeout=120)
        dlq = drain_topic(s.kafka.bootstrap_servers, s.kafka.topic_dlq, count=1, timeout=10)
        log = st.log_path.read_text(errors="replace")
    latencies = sorted(c.completed_at.timestamp() - t0 for c in cs if c.completed_at is not None)
    print(f"\nfresh cluster: first {len(reqs)} requests answered after {latencies[0]:.2f}-{latencies[-1]:.2f} s "
          f"(p50 {latencies[len(latencies) // 2]:.2f} s); stalls in the stage log: {log.count('_stalled')}")
    assert Counter(c.request_id for c in cs) == Counter({rid: 1 for rid, *_ in reqs})
    assert all(c.status == "ok" for c in cs)
    assert len(dlq) == 1, f"{len(dlq)} dead letters for one bad record"
    assert "_stalled" not in log and "not found in cluster metadata" not in log
    assert latencies[-1] < 30, f"the last first request took {latencies[-1]:.1f} s"
