"""Worker transactional ids on one host, with ``ttsflow worker`` subprocesses claiming their
default id (``TTS_TRANSACTIONAL_ID`` unset), as an operator running them by hand would.

The collision these guard against (issue 18): a worker of group A and one of group B on
the same host both claimed ``ttsflow-worker-<host>-0``, so the second fenced the first
and group A's requests were never answered. Counted the usual way: a ``read_committed``
reader of each group's completions topic, by request id.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from schemas import Completion, encode
from streams.devstack.procs import Proc, Supervisor
from streams.devstack.stack import ensure_topics
from streams.ops.lag import LagReader
from streams.settings import Settings
from tests.integration.conftest import drain_topic
from tests.support.metrics import metric_sum
from tests.support.pipeline import SENTENCES, by_request, check_audio, completions, corpus, make_segments, publish

pytestmark = pytest.mark.integration

HOST = socket.gethostname()


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, transaction_timeout_ms=20_000)


def readyz(proc: Proc) -> dict[str, str]:
    """The names ``/readyz`` gives after its first line (``transactional_id``, ``group``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/readyz", timeout=5) as r:
        lines = r.read().decode().splitlines()
    assert lines[0] == "ready", lines
    return dict(line.split("=", 1) for line in lines[1:])


def _requests(s: Settings, n: int, tag: str, users: int = 11) -> list[str]:
    segs = []
    for i in range(n):
        text = f"{SENTENCES[i % len(SENTENCES)][:-1]}, number {i} of {tag}."
        segs += make_segments(f"{tag}-{i}", f"user-{i % users}", text)
    publish(s, segs)
    return [f"{tag}-{i}" for i in range(n)]


def _answered_once(s: Settings, rids: list[str], timeout: float = 180) -> list[Completion]:
    cs = completions(s, count=len(rids), timeout=timeout)
    counts = by_request(cs)
    lost = set(rids) - set(counts)
    assert not lost and all(counts[r] == 1 for r in rids), f"lost={sorted(lost)} counts={dict(counts)}"
    for c in cs:
        check_audio(s, c)
    return cs


def _fenced(proc: Proc) -> bool:
    log = proc.log_path.read_text(errors="replace").lower()
    return "fenced" in log or "event=fatal" in log


def test_two_groups_on_one_host_both_commit_under_their_own_ids(settings: Settings, unique: str,
                                                               tmp_path: Path) -> None:
    a = settings
    b = settings.replace(topic_segments=f"{a.kafka.topic_segments}.b", topic_completed=f"{a.kafka.topic_completed}.b",
                         topic_done=f"{a.kafka.topic_done}.b", worker_group=f"tts-zh-{unique}")
    ensure_topics(b, partitions=4)
    want_a, want_b = _requests(a, 15, "ga"), _requests(b, 15, "gb")
    with Supervisor(tmp_path / "logs") as sup:
        wa, wb = sup.worker("wa", a, claim_id=True), sup.worker("wb", b, claim_id=True)
        for w in (wa, wb):
            sup.wait_ready(w, timeout=120)
        ida, idb = readyz(wa), readyz(wb)
        # without TTS_WORKER_SLOTS the static group member is the transactional id
        assert ida == {"transactional_id": f"{a.kafka.worker_group}-{HOST}-0", "member": f"{a.kafka.worker_group}-{HOST}-0",
                       "group": a.kafka.worker_group}
        assert idb == {"transactional_id": f"{b.kafka.worker_group}-{HOST}-0", "member": f"{b.kafka.worker_group}-{HOST}-0",
                       "group": b.kafka.worker_group}
        _answered_once(a, want_a)
        _answered_once(b, want_b)
        # `ttsflow lag --json` shows who holds the group: the worker's client id is its transactional id
        with LagReader(a.kafka, a.scaling) as reader:
            _state, members = reader.describe_members(a.kafka.worker_group, a.kafka.topic_segments)
        assert [m.client_id for m in members] == [ida["transactional_id"]]
        assert members[0].partitions == [0, 1, 2, 3]
        sup.check_alive()  # neither was fenced
        assert not _fenced(wa) and not _fenced(wb)
        codes = sup.stop_all()
    assert codes == {"wa": 0, "wb": 0}
    print(f"\ntwo groups: {ida['transactional_id']} answered 15/15, {idb['transactional_id']} answered 15/15")


def test_two_workers_of_one_group_get_different_ids_and_both_commit(settings: Settings, tmp_path: Path) -> None:
    want = _requests(settings, 24, "same", users=23)
    with Supervisor(tmp_path / "logs") as sup:
        w1 = sup.worker("w1", settings, claim_id=True)
        sup.wait_ready(w1, timeout=120)  # first, so it holds slot 0
        w2 = sup.worker("w2", settings, claim_id=True)
        sup.wait_ready(w2, timeout=120)
        ids = [readyz(w)["transactional_id"] for w in (w1, w2)]
        assert ids == [f"{settings.kafka.worker_group}-{HOST}-0", f"{settings.kafka.worker_group}-{HOST}-1"]
        _answered_once(settings, want)
        sup.check_alive()
        assert not _fenced(w1) and not _fenced(w2)
        codes = sup.stop_all()
    assert codes == {"w1": 0, "w2": 0}
    print(f"\none group: {ids[0]} and {ids[1]}, 24 requests answered once")


def test_a_sigkilled_worker_restarted_on_the_host_takes_its_id_and_fences_its_zombie(settings: Settings,
                                                                                     tmp_path: Path) -> None:
    """The zombie is a producer with the killed worker's id and a transaction open (what a
    SIGKILL mid-transaction leaves, or an old instance cut off from the network, made
    certain here): the restarted worker's ``init_transactions`` must abort that transaction
    and fence the producer, so its record is never visible and its commit fails."""
    segs = corpus(40, "kz")  # long requests, no two segments alike: busy when killed
    publish(settings, segs)
    want = [f"kz-{i}" for i in range(40)]
    with Supervisor(tmp_path / "logs") as sup:
        w = sup.worker("w1", settings, claim_id=True)
        sup.wait_ready(w, timeout=120)
        first = readyz(w)["transactional_id"]
        assert first == f"{settings.kafka.worker_group}-{HOST}-0"
        deadline = time.monotonic() + 120
        while metric_sum(w.metrics_port, "ttsflow_worker_completions_total") < 1:  # busy: killed at its first answer
            sup.check_alive()
            assert time.monotonic() < deadline, "no completion within 120 s"
            time.sleep(0.1)
        sup.kill("w1", signal.SIGKILL)
        answered_at_kill = len(completions(settings, timeout=5))
        assert answered_at_kill < len(want), "the worker finished before it could be killed; publish more"

        zombie = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "transactional.id": first,
                           "transaction.timeout.ms": 120_000})
        zombie.init_transactions(30)
        zombie.begin_transaction()
        ghost = Completion(request_id="zombie-0", user_id="user-0", status="ok", completed_at=datetime.now(UTC))
        zombie.produce(settings.kafka.topic_completed, key=b"user-0", value=encode(ghost))
        assert zombie.flush(30) == 0  # in the log, uncommitted

        sup.restart("w1")
        sup.wait_ready(w, timeout=120)  # ready only after its init_transactions
        again = readyz(w)["transactional_id"]
        assert again == first
        with pytest.raises(KafkaException) as fenced:
            zombie.commit_transaction(30)
        err = fenced.value.args[0]
        assert err.fatal() or "fenc" in err.str().lower() or "epoch" in err.str().lower(), err
        cs = _answered_once(settings, want)
        assert "zombie-0" not in by_request(cs)
        raw = drain_topic(settings.kafka.bootstrap_servers, settings.kafka.topic_completed, isolation="read_uncommitted",
                          timeout=30)
        assert any(m.value() == encode(ghost) for m in raw), "the zombie's record should be in the log, aborted"
        sup.check_alive()
    print(f"\nkill + restart: {first} before, {again} after; {answered_at_kill} of {len(want)} answered at the kill; "
          f"zombie's commit: {err.name()} ({err.str()}); its record aborted; all {len(want)} answered once")


def test_the_prelude_fences_the_dead_instance_and_ends_the_transaction_it_left_open(settings: Settings) -> None:
    """A restarted worker fences its predecessor while its model loads (``streams.worker.prelude``): the
    transaction the killed one left open is aborted (``read_committed`` readers get past it, never see
    it), the old producer can no longer commit, and the new one's transactions commit."""
    from streams.kafka import transactional_config
    from streams.worker.prelude import KafkaPrelude

    s = settings.replace(transactional_id=f"prelude-{settings.kafka.worker_group}")
    topic = s.kafka.topic_completed
    old = Producer(transactional_config(s.kafka))
    old.init_transactions(10)
    old.begin_transaction()
    old.produce(topic, key=b"k", value=b"left open by the killed worker")
    assert old.flush(10) == 0

    ready = KafkaPrelude(s).start().result()
    assert ready.producer is not None, "init_transactions did not finish in the prelude"
    assert ready.done_partitions is not None and ready.done_partitions >= s.kafka.partitions
    with pytest.raises(KafkaException):  # fenced: the dead instance's transaction can never commit
        old.commit_transaction(10)
    new = ready.producer
    new.begin_transaction()
    new.produce(topic, key=b"k", value=b"the new worker's answer")
    new.commit_transaction(10)
    seen = [m.value() for m in drain_topic(s.kafka.bootstrap_servers, topic, count=1, timeout=30)]
    assert seen == [b"the new worker's answer"]
