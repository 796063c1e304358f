"""Errors of the streaming layer, and how a Kafka error maps onto them.

One root, :class:`StreamError`, three kinds, each with one reaction:

* :class:`RetriableError`: back off (capped, exponential) and try the same step again.
* :class:`AbortableError`: the current transaction cannot commit; abort it and rewind
  every assigned partition to its committed offset (a retriable kind: the work repeats).
* :class:`PoisonError`: bad input; answer it (failed completion or dead letter) and move on.
* :class:`FatalError`: stop the process with a non-zero status; the orchestrator restarts
  it (a fenced producer, an unknown transactional id, bad configuration).

:func:`classify` reads librdkafka's own flags on a ``KafkaError`` (``fatal()``,
``txn_requires_abort()``, ``retriable()``) in that order, so the meaning is librdkafka's,
not a guess from the error name. It duck-types the error and so imports no client.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["AbortableError", "FatalError", "PoisonError", "RetriableError", "StreamError", "classify"]


class StreamError(Exception):
    """Root of ttsflow's streaming errors."""


class RetriableError(StreamError):
    """Transient: back off and retry the same step."""


class AbortableError(RetriableError):
    """The open transaction must be aborted; the consumed work is redone from committed offsets."""


class PoisonError(StreamError):
    """An input that can never succeed; record it and move on."""


class FatalError(StreamError):
    """The process cannot go on (fenced, misconfigured); exit non-zero."""


class _KafkaErrorLike(Protocol):
    def fatal(self) -> bool: ...
    def txn_requires_abort(self) -> bool: ...
    def retriable(self) -> bool: ...
    def str(self) -> str: ...


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
    elif err.retriable():
        exc = RetriableError(text)
    elif during:
        exc = AbortableError(text)
    else:
        exc = FatalError(text)
    exc.kafka_error = err  # type: ignore[attr-defined]
    return exc
