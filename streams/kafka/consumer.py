"""The worker's partitioned consumer: which partitions this process owns, which it paused, which it must rewind.

Invariants:

* :attr:`assigned` is what the group gave this process (updated from the rebalance
  callbacks, which run inside :meth:`consume`); :attr:`paused` is always a subset of it.
* A partition in :attr:`rewind_pending` admits no record (:meth:`admits`) until it has been
  sought back to its committed offset (the start when it has none): work dropped after an
  abort, a wedged producer or an S3 outage is redone from what is durable, never skipped.
* A static member (``group.instance.id``: the worker's transactional id) restarted after a
  crash gets its partitions back without waiting for the session timeout. librdkafka sends
  no LeaveGroup for a static member on close (KIP-345: the broker waits for it to come
  back), so a clean stop (SIGTERM, a scale-down) calls :func:`leave_group` after closing:
  the group rebalances at once instead of idling the partitions for a session timeout.
* A consumer librdkafka declares fatally failed is replaced by a new one, when a factory is
  given: the only fatal consumer error is a static member fenced by its own instance id, which
  a broker restart can cause (the session timed out on the restarted coordinator, the rejoin
  with the old member id was fenced, and the old consumer polled on for ever, answering
  nothing). Its partitions count as lost (their work is dropped and redone from committed
  offsets); the new consumer joins under the same instance id. At most
  ``_MAX_REPLACEMENTS`` in ``_REPLACEMENT_WINDOW_S`` (two live processes with one id would
  fence each other in turn): beyond that the error is fatal for the process.
* A consumer whose partitions were lost (librdkafka's ``on_lost``: its session ended, e.g. around
  a broker restart) and that is given none back within ``_REJOIN_AFTER_S`` is replaced once by a
  new one under the same instance id (:meth:`rejoin_if_stranded`): CI saw a worker poll on for
  3.5 minutes after such a loss with nothing assigned and nothing reported. Once per loss, and not
  counted as a fatal replacement: a worker with no partition to own (more workers than partitions)
  is stranded once at most, then left alone.
* A rewind is one attempt: right after a broker restart the group's offsets can be
  unreadable until the consumer has polled (a lost session is served by poll), so a failed
  one stays pending and the loop polls and tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from streams.errors import FatalError, classify
from streams.kafka.config import aiokafka_auth
from streams.settings import KafkaSettings

__all__ = ["PartitionedConsumer", "consume_ready", "leave_group"]

_log = logging.getLogger("ttsflow.worker")

_REWIND_TIMEOUT_S = 10.0  # one attempt at reading committed offsets; a failed rewind is retried by the loop
_MAX_REPLACEMENTS, _REPLACEMENT_WINDOW_S = 3, 300.0
_REJOIN_AFTER_S = 45.0  # lost partitions not given back in this long: join again with a new consumer


def consume_ready(consumer: Any, n: int, timeout: float) -> list[Any]:
    """Up to ``n`` records without waiting for ``n``: those already fetched; if none, the first to
    arrive within ``timeout`` and whatever was fetched with it.

    librdkafka's ``consume(n, timeout)`` returns when it has ``n`` records *or* the timeout
    passed, so a reader asking for a batch waits out its whole timeout for a single record:
    ``consume(32, 0.2)`` handed over a lone record after a median 124 ms here, ``consume(1, 0.2)``
    after 1.2 ms. Every ttsflow reader that waits for records (the worker's segments, the
    client's answers and chunks, the tools) goes through this."""
    msgs: list[Any] = consumer.consume(n, 0)
    if msgs or timeout <= 0:
        return msgs
    msgs = consumer.consume(1, timeout)
    if msgs and n > 1:
        msgs.extend(consumer.consume(n - 1, 0))
    return msgs


class PartitionedConsumer:
    """A group consumer of one topic (confluent-kafka ``Consumer``, or a fake with its methods)."""

    def __init__(self, consumer: Any, topic: str, *, factory: Callable[[], Any] | None = None) -> None:
        self._c = consumer
        self.topic = topic
        self.assigned: set[int] = set()
        self.paused: set[int] = set()
        self.rewind_pending: set[int] = set()
        self._last_error_log = -1e9
        self._factory = factory
        self._callbacks: dict[str, Callable[..., None]] = {}
        self._replaced_at: list[float] = []
        self.abandoned: list[Any] = []  # replaced consumers (closing one that failed may block: a thread does)
        self._lost = False  # partitions were lost and none has been assigned since
        self._lost_since: float | None = None

    def subscribe(self, *, on_assign: Callable[..., None], on_revoke: Callable[..., None],
                  on_lost: Callable[..., None]) -> None:
        def lost(consumer: Any, partitions: list[Any]) -> None:
            self._lost = True
            on_lost(consumer, partitions)

        self._callbacks = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": lost}
        self._c.subscribe([self.topic], **self._callbacks)

    def consume(self, n: int, timeout: float) -> list[Any]:
        return consume_ready(self._c, n, timeout)

    def admits(self, partition: int) -> bool:
        """A record of ``partition`` may be taken: owned, and not waiting to be re-read from committed."""
        return partition in self.assigned and partition not in self.rewind_pending

    def group_metadata(self) -> Any:
        return self._c.consumer_group_metadata()

    # -- assignment (called from the rebalance callbacks) ----------------------------------
    def assign(self, new: set[int]) -> None:
        self.assigned |= new

    def revoke(self, gone: set[int]) -> None:
        self.assigned -= gone
        self.paused -= gone
        self.rewind_pending -= gone  # the next owner (maybe this process again) starts from the committed offset

    # -- flow ---------------------------------------------------------------------------
    def set_paused(self, want: set[int]) -> None:
        """Pause exactly ``want`` (of the assigned partitions), resume the rest."""
        from confluent_kafka import TopicPartition

        pause = [TopicPartition(self.topic, p) for p in want - self.paused if p in self.assigned]
        resume = [TopicPartition(self.topic, p) for p in self.paused - want if p in self.assigned]
        if pause:
            self._c.pause(pause)
        if resume:
            self._c.resume(resume)
        self.paused = set(want) & self.assigned

    def apply_backpressure(self, held: dict[int, int], budget: int) -> None:
        """The read-ahead, bounded by bytes: past ``budget`` (bytes of records read and not yet
        synthesized, ``held`` per partition) pause only the partitions holding their share of it,
        so one partition's long request never keeps the others' records out. Below the budget
        nothing is paused: a long request's segments and the records behind it in its partition
        are read at once (their order of service is the batcher's), so other users of that
        partition wait for their turn in the fair order, not for the whole request to be read.
        Each unpaused partition adds at most one poll's worth past its share."""
        if sum(held.values()) < budget:
            self.set_paused(set())
            return
        share = max(1, budget // max(1, len(self.assigned)))
        self.set_paused({p for p in self.assigned if held.get(p, 0) >= share})

    def note_error(self, err: Any, now: float) -> None:
        """Errors delivered by poll are informational (the client retries) unless librdkafka says fatal:
        then the consumer is replaced (see the module doc) or, past the limit, ``FatalError``."""
        from confluent_kafka import KafkaError

        if err.fatal() or err.code() == KafkaError._FATAL:  # poll delivers the fatal state as _FATAL
            self._replaced_at = [t for t in self._replaced_at if now - t < _REPLACEMENT_WINDOW_S]
            if self._factory is None or len(self._replaced_at) >= _MAX_REPLACEMENTS:
                raise FatalError(f"consumer failed: {err.str()}")
            self._replace(err.str(), now)
            return
        if now - self._last_error_log >= 5.0:  # e.g. the topic does not exist yet: say so, not 50 times a second
            self._last_error_log = now
            _log.warning("event=consumer_error code=%s error=%s", err.name(), err.str())

    def rejoin_if_stranded(self, now: float) -> None:
        """Called every turn: replace the consumer once when lost partitions were not given back
        within ``_REJOIN_AFTER_S`` (see the module doc)."""
        if not self._lost or self._factory is None:
            return
        if self.assigned:
            self._lost, self._lost_since = False, None
        elif self._lost_since is None:
            self._lost_since = now
        elif now - self._lost_since >= _REJOIN_AFTER_S:
            self._replace(f"no partition given back {now - self._lost_since:.0f} s after they were lost", now,
                          counted=False)

    def _replace(self, why: str, now: float, *, counted: bool = True) -> None:
        import threading

        from confluent_kafka import TopicPartition

        assert self._factory is not None
        gone = sorted(self.assigned)
        if gone and "on_lost" in self._callbacks:  # drop their work first: it is redone from committed offsets
            self._callbacks["on_lost"](self._c, [TopicPartition(self.topic, p) for p in gone])
        old, self._c = self._c, self._factory()
        self.assigned.clear()
        self.paused.clear()
        self.rewind_pending.clear()
        if counted:
            self._replaced_at.append(now)
        self._lost, self._lost_since = False, None
        self.abandoned.append(old)
        threading.Thread(target=_close_quietly, args=(old,), name="consumer-close", daemon=True).start()
        if self._callbacks:
            self._c.subscribe([self.topic], **self._callbacks)
        _log.error("event=consumer_replaced partitions_lost=%s error=%s", gone, why)

    def rewind(self, partitions: set[int]) -> None:
        """Seek each partition back to its committed offset (the start if none); one attempt,
        a partition whose rewind fails stays in :attr:`rewind_pending`."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        if not partitions:
            return
        self.rewind_pending |= partitions
        try:
            committed = self._c.committed([TopicPartition(self.topic, p) for p in sorted(partitions)],
                                          _REWIND_TIMEOUT_S)
            for tp in committed:
                if tp.error is not None:
                    raise KafkaException(tp.error)
                self._c.seek(TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException as e:
            exc = classify(e, during="")
            if isinstance(exc, FatalError):
                raise exc from e
            _log.warning("event=rewind_pending partitions=%s error=%s", sorted(partitions), e)
            return
        self.rewind_pending -= partitions
        _log.info("event=rewound partitions=%s", sorted(partitions))

    def member_id(self) -> str | None:
        """This member's id in the group (None before it joined)."""
        try:
            return self._c.memberid() or None  # type: ignore[no-any-return]
        except (RuntimeError, AttributeError):  # closed, or a fake without it
            return None

    def close(self) -> None:
        self._c.close()


def _close_quietly(consumer: Any) -> None:
    try:
        consumer.close()
    except Exception as e:  # a failed consumer may refuse to close; it is abandoned either way
        _log.info("event=replaced_consumer_close_failed error=%s", e)


def leave_group(kafka: KafkaSettings, group: str, member_id: str, *, timeout_s: float = 5.0) -> bool:
    """Remove ``member_id`` (a static member after its consumer closed) from ``group`` now: a LeaveGroup
    by member id removes a static member too, and the group rebalances at once. One attempt, bounded
    (the session timeout covers a failure); True if the broker confirmed. The request goes through
    aiokafka's client (already a dependency: the stage's), confluent-kafka has no API for it."""
    import asyncio

    from aiokafka import errors as kafka_errors
    from aiokafka.client import AIOKafkaClient, CoordinationType
    from aiokafka.protocol.group import LeaveGroupRequest

    async def leave() -> None:
        client = AIOKafkaClient(bootstrap_servers=kafka.bootstrap_servers, client_id="ttsflow-leave-group",
                                request_timeout_ms=int(timeout_s * 1000), **aiokafka_auth(kafka))
        try:
            await client.bootstrap()
            node = await client.coordinator_lookup(CoordinationType.GROUP, group)
            resp = await client.send(node, LeaveGroupRequest(group, member_id))
            err = kafka_errors.for_code(resp.error_code)
            if err is not kafka_errors.NoError:
                raise err()
        finally:
            await client.close()

    try:
        asyncio.run(asyncio.wait_for(leave(), timeout_s))
    except (kafka_errors.KafkaError, OSError, TimeoutError) as e:
        _log.warning("event=leave_group_failed group=%s member_id=%s error=%r", group, member_id, e)
        return False
    _log.info("event=left_group group=%s member_id=%s", group, member_id)
    return True
