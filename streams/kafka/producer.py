"""The worker's transactional producer: bounded calls on one thread, retried when retriable, replaced when wedged.

This module is the mechanism; :class:`~streams.worker.checkpoint.Checkpoint` is the one owner of
the transaction protocol (it alone begins, commits and aborts, through :meth:`run` and
:meth:`bounded`). Invariants:

* Every transactional call runs on one helper thread (the *txn thread*), so at most one
  transaction is in flight. A call made through :meth:`bounded` is waited for at most
  ``OP_TIMEOUT_S + wedge_grace_s`` (5 s by default), beating ``/healthz`` meanwhile; one
  still running then is *wedged* (librdkafka's ``send_offsets_to_transaction`` after the group
  coordinator's broker died, librdkafka#5456 and #5511) and raises :class:`~streams.errors.ProducerWedged`. Work handed to
  :meth:`run` returns at once; :meth:`check` raises ``ProducerWedged`` when a call made in it
  through :meth:`call` has run that long. A call that times out by librdkafka's own
  ``OP_TIMEOUT_S`` is retriable and is retried, so a slow broker costs retries, not a wedge.
* A wedged producer is left behind with its thread (:attr:`abandoned`) and a new one with the
  same ``transactional.id`` takes over (:meth:`replace`): its ``init_transactions`` fences the
  old one and completes or aborts its open transaction before returning, so the committed
  offsets read next are final.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from streams.errors import (
    AbortableError,
    FatalError,
    ProducerBroken,
    ProducerWedged,
    RetriableError,
    StreamError,
    classify,
)
from streams.kafka.retry import call_with_retry

__all__ = ["OP_TIMEOUT_S", "WEDGE_GRACE_S", "Record", "TransactionalProducer", "produce_record", "transaction_error"]

_log = logging.getLogger("ttsflow.worker")
_T = TypeVar("_T")

# librdkafka's own timeout for each transactional call; a call that times out is retried (a commit
# resumes), so this bounds how long one attempt waits, not how long a slow broker may take
OP_TIMEOUT_S = 3.0
# a call still running this long past OP_TIMEOUT_S is wedged: given up after 5 s. librdkafka returns
# _TIMED_OUT on time except from coordinator requests (send_offsets_to_transaction), which ignore it
# (librdkafka#5456) and hang for good once the group coordinator's broker died and was dropped from
# the metadata (#5511): waiting longer only stalls the worker's partitions; replacing the producer
# costs ~1 s and a redo of uncommitted work, never a duplicate (the new one fences the old)
WEDGE_GRACE_S = 2.0

Record = tuple[str, bytes, "bytes | None", "int | None"]  # topic, key, value (None: a tombstone), partition


# Fatal errors of librdkafka's idempotence layer: this producer instance's sequence state is lost
# (a produce possibly persisted on a leader that died, then OUT_OF_ORDER_SEQUENCE_NUMBER on the
# new one: seen once in chaos --kill-brokers), not a newer instance fencing it
_BROKEN_NAMES = frozenset({"OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_ID_MAPPING",
                           "DUPLICATE_SEQUENCE_NUMBER", "_INCONSISTENT", "_GAPLESS_GUARANTEE"})


def transaction_error(e: Exception, *, during: str = "transaction") -> StreamError:
    """A ``KafkaException`` inside an open transaction, classified: a retriable one becomes
    abortable (the open transaction cannot be resumed: abort and redo); a fatal one of the
    idempotence layer :class:`ProducerBroken` (replace the producer, not the process)."""
    exc = classify(e, during=during)
    if type(exc) is RetriableError:
        exc = AbortableError(str(exc))
    elif type(exc) is FatalError:
        err = getattr(exc, "kafka_error", None)
        name = getattr(err, "name", None)
        if callable(name) and name() in _BROKEN_NAMES:
            broken = ProducerBroken(str(exc))
            broken.kafka_error = err  # type: ignore[attr-defined]
            exc = broken
    return exc


class TransactionalProducer:
    """One ``transactional.id``'s librdkafka producer and its txn thread, replaced under the same id
    when a call wedges. Used from the loop's thread only (work given to :meth:`run` runs on the txn thread)."""

    def __init__(self, new_producer: Callable[[], Any], *, producer: Any = None, wedge_grace_s: float,
                 heartbeat: Callable[[], None], on_replaced: Callable[[], None],
                 stopping: Callable[[], bool]) -> None:
        self._new = new_producer
        self._p = producer or new_producer()
        self.wedge_grace_s = wedge_grace_s
        self._heartbeat = heartbeat
        self._on_replaced = on_replaced
        self._stopping = stopping
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="txn")
        self.abandoned: list[Any] = []  # producers replaced while a call of theirs was wedged
        self._call_since: float | None = None  # when the txn thread's current librdkafka call began

    # -- calls ---------------------------------------------------------------------------
    def bounded(self, what: str, fn: Callable[[Any], _T], *, retry: bool = True, in_txn: bool = True) -> _T:
        """``fn(producer)`` on the txn thread, waited for at most ``OP_TIMEOUT_S + wedge_grace_s``
        (beating /healthz), else :class:`ProducerWedged`; retriable errors backed off and retried
        (``retry``), others raised classified (``in_txn``: as a step of an open transaction)."""
        producer = self._p

        def once() -> _T:
            fut = self._pool.submit(fn, producer)
            deadline = time.monotonic() + OP_TIMEOUT_S + self.wedge_grace_s
            while True:
                try:
                    return fut.result(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
                except FutureTimeout:
                    self._heartbeat()
                    if time.monotonic() >= deadline:
                        raise ProducerWedged(f"{what} still running {self.wedge_grace_s:.0f} s past its "
                                             f"{OP_TIMEOUT_S:.0f} s timeout") from None

        return call_with_retry(what, once, stopping=self._stopping, in_txn=in_txn) if retry else once()

    def run(self, work: Callable[[Any], _T]) -> Future[_T]:
        """``work(producer)`` on the txn thread; returns at once. Inside it, librdkafka calls that may
        block go through :meth:`call` so that :meth:`check` can tell a wedged one."""
        return self._pool.submit(work, self._p)

    def call(self, what: str, fn: Callable[[], _T]) -> _T:
        """Inside :meth:`run`'s work: ``fn()`` timed for :meth:`check`, retriable errors retried."""
        def timed() -> _T:
            self._call_since = time.monotonic()
            try:
                return fn()
            finally:
                self._call_since = None
        return call_with_retry(what, timed, stopping=self._stopping, in_txn=True)

    def check(self, fut: Future[_T]) -> _T | None:
        """The outcome of :meth:`run`'s work: its result once done, None while it runs; raises its
        error, or :class:`ProducerWedged` when its current call has run ``OP_TIMEOUT_S + wedge_grace_s``."""
        if fut.done():
            return fut.result()
        since = self._call_since
        if since is not None and time.monotonic() - since >= OP_TIMEOUT_S + self.wedge_grace_s:
            raise ProducerWedged(f"a transactional call still running {self.wedge_grace_s:.0f} s past its "
                                 f"{OP_TIMEOUT_S:.0f} s timeout")
        return None

    # -- the session -----------------------------------------------------------------------
    def init_transactions(self) -> None:
        """init_transactions on the current producer (fences older instances of this transactional.id
        and ends their open transaction); a wedged one is replaced by a fresh producer."""
        while True:
            try:
                self.bounded("init_transactions", lambda p: p.init_transactions(OP_TIMEOUT_S), in_txn=False)
                return
            except ProducerWedged as e:
                if self._stopping():
                    raise FatalError(f"stopping with a wedged producer: {e}") from e
                _log.error("event=producer_wedged op=init_transactions error=%s", e)
                self._abandon()

    def replace(self) -> None:
        """A call is wedged: a new producer with the same transactional.id takes over (its
        init_transactions fences the old one and ends the open transaction)."""
        self._abandon()
        self.init_transactions()

    def _abandon(self) -> None:
        """Leave the current producer (and the thread stuck in it) behind; start a new one."""
        self.abandoned.append(self._p)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="txn")
        self._p = self._new()
        self._call_since = None
        self._on_replaced()

    def close(self) -> None:
        self._p.flush(10)
        self._pool.shutdown(wait=False, cancel_futures=True)  # a call wedged at close is left behind


def produce_record(producer: Any, record: Record) -> None:
    """``producer.produce`` of one record, waiting for deliveries while the local queue is full."""
    topic, key, value, partition = record
    kwargs: dict[str, Any] = {"key": key, "value": value}
    if partition is not None:
        kwargs["partition"] = partition
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.1)
