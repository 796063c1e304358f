"""Kafka errors are classified by librdkafka's own flags, in the order fatal > abortable > retriable."""

from __future__ import annotations

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


def test_a_broker_leaving_the_metadata_is_retriable_on_offset_calls() -> None:
    """chaos --brokers 3 --kill-brokers: a worker's done-log ``offsets_for_times`` failed with
    _DESTROY_BROKER (unflagged) while the killed broker left the metadata, and the worker exited."""
    err = KafkaException(KafkaError(KafkaError._DESTROY_BROKER,
                                    "Failed to get offsets: Local: Broker handle destroyed without termination"))
    assert type(classify(err)) is RetriableError
    assert type(classify(KafkaError(KafkaError._NODE_UPDATE, "Broker node update"))) is RetriableError


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


def test_worker_main_ends_on_the_one_root_by_its_kind() -> None:
    from streams.errors import StorageFatal
    from streams.worker.main import _exit_code

    assert _exit_code(FatalError("fenced"), stopping=False) == 1
    assert _exit_code(StorageFatal("access denied"), stopping=False) == 1
    assert _exit_code(RetriableError("broker down"), stopping=True) == 0  # told to stop while still retrying
    assert _exit_code(AbortableError("broker down"), stopping=False) == 1


ERROR_MODULES = ["streams.errors", "streams.client.errors", "streams.devstack.errors", "storage.errors",
                 "engine.errors", "schemas.errors"]


@pytest.mark.parametrize("name", ERROR_MODULES)
def test_every_errors_module_exports_exactly_its_error_types_under_one_root(name: str) -> None:
    import importlib

    mod = importlib.import_module(name)
    defined = {n for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, BaseException)
               and v.__module__ == name and not n.startswith("_")}
    exported = {n for n in mod.__all__ if isinstance(getattr(mod, n), type)}
    assert defined == exported, f"{name}: __all__ misses {sorted(defined - exported)} or lists {sorted(exported - defined)}"
    roots = {n for n in defined if not any(issubclass(getattr(mod, n), getattr(mod, m)) and m != n for m in defined)}
    if name == "streams.client.errors":  # the client's tree hangs under streams' root
        from streams.errors import StreamError
        assert all(issubclass(getattr(mod, n), StreamError) for n in defined)
    else:
        assert len(roots) == 1, f"{name}: more than one root: {sorted(roots)}"


def test_every_exception_class_of_the_project_derives_from_the_one_root() -> None:
    """Import every module of schemas, engine, storage and streams (an optional extra that is not
    installed is skipped) and check each exception class defined there, private ones included."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import importlib, inspect, json, pkgutil, sys\n"
        "from schemas import TtsflowError\n"
        "seen, bad, skipped = [], [], []\n"
        "for pkg in ('schemas', 'engine', 'storage', 'streams'):\n"
        "    base = importlib.import_module(pkg)\n"
        "    names = [pkg] + [m.name for m in pkgutil.walk_packages(base.__path__, prefix=pkg + '.')]\n"
        "    for name in names:\n"
        "        if name.endswith('__main__'):\n"
        "            continue\n"
        "        try:\n"
        "            mod = importlib.import_module(name)\n"
        "        except ImportError as e:\n"  # an optional extra (torch, faust, ...) missing
        "            skipped.append(f'{name}: {e}')\n"
        "            continue\n"
        "        for n, v in vars(mod).items():\n"
        "            if inspect.isclass(v) and issubclass(v, BaseException) and v.__module__ == name:\n"
        "                seen.append(f'{name}.{n}')\n"
        "                if not issubclass(v, TtsflowError):\n"
        "                    bad.append(f'{name}.{n}')\n"
        "print(json.dumps({'seen': seen, 'bad': bad, 'skipped': skipped}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["bad"] == []
    assert {"schemas.errors.SchemaError", "engine.errors.EngineError", "storage.errors.StorageError",
            "streams.errors.StreamError", "streams.devstack.errors.DevStackError",
            "streams.worker.joiner._ObjectFailed", "streams.cli.synth._Usage"} <= set(got["seen"])
