"""Exactly-once under SIGKILL and rebalance, with `ttsflow worker` subprocesses.

What a user would notice is counted the way confluent-kafka's own tests count: a
``read_committed`` reader of the completions topic, by request id. Every request must be
answered exactly once and every answer's audio must exist in S3 with its sha256.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from streams.devstack.procs import Supervisor
from streams.settings import Settings
from tests.support.metrics import metric_sum
from tests.support.pipeline import by_request, check_audio, completions, corpus, publish

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, transaction_timeout_ms=20_000)


def _metric(port: int, name: str) -> float:
    return metric_sum(port, name, timeout=2)


def _wait(pred, timeout: float, what: str, sup: Supervisor) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        sup.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _check_exactly_once(settings: Settings, n: int, tag: str, *more: tuple[int, str]) -> list:
    want = {f"{t}-{i}" for k, t in ((n, tag), *more) for i in range(k)}
    cs = completions(settings, count=len(want), timeout=120)
    counts = by_request(cs)
    lost = want - set(counts)
    dups = {k: v for k, v in counts.items() if v > 1}
    assert not lost and not dups, f"lost={sorted(lost)} duplicated={dups}"
    assert counts == Counter(dict.fromkeys(want, 1))
    for c in cs:
        check_audio(settings, c)
    return cs


def test_sigkill_mid_batch_and_restart_loses_and_duplicates_nothing(settings: Settings, tmp_path: Path) -> None:
    n = 40
    segs = corpus(n, "kill")
    publish(settings, segs)
    with Supervisor(tmp_path / "logs") as sup:
        w = sup.worker("w1", settings)
        sup.wait_ready(w, timeout=90)
        port = w.metrics_port
        # kill while it is working: some requests answered, most not, a batch in flight
        _wait(lambda: _metric(port, "ttsflow_worker_completions_total") >= 1, 120, "a first completion", sup)
        before = _metric(port, "ttsflow_worker_completions_total")
        assert before < n, "the worker finished before it could be killed; make the corpus bigger"
        sup.kill("w1", signal.SIGKILL)
        killed_at = len(completions(settings, timeout=10))
        sup.restart("w1")  # same transactional.id: fences the dead instance, aborts its open transaction
        sup.wait_ready(w, timeout=90)
        _check_exactly_once(settings, n, "kill")
        log = w.log_path.read_text()
    print(f"\nkill test: {len(segs)} segments, {n} requests; {killed_at} committed when SIGKILLed; "
          f"restarted worker answered the rest; done-set loads: {log.count('event=done_set_loaded')}")


def test_second_worker_joining_loses_and_duplicates_nothing(settings: Settings, tmp_path: Path) -> None:
    n, m = 48, 24
    publish(settings, corpus(n, "rebal"))
    with Supervisor(tmp_path / "logs") as sup:
        w1 = sup.worker("w1", settings)
        sup.wait_ready(w1, timeout=90)
        _wait(lambda: _metric(w1.metrics_port, "ttsflow_worker_completions_total") >= 1, 120, "w1 working", sup)
        w2 = sup.worker("w2", settings)  # joins: the group rebalances while w1 is mid-batch
        sup.wait_ready(w2, timeout=90)
        _wait(lambda: _metric(w2.metrics_port, "ttsflow_worker_assigned_partitions") >= 1, 60, "w2 assigned", sup)
        # w1 may have answered everything in w2's partitions before the rebalance; a second
        # wave from enough users to reach every partition gives w2 work of its own
        publish(settings, corpus(m, "rebal2", users=24, salt=", again"))
        cs = _check_exactly_once(settings, n, "rebal", (m, "rebal2"))
        done1 = _metric(w1.metrics_port, "ttsflow_worker_completions_total")
        done2 = _metric(w2.metrics_port, "ttsflow_worker_completions_total")
        codes = sup.stop_all()
    assert done1 + done2 == len(cs) == n + m
    assert done2 >= 1, "the second worker never answered anything"
    assert codes == {"w1": 0, "w2": 0}, codes  # graceful SIGTERM exits cleanly
    print(f"\nrebalance test: w1 answered {done1:.0f}, w2 answered {done2:.0f} of {n + m}")


def test_killed_worker_replaced_by_another_instance_loses_and_duplicates_nothing(settings: Settings,
                                                                                  tmp_path: Path) -> None:
    """The Deployment case: the replacement has a different transactional.id, so the dead one's
    open transaction is only aborted by its timeout (20 s here); nothing may be lost or doubled."""
    n = 24
    publish(settings, corpus(n, "repl"))
    with Supervisor(tmp_path / "logs") as sup:
        w1 = sup.worker("w1", settings)
        sup.wait_ready(w1, timeout=90)
        _wait(lambda: _metric(w1.metrics_port, "ttsflow_worker_completions_total") >= 3, 120, "w1 working", sup)
        sup.kill("w1", signal.SIGKILL)
        t0 = time.monotonic()
        w2 = sup.worker("w2", settings)
        sup.wait_ready(w2, timeout=90)
        _check_exactly_once(settings, n, "repl")
        took = time.monotonic() - t0
    print(f"\nreplacement test: w2 (new transactional.id) finished {n} requests {took:.0f}s after the kill")


def test_a_warm_standby_takes_over_a_killed_worker_at_once_and_loses_and_duplicates_nothing(
        settings: Settings, tmp_path: Path, unique: str) -> None:
    """TTS_WORKER_SLOTS=1: the second worker loads its model, readies its producer under its own
    transactional id and waits; when the serving one is SIGKILLed it takes its slot (the group member),
    ends the dead one's open transaction beside its start, and answers the rest."""
    import socket
    import urllib.request

    from streams.identity import slot_holder

    n = 40
    prefix = f"sb-{unique}"
    s = settings.replace(worker_slots=1, transactional_id_prefix=prefix)
    with Supervisor(tmp_path / "logs") as sup:
        w1 = sup.worker("w1", s, claim_id=True)
        sup.wait_ready(w1, timeout=90)
        w2 = sup.worker("w2", s, claim_id=True)
        sup.wait_ready(w2, timeout=90)  # a standby answers /readyz once its model is loaded
        with urllib.request.urlopen(f"http://127.0.0.1:{w2.metrics_port}/readyz", timeout=5) as r:
            assert r.read().decode().startswith("standby")
        assert w1.popen is not None and slot_holder("member", s.kafka.bootstrap_servers, prefix, 0) == w1.popen.pid
        publish(settings, corpus(n, "standby"))  # now: the standby's start (at the lowest priority) waits for w1's
        _wait(lambda: _metric(w1.metrics_port, "ttsflow_worker_completions_total") >= 1, 120, "a first completion",
              sup)
        assert _metric(w1.metrics_port, "ttsflow_worker_completions_total") < n, "make the corpus bigger"
        assert _metric(w2.metrics_port, "ttsflow_worker_completions_total") == 0
        sup.kill("w1", signal.SIGKILL)
        _wait(lambda: "event=standby_takeover" in w2.log_path.read_text(), 30, "the standby's takeover", sup)
        _check_exactly_once(settings, n, "standby")
        assert _metric(w2.metrics_port, "ttsflow_worker_completions_total") >= 1
        log = w2.log_path.read_text()
    host = socket.gethostname()
    assert f"event=worker_started transactional_id={prefix}-{host}-1 member={prefix}-{host}-0 " in log
    assert f"event=last_holder_fenced transactional_id={prefix}-{host}-0 " in log  # w1's, ended at once
    print("\nstandby test: " + " | ".join(line[11:23] + " " + line.split("event=")[1][:60] for line in log.splitlines()
                                          if any(f"event={e}" in line for e in ("standby_takeover", "last_holder_fenced",
                                                                               "worker_started", "assigned"))))
