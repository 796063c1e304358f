"""Kafka errors are classified by librdkafka's own flags, in the order fatal > abortable > retriable."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.errors import AbortableError, FatalError, RetriableError, StreamError, classify


def test_fenced_is_fatal_even_if_also_flagged_otherwise() -> None:
    err = KafkaError(KafkaError._FENCED, "fenced", fatal=True, retriable=True, txn_requires_abort=True)
    assert isinstance(classify(err), FatalError)


def test_txn_requires_abort_is_abortable_and_retriable_kind() -> None:
    exc = classify(KafkaException(KafkaError(KafkaError._STATE, "abort me", txn_requires_abort=True)))
    assert isinstance(exc, AbortableError) and isinstance(exc, RetriableError)


def test_timeout_is_retriable_not_abortable() -> None:
    exc = classify(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True), during="commit_transaction")
    assert type(exc) is RetriableError
    assert "commit_transaction" in str(exc)


def test_unflagged_error_aborts_inside_a_transaction_and_is_fatal_outside() -> None:
    err = KafkaError(KafkaError.INVALID_CONFIG, "bad config")
    assert isinstance(classify(err, during="transaction"), AbortableError)
    assert isinstance(classify(err), FatalError)


def test_one_root_and_the_kafka_error_is_kept() -> None:
    err = KafkaError(KafkaError._TRANSPORT, "down", retriable=True)
    exc = classify(err)
    assert isinstance(exc, StreamError)
    assert exc.kafka_error is err  # type: ignore[attr-defined]


def test_unreachable_broker_is_retriable_even_unflagged() -> None:
    assert type(classify(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))) is RetriableError
    assert type(classify(KafkaError(KafkaError._ALL_BROKERS_DOWN, "down"))) is RetriableError


def test_side_by_side_workers_get_distinct_ids_and_a_restart_reuses_the_freed_one(tmp_path: Path) -> None:
    """Two workers on one host must never share a transactional.id (they would fence each other);
    a worker started after one died takes the dead one's id (its open transaction is aborted)."""
    import subprocess
    import sys as _sys

    code = ("import sys, time; from pathlib import Path; from streams.settings import load_settings; "
            "from streams.worker import claim_transactional_id; "
            "print(claim_transactional_id(load_settings(env={}), lock_dir=Path(sys.argv[1])), flush=True); "
            "time.sleep(60)")
    procs = [subprocess.Popen([_sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        ids = [p.stdout.readline().strip() for p in procs if p.stdout]
        assert len(set(ids)) == 2 and all(i.startswith("ttsflow-worker-") for i in ids)
        slot0 = min(ids, key=lambda i: int(i.rsplit("-", 1)[1]))
        dead = procs[ids.index(slot0)]
        dead.kill()
        dead.wait(10)
        again = subprocess.Popen([_sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        procs.append(again)
        assert again.stdout is not None and again.stdout.readline().strip() == slot0
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
            if p.stdout:
                p.stdout.close()


# -- offset look-ups right after a broker restart: unflagged by librdkafka, yet transient -------

def test_offsets_fetch_leader_epoch_fenced_is_retriable() -> None:
    """The chaos run's fatal exit: ``offsets_for_times``/``committed`` fail with FENCED_LEADER_EPOCH,
    unflagged, while the restarted broker's metadata settles; retrying succeeds."""
    err = KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH,
                                    "Failed to get offsets: Broker: Leader epoch is older than broker epoch"))
    exc = classify(err)
    assert type(exc) is RetriableError
    assert "Leader epoch" in str(exc)


def test_coordinator_moving_and_timeouts_on_offset_calls_are_retriable() -> None:
    for code in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                 KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.UNKNOWN_LEADER_EPOCH,
                 KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._WAIT_COORD):
        exc = classify(KafkaException(KafkaError(code, "Failed to get committed offsets")))
        assert type(exc) is RetriableError, (KafkaError(code).name(), exc)


def test_transient_names_do_not_override_librdkafka_flags() -> None:
    """A name on the transient list never hides a fatal or abortable flag."""
    fatal = KafkaError(KafkaError.NOT_COORDINATOR, "x", fatal=True)
    assert isinstance(classify(fatal), FatalError)
    abortable = KafkaError(KafkaError.FENCED_LEADER_EPOCH, "x", txn_requires_abort=True)
    assert type(classify(abortable, during="commit_transaction")) is AbortableError


def test_real_misconfiguration_is_still_fatal_outside_a_transaction() -> None:
    for code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                 KafkaError.INVALID_CONFIG, KafkaError._FENCED):
        assert isinstance(classify(KafkaError(code, "no")), FatalError), KafkaError(code).name()


# -- the loop never hangs on a Kafka call, and offset look-ups that fail are redone ---------------

def _rig():  # type: ignore[no-untyped-def]
    from tests.unit.test_worker_loop import Rig

    return Rig()


def test_a_call_that_ignores_its_timeout_ends_the_worker_instead_of_hanging_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """librdkafka's send_offsets_to_transaction can block past its timeout after a broker restart:
    the loop must give up (ClientWedged, a FatalError: exit, the orchestrator restarts it) while
    /healthz keeps beating up to then."""
    import threading
    import time

    from streams.errors import ClientWedged
    from tests.unit.test_worker_loop import segments

    monkeypatch.setattr("streams.worker._OP_TIMEOUT_S", 0.2)
    monkeypatch.setattr("streams.worker._WEDGE_GRACE_S", 1.0)
    rig = _rig()
    release = threading.Event()
    beats: list[float] = []
    real_beat = rig.metrics.heartbeat
    monkeypatch.setattr(rig.metrics, "heartbeat", lambda: (beats.append(time.monotonic()), real_beat())[1])
    called: list[float] = []

    def stuck(tps, meta, timeout):  # type: ignore[no-untyped-def]
        called.append(time.monotonic())
        release.wait(60)

    rig.producer.send_offsets_to_transaction = stuck  # type: ignore[method-assign]
    rig.publish(0, segments("h", "u1", ["Hang here."]))
    try:
        with pytest.raises(ClientWedged):
            rig.run()
        t0 = called[0]
        took = time.monotonic() - t0
        assert len(called) == 1 and took < 10, (called, took)  # 0.2 s timeout + 1 s grace, on a loaded machine
        assert rig.worker._wedged
        assert any(b > t0 + 0.5 for b in beats), "no heartbeat while waiting for the stuck call"
        assert rig.completions() == []
    finally:
        release.set()
        rig.close()  # skips every client call: returns at once


def test_rewind_whose_committed_lookup_fails_is_redone_before_consuming(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An abort's rewind that cannot read committed offsets (broker restarting) does not crash the
    worker nor skip the dropped work: the rewind stays pending and the request is answered once."""
    from collections import Counter

    from tests.unit.test_worker_loop import segments

    monkeypatch.setattr("streams.worker._backoff", lambda attempt: 0.0)
    monkeypatch.setattr("streams.worker._RETRY_BUDGET_S", 0.0)  # give up at once: back to the loop
    rig = _rig()
    try:
        rig.producer.fail_commit = [KafkaException(KafkaError(KafkaError._STATE, "abort", txn_requires_abort=True))]
        epoch = KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH,
                                          "Failed to get committed offsets: Broker: Leader epoch is older"))
        fails = [epoch, epoch]
        real = rig.consumer.committed

        def committed(tps, timeout):  # type: ignore[no-untyped-def]
            if fails:
                raise fails.pop(0)
            return real(tps, timeout)

        rig.consumer.committed = committed  # type: ignore[method-assign]
        rig.publish(0, segments("r", "u1", ["Rewind me.", "Twice over."]))
        rig.publish(1, segments("q", "u2", ["Me too."]))
        rig.run(40)
        assert not fails
        assert "abort" in rig.producer.calls
        assert not rig.worker._rewind_pending
        assert Counter(c.request_id for c in rig.completions()) == Counter({"r": 1, "q": 1})
    finally:
        rig.close()


def test_commit_that_never_completes_exits_instead_of_aborting(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A timed-out commit is retried, never aborted (it may have committed); when it keeps failing past
    the budget the worker exits non-zero and the restarted instance's init_transactions settles it."""
    from tests.unit.test_worker_loop import segments

    monkeypatch.setattr("streams.worker._backoff", lambda attempt: 0.0)
    monkeypatch.setattr("streams.worker._RETRY_BUDGET_S", 0.3)
    rig = _rig()
    try:
        slow = KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True))
        rig.producer.fail_commit = [slow] * 10_000
        rig.publish(0, segments("c", "u1", ["Never commits."]))
        with pytest.raises(FatalError, match="commit_transaction"):
            rig.run()
        assert "abort" not in rig.producer.calls
        assert rig.producer.calls.count("commit") >= 2
    finally:
        rig.producer.fail_commit = []
        rig.close()
