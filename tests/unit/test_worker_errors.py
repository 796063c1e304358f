"""Kafka errors are classified by librdkafka's own flags, in the order fatal > abortable > retriable."""

from __future__ import annotations

from pathlib import Path

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
