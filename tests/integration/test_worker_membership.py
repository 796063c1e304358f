"""Workers are static group members (``group.instance.id`` = transactional id), measured on the real broker.

* SIGKILL, then a restart under the same identity: the restarted worker is given its
  partitions back at once (the broker knows the instance id), not after the session
  timeout (10 s), and answers a request published after the kill.
* SIGTERM (a scale-down): the stopped worker leaves the group (librdkafka sends no
  LeaveGroup for a static member; :func:`streams.kafka.consumer.leave_group` does), so the
  remaining worker owns every partition within a few seconds, not after a session timeout.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from schemas import decode_completion
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from tests.support.metrics import metric_sum
from tests.support.pipeline import make_segments, publish

pytestmark = pytest.mark.integration

_SERVE_S = 5.0  # the goal: a restarted worker serves its partitions again within 5 s


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, transaction_timeout_ms=20_000)


def _until(pred, timeout: float, what: str, sup: Supervisor | None) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``pred()`` holds (``sup``: its processes must stay alive meanwhile)."""
    t0 = time.monotonic()
    while not pred():
        if sup is not None:
            sup.check_alive()
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


def _assigned(port: int) -> float:
    try:
        return metric_sum(port, "ttsflow_worker_assigned_partitions", timeout=1)
    except OSError:
        return -1.0


class _Answers:
    """One ``read_committed`` reader of the completions topic, polled as the test goes (a new reader
    per check would spend most of a second just joining the topic)."""

    def __init__(self, settings: Settings) -> None:
        self.c = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 50})
        self.c.assign([TopicPartition(settings.kafka.topic_completed, p, OFFSET_BEGINNING)
                       for p in range(settings.kafka.partitions)])
        self.seen: set[str] = set()

    def has(self, rid: str) -> bool:
        for m in self.c.consume(100, 0.05):
            if m.error() is None:
                self.seen.add(decode_completion(m.value() or b"").request_id)
        return rid in self.seen

    def close(self) -> None:
        self.c.close()


def test_sigkilled_worker_restarted_under_its_identity_serves_again_at_once(settings: Settings,
                                                                         tmp_path: Path) -> None:
    parts = settings.kafka.partitions
    with Supervisor(tmp_path / "logs") as sup:
        w = sup.worker("w1", settings)
        sup.wait_ready(w, timeout=90)
        _until(lambda: _assigned(w.metrics_port) >= parts, 60, "first assignment", sup)
        warm = _Answers(settings)
        publish(settings, make_segments("warm", "user-1", "Warm up the worker."))
        _until(lambda: warm.has("warm"), 60, "the warm-up answer", sup)
        warm.close()
        sup.kill("w1", signal.SIGKILL)
        t_kill = time.monotonic()
        publish(settings, make_segments("after", "user-2", "Published while the worker was dead."))
        answers = _Answers(settings)
        sup.restart("w1")
        sup.wait_ready(w, timeout=90)
        t_ready = time.monotonic()
        assigned_s = _until(lambda: _assigned(w.metrics_port) >= parts, 60, "partitions after the restart", sup)
        committed_s = assigned_s + _until(lambda: metric_sum(w.metrics_port, "ttsflow_worker_completions_total",
                                                             timeout=1) >= 1, 60, "the answer's commit", sup)
        seen_s = committed_s + _until(lambda: answers.has("after"), 60, "the answer after the restart", sup)
        answers.close()
    print(f"\nSIGKILL restart: process up (ready) {t_ready - t_kill:.2f} s after the kill; then all {parts} "
          f"partitions in {assigned_s:.2f} s, the request published meanwhile committed {committed_s:.2f} s "
          f"and read {seen_s:.2f} s after ready ({time.monotonic() - t_kill:.2f} s after the kill)")
    assert seen_s < _SERVE_S, "the restarted worker waited for its old session to time out"


def test_sigtermed_worker_leaves_so_the_other_takes_its_partitions_at_once(settings: Settings,
                                                                          tmp_path: Path) -> None:
    parts = settings.kafka.partitions
    with Supervisor(tmp_path / "logs") as sup:
        w1 = sup.worker("w1", settings)
        w2 = sup.worker("w2", settings)
        sup.wait_ready(w1, timeout=90)
        sup.wait_ready(w2, timeout=90)
        _until(lambda: _assigned(w1.metrics_port) >= 1 and _assigned(w2.metrics_port) >= 1
               and _assigned(w1.metrics_port) + _assigned(w2.metrics_port) == parts, 60, "both assigned", sup)
        t0 = time.monotonic()
        code = sup.kill("w2", signal.SIGTERM)
        stopped_s = time.monotonic() - t0
        took = stopped_s + _until(lambda: _assigned(w1.metrics_port) >= parts, 60, "w1 owning every partition", None)
        answers = _Answers(settings)
        publish(settings, make_segments("scaled", "user-3", "Answered after the scale-down."))
        _until(lambda: answers.has("scaled"), 60, "an answer after the scale-down", None)
        answers.close()
        log = w2.log_path.read_text()
    print(f"\nSIGTERM scale-down: w2 exited {code} in {stopped_s:.2f} s; w1 owned all {parts} partitions "
          f"{took:.2f} s after the SIGTERM")
    assert code == 0
    assert "event=left_group" in log
    assert took < _SERVE_S, "the stopped worker's partitions idled for a session timeout"
