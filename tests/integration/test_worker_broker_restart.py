"""A worker rides out a broker restart: it stays alive, /healthz recovers, nothing is lost or doubled.

The broker is stopped (SIGTERM) for about ten seconds while requests are in flight and
started again. What a user would notice is counted the way the kill tests count it: a
``read_committed`` reader of the completions topic, by request id. The chaos run found a
worker hung after such a restart (a transactional call that ignored its timeout,
librdkafka#5456: the worker now replaces its producer) and one that exited fatally on an
unflagged offsets error; either fails this test.

It runs on a PRIVATE stack (its own ``TTS_HOME`` in a temp dir and its own ports, Kafka
jars shared with the main stack's home), never the shared one, and takes it down at the end.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from streams.devstack import stack
from streams.devstack.pidfiles import reap
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from tests.support.metrics import metric_sum
from tests.support.pipeline import by_request, check_audio, completions, corpus

pytestmark = pytest.mark.integration

_DOWN_S = 10.0  # how long the broker stays down: the outage itself, not a wait for a condition
_STACK_UP_S = 420.0  # a KRaft broker on a loaded 2-core machine has taken over 3 minutes to start


@pytest.fixture
def private(private_stack: Settings, unique: str) -> Settings:
    """A stack of this test's own (see ``private_stack``), 2 partitions, this test's topics."""
    base = private_stack
    s = base.replace(partitions=2, topic_segments=f"{base.kafka.topic_segments}.{unique}",
                     topic_completed=f"{base.kafka.topic_completed}.{unique}", topic_done=f"{base.kafka.topic_done}.{unique}",
                     worker_group=f"{base.kafka.worker_group}-{unique}", s3_prefix=f"test/{unique}/", max_wait_ms=20,
                     transaction_timeout_ms=20_000)
    stack.ensure_topics(s, partitions=2)
    return s


def _publish(settings: Settings, segments: list) -> None:  # type: ignore[type-arg]
    """Like test_worker.publish, but patient: a broker on a loaded machine can take long to ack."""
    from confluent_kafka import Producer

    from schemas import encode

    p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random",
                  "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 300_000})
    for s in segments:
        p.produce(settings.kafka.topic_segments, key=s.user_id.encode(), value=encode(s))
    assert p.flush(300) == 0, "the private broker did not take the segments"


def _healthz(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def _answered(settings: Settings) -> int:
    try:
        return len(by_request(completions(settings, timeout=5)))
    except Exception:  # the broker is down or still loading: nothing readable yet
        return 0


def _restart_broker(settings: Settings) -> float:
    """Stop the private broker by its PID, keep it down ``_DOWN_S``, start it again; seconds down."""
    pid = stack.status(settings)["kafka"].get("pid")
    assert pid is not None, "the private broker is not running"
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    deadline = t0 + 60
    while Path(f"/proc/{pid}").exists():
        reap(pid)
        assert time.monotonic() < deadline, "the broker did not stop within 60 s"
        time.sleep(0.1)
    time.sleep(_DOWN_S)
    stack.stack_up(settings, quiet=True, timeout=_STACK_UP_S)
    return time.monotonic() - t0


@pytest.mark.broker_restart
def test_worker_survives_broker_restart_and_answers_every_request_once(private: Settings, tmp_path: Path) -> None:
    n = 200  # ~15 s of work for one worker on a quiet 2-core machine: the restart lands mid-run
    _publish(private, corpus(n, "brk"))
    with Supervisor(tmp_path / "logs") as sup:
        w = sup.worker("w1", private)
        sup.wait_ready(w, timeout=120)
        deadline = time.monotonic() + 120
        # the restart begins at the first committed answer, read off the worker's metrics (a
        # completions reader takes seconds per look, in which a fast worker answers them all)
        while (before := int(metric_sum(w.metrics_port, "ttsflow_worker_completions_total"))) < 1:
            sup.check_alive()
            assert time.monotonic() < deadline, "the worker answered nothing before the restart"
            time.sleep(0.1)
        assert before < n, "the worker finished before the broker restart; make the corpus bigger"

        down_s = _restart_broker(private)

        statuses: list[int | None] = []
        deadline = time.monotonic() + 240
        while _answered(private) < n:
            sup.check_alive()  # a fatal exit fails here, with the log's tail
            statuses.append(_healthz(w.metrics_port))
            assert time.monotonic() < deadline, f"not every request answered after the restart; {w.log_path}"
            time.sleep(1)
        deadline = time.monotonic() + 60
        while (h := _healthz(w.metrics_port)) != 200:
            sup.check_alive()
            assert time.monotonic() < deadline, f"/healthz still {h} after the restart; {w.log_path}"
            time.sleep(0.5)

        cs = completions(private, count=n, timeout=60)
        counts = by_request(cs)
        assert counts == Counter({f"brk-{i}": 1 for i in range(n)}), {k: v for k, v in counts.items() if v != 1}
        for c in cs:
            check_audio(private, c)
        log = w.log_path.read_text(errors="replace")
        assert w.popen is not None and w.popen.poll() is None, "the worker exited"
        codes = sup.stop_all()
    assert codes == {"w1": 0}, codes
    assert "event=fatal" not in log
    print(f"\nbroker restart: down {down_s:.1f}s; {before} of {n} answered before; /healthz during recovery "
          f"{Counter(statuses)}; worker restarts 0; retries logged {log.count('event=retry')}")
