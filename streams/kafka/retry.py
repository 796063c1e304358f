"""Retrying librdkafka calls: a retriable error backs off (capped, jittered) and goes again; any other raises classified.

Invariant: only an error librdkafka calls retriable is retried (:func:`streams.errors.classify`
decides); abortable, fatal and configuration errors reach the caller at once, as
:class:`~streams.errors.StreamError` subclasses chained to the ``KafkaException``. While the
process is stopping a retriable error is given three more tries, not forever.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from streams.errors import RetriableError, classify

__all__ = ["backoff", "call_with_retry"]

_log = logging.getLogger("ttsflow.worker")

_BACKOFF_BASE_S = 0.2
_BACKOFF_CAP_S = 10.0


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): doubling from 0.2 s, capped at 10 s, jittered."""
    return min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** attempt) * random.uniform(0.5, 1.0)


def call_with_retry(what: str, fn: Callable[[], Any], *, stopping: Callable[[], bool], in_txn: bool = False) -> Any:
    """Call ``fn``, retrying librdkafka-retriable errors with capped backoff; others raise classified.
    ``in_txn``: the call is part of an open transaction (classified with ``during=what``)."""
    from confluent_kafka import KafkaException

    attempt = 0
    while True:
        try:
            return fn()
        except KafkaException as e:
            exc = classify(e, during=what if in_txn else "")
            if type(exc) is not RetriableError or (stopping() and attempt >= 3):
                raise exc from e
            _log.warning("event=retry op=%s attempt=%d error=%s", what, attempt, e.args[0].str())
            time.sleep(backoff(attempt))
            attempt += 1
