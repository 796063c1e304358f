"""Kafka errors are classified by librdkafka's own flags, in the order fatal > abortable > retriable."""

from __future__ import annotations

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
