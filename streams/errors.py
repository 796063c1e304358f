"""Errors of the streaming layer, and how a Kafka error maps onto them.

One root, :class:`StreamError` (what ``ttsflow worker`` catches; itself under the project's
:class:`~schemas.TtsflowError`), and under it the kinds,
each with one reaction:

* :class:`RetriableError`: back off (capped, exponential) and try the same step again.
* :class:`AbortableError` (retriable): the current transaction cannot commit; abort it and
  rewind every assigned partition to its committed offset (the work repeats).
* :class:`ProducerWedged` (abortable): a transactional call hangs past its timeout, or
  (:class:`ProducerBroken`) librdkafka declared the producer unusable without fencing it; replace
  the producer under the same ``transactional.id``, then as abortable.
* :class:`FatalError`: stop the process with a non-zero status; the orchestrator restarts
  it (a fenced producer, an unknown transactional id, too few done-topic partitions);
  :class:`StorageFatal` when S3 or Redis refuse the configuration (access denied, no bucket);
  :class:`KafkaAccessError` when the cluster refuses this client (authentication, TLS, ACLs).
* :class:`SettingsError`: a setting is missing, unparsable or out of bounds (exit 2 at start).

Bad input (poison) is never raised: the worker answers it with a failed completion and
the stage dead-letters or rejects it, each in the step that found it, so nothing needs
catching. The client's errors are :mod:`streams.client.errors`, under the same root.

:func:`classify` reads librdkafka's own flags on a ``KafkaError`` (``fatal()``,
``txn_requires_abort()``, ``retriable()``) in that order, so the meaning is librdkafka's,
not a guess from the error name. Two groups of errors librdkafka leaves unflagged are
retriable by name: local transport failures (broker unreachable, timed out) on metadata
and admin calls, and the broker's transient leadership/coordinator answers to offset
look-ups (``committed()``, ``position()``, ``offsets_for_times()``), which come back
unflagged right after a broker restart (leader epoch fenced, not coordinator,
coordinator loading). It duck-types the error and so imports no client.
"""

from __future__ import annotations

from typing import Any, Protocol

from schemas.errors import TtsflowError

__all__ = [
    "AbortableError", "FatalError", "KafkaAccessError", "ProducerBroken", "ProducerWedged", "RetriableError", "SettingsError", "StorageFatal", "StreamError",
    "classify",
]


class StreamError(TtsflowError):
    """Root of ttsflow's streaming errors."""


class RetriableError(StreamError):
    """Transient: back off and retry the same step."""


class AbortableError(RetriableError):
    """The open transaction must be aborted; the consumed work is redone from committed offsets."""


class ProducerWedged(AbortableError):
    """A transactional producer call did not return long past its own timeout (librdkafka's
    ``send_offsets_to_transaction`` can ignore it after a broker restart, librdkafka#5456):
    the producer is replaced by one with the same ``transactional.id``, which fences it and
    aborts its transaction, and the consumed work is redone from committed offsets."""


class ProducerBroken(ProducerWedged):
    """librdkafka declared the transactional producer instance unusable though no other instance
    fenced it: a fatal idempotence error (``OUT_OF_ORDER_SEQUENCE_NUMBER``, "sequence
    desynchronization", after a partition leader died under a produce that was possibly
    persisted). Replaced like a wedged one: a new producer with the same ``transactional.id`` bumps
    the epoch (its sequences start over), fences this one and aborts its transaction; exiting the
    process would do the same, slower. A fenced producer (another instance took over) stays fatal."""


class FatalError(StreamError):
    """The process cannot go on (fenced, misconfigured); exit non-zero."""


class StorageFatal(FatalError):
    """S3 or Redis refused the configuration (access denied, no bucket): not an outage, retrying cannot help."""


class KafkaAccessError(FatalError):
    """The cluster refused this client: SASL authentication or the TLS handshake failed, or an
    ACL the process needs is missing. Configuration, not an outage: retrying cannot help."""


class SettingsError(StreamError, ValueError):
    """A setting is missing, unparsable or out of bounds."""


class _KafkaErrorLike(Protocol):
    def fatal(self) -> bool: ...
    def txn_requires_abort(self) -> bool: ...
    def retriable(self) -> bool: ...
    def str(self) -> str: ...


# Local errors librdkafka raises unflagged from admin and metadata calls while the broker
# is unreachable; the same call succeeds once it is back.
_TRANSPORT_NAMES = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_MSG_TIMED_OUT", "_RESOLVE"})


# Broker answers that mean "not now": leadership or a coordinator is moving (a broker
# restarted or a partition's leader changed). librdkafka returns them unflagged from offset
# look-ups ("Failed to get offsets: Broker: Leader epoch is older than broker epoch"); the
# same call succeeds once metadata is refreshed.
_TRANSIENT_BROKER_NAMES = frozenset({
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER",
    "LEADER_NOT_AVAILABLE", "NOT_COORDINATOR", "NOT_COORDINATOR_FOR_GROUP", "COORDINATOR_NOT_AVAILABLE",
    "GROUP_COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "GROUP_LOAD_IN_PROGRESS",
    "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION", "OFFSET_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR",
    "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REPLICA_NOT_AVAILABLE",
    "UNSTABLE_OFFSET_COMMIT", "_WAIT_COORD", "_IN_PROGRESS", "_PREV_IN_PROGRESS",
    # A broker that leaves the cluster's metadata (fenced by the controller after a SIGKILL, on a
    # three-broker cluster) has its handle destroyed: requests queued on it fail with these, and the
    # same call succeeds on the partition's new leader (the worker exited on it, chaos --kill-brokers).
    "_DESTROY_BROKER", "_NODE_UPDATE",
})


def _name(err: Any) -> str | None:
    name = getattr(err, "name", None)
    return name() if callable(name) else None


def _is_transport(err: Any) -> bool:
    return _name(err) in _TRANSPORT_NAMES


def _is_transient(err: Any) -> bool:
    """Unflagged by librdkafka, yet retrying succeeds: transport failures and transient broker answers."""
    name = _name(err)
    return name in _TRANSPORT_NAMES or name in _TRANSIENT_BROKER_NAMES


def classify(err: _KafkaErrorLike | Any, *, during: str = "") -> StreamError:
    """The ttsflow error for a librdkafka ``KafkaError`` (or a ``KafkaException`` holding one).

    Errors that are neither fatal, abortable nor retriable are treated as abortable inside
    a transaction step (``during`` names it) and as fatal otherwise: librdkafka says
    retrying will not help, and an unclassified transactional state must not commit.
    """
    if isinstance(err, BaseException) and err.args:
        err = err.args[0]
    text = f"{during}: {err.str()}" if during else err.str()
    if err.fatal():
        exc: StreamError = FatalError(text)
    elif err.txn_requires_abort():
        exc = AbortableError(text)
    elif err.retriable() or _is_transient(err):
        exc = RetriableError(text)
    elif during:
        exc = AbortableError(text)
    else:
        exc = FatalError(text)
    exc.kafka_error = err  # type: ignore[attr-defined]
    return exc
