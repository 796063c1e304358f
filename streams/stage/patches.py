"""faust-streaming / aiokafka patches the stage needs to lose nothing across restarts.

Each patch names the library version it was written against and the failure it prevents;
each has a test (tests/unit/test_stage_core.py, tests/integration/test_stage_kill.py).
Targets: faust-streaming 0.15.3 (``faust.tables.recovery.Recovery``, ``faust.App``'s
consumer ``ack`` / ``_new_offset`` / ``seek_to_committed``) and aiokafka 0.14
(``GroupCoordinator._maybe_leave_group``, the fetcher's subscription state). On an upgrade,
re-run ``ttsflow bench stage --kill`` and ``ttsflow chaos`` before trusting them.

**Guarantee** (``settings.stage.stage_guarantee``: ``at_least_once``, the only one accepted;
``exactly_once`` is refused at load for the reasons measured below). What a
``read_committed`` reader of the segments topic saw in ``ttsflow bench stage --kill``
(2 stage processes, 4 partitions, 100 requests/s, SIGKILLs with immediate restarts,
crashed stages restarted as an orchestrator would; faust-streaming 0.15.3, aiokafka
0.14, Kafka 3.9; counted by ``(request_id, seq)``):

* ``at_least_once`` -- **the stage gives at-least-once, nothing lost.** 3,000 requests /
  4 kills: 0 lost, 10 duplicated segments (2 requests); 4,000 requests / 6 kills: 0
  lost, 9 duplicated (2 requests); no crash. Plain producer; the stage awaits the
  delivery of a request's outputs before it records the id in the table, so a crash can
  repeat a request's segments (the input offset was not committed) but never marks a
  request seen whose segments were lost. **Input offsets are committed only for records
  the agent processed** (:func:`guard_consumer_acks`): faust's stream *acks* events it
  skips in a rebalance (older consumer generation, flow suspended) and the event an agent
  crashed on, and those acks let its commit move past requests the stage never finished
  (``ttsflow chaos``: 18 requests published during a stage restart, offsets 67-84 of one
  partition, committed past and never answered). faust's table check "changelog has 0
  partitions" (``PartitionsMismatch``), which crashed the agent mid-record right after
  every restart, is skipped. And a commit must start at the committed offset:
  faust's own check lets a run of acked offsets start one past it (or anywhere when it is
  0); ``tests/integration/test_stage_kill.py`` lost a request that way (a partition handed
  the agent offsets 0 then 2; 1 was committed past). Holes in what the agent is handed are
  logged as ``input_gap``. The worker drops repeated ``(request_id,
  seq)``, and its transactional completion record makes the end-to-end answer
  exactly-once anyway.
* ``exactly_once`` -- faust's: one transactional producer per assigned input partition
  (pre-KIP-447, ``transactional.id = <app id>-<group>-<partition>``) committing that
  partition's offsets. faust's ``topic.send`` picks the transaction of the *destination*
  partition; this stage sends every output through the transaction of the *source*
  partition instead, so outputs, the table's changelog and the offsets of one input
  partition commit together. **Broken under SIGKILL:** with 4 kills it never duplicated
  or lost a committed segment, but both stages crashed twice in table recovery
  (``ConsistencyError``: "persisted offset ... higher than highwater (205 > -1)") and
  only an outside restart brought them back; with 6 kills they crash-looped 12 times
  (``ConsistencyError``, ``ValueError: Offset must be a positive integer`` in recovery's
  seek) and 11,836 of 22,210 segments were still missing 60 s after the last one came.
  With faust's ``recovery_consistency_check`` off they stopped crashing but stalled:
  2,763 segments missing after 80 s, more records in the log than committed. Rebalances
  also log ``Invalid state transition IN_TRANSACTION -> IN_TRANSACTION`` (faust begins
  transactions on producers already in one). Latency is bounded by the commit interval
  (``TTS_STAGE_COMMIT_INTERVAL_MS``) as segments become visible only at commit.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = [
    "PassedOffsets",
    "fetch_in_turns",
    "fetch_state",
    "fetch_timeout",
    "guard_consumer_acks",
    "hold_read_offsets",
    "leave_group_on_stop",
    "read_committed_input",
    "seek_uncommitted_to_start",
    "stage_app_class",
    "take_turns",
]

_log = logging.getLogger("ttsflow.stage")


def _seek_before_resume() -> None:
    """Make faust's end of table recovery seek the stream partitions *before* resuming them.

    ``Recovery.on_recovery_completed`` resumes the stream partitions, then awaits the seek
    to committed offsets, while the flow is already running (it was resumed to read the
    changelogs). In between, the fetcher hands the agent records from wherever the
    position was; when the seek lands, the rest of that fetch is still being handed out
    and faust drops the re-fetched records below the last offset it handed out, past a
    hole: seen as ``input_gap`` (offsets 39-47 of a partition never processed) right
    after a stage restart, and the partition's commit stuck behind the hole. Here
    ``resume_partitions`` calls made during it are held until it returns. Process-wide
    (the stage process runs only this app).
    """
    from faust.tables.recovery import Recovery

    if getattr(Recovery, "_ttsflow_seek_first", False):
        return
    completed = Recovery.on_recovery_completed

    async def on_recovery_completed(self: Any, generation_id: int = 0) -> None:
        consumer = self.app.consumer
        held: list[set[Any]] = []
        consumer.resume_partitions = lambda tps: held.append(set(tps))
        try:
            await completed(self, generation_id)
        finally:
            del consumer.resume_partitions  # the class's method again
            for tps in held:
                consumer.resume_partitions(tps)

    Recovery.on_recovery_completed = on_recovery_completed  # type: ignore[method-assign]
    Recovery._ttsflow_seek_first = True  # type: ignore[attr-defined]


def stage_app_class() -> type:
    """faust.App whose consumer commits only offsets of input records the agent processed."""
    import weakref

    import faust

    _seek_before_resume()

    class StageApp(faust.App):  # type: ignore[misc]
        """See :func:`guard_consumer_acks`."""

        _guarded_topic: str | None = None
        _processed: weakref.WeakSet[Any]
        # (partition) -> the offset a partition is being fetched again from, or None (streams.stage.watch.Refetch)
        refetching: Callable[[int], int | None] = staticmethod(lambda partition: None)

        def guard_acks(self, topic: str) -> None:
            self._guarded_topic = topic
            self._processed = weakref.WeakSet()

        def mark_processed(self, message: Any) -> None:
            """The agent is done with ``message`` (outputs delivered): its offset may be committed."""
            if self._guarded_topic is not None:
                self._processed.add(message)

        def _new_consumer(self) -> Any:
            consumer = super()._new_consumer()
            if self._guarded_topic is not None:
                guard_consumer_acks(consumer, self._guarded_topic, self._processed)
                seek_uncommitted_to_start(consumer, self._guarded_topic)
                hold_read_offsets(consumer, self._guarded_topic, lambda partition: self.refetching(partition))
            return consumer

    return StageApp


def fetch_in_turns(held_wait_s: float = 0.003) -> None:
    """Make aiokafka hand out the records of its partitions in turns, not one partition's whole fetch first.

    aiokafka 0.14's ``Fetcher.fetched_records(max_records=N)`` takes records from the partitions in the
    order their fetches came back and keeps a partition with records left at the front: one flooded
    partition (a fetch returns whole producer batches, thousands of tiny records) is handed out N at a
    time until it is empty, while every other partition's fetched records wait behind it, and faust's
    round-robin only mixes what one call returned. Measured: other users' one-sentence requests waited
    63 s (p50) behind one user's 100,000 tiny pieces in another partition, and the input watchdog saw
    their partitions stall (``ttsflow bench streaming-input --hostile``). Here, after each call, a
    partition that still has records goes to the back of the line, so each partition gets a turn of at
    most ``broker_max_poll_records`` (``TTS_STAGE_POLL_RECORDS``) in turn. Process-wide (the stage
    process runs only this app); the order within a partition is unchanged.

    And a partition whose queue in front of the agent is full is waited for briefly, not for a whole
    poll: faust then leaves it out of the partitions it asks for (``Consumer.on_buffer_full``) and
    asks with a 1-s timeout; aiokafka, with that partition's records already fetched and no other
    partition's coming, sleeps out the timeout although the agent has emptied the queue and faust has
    put the partition back in the meantime. Measured under one user's flood of 10,000 requests: the
    stage idle most of the time, ~400 records a second; here the wait is at most ``held_wait_s``
    (``TTS_STAGE_HELD_FETCH_MS``) while a partition is held back that way (:func:`fetch_timeout`).
    """
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    AIOKafkaConsumerThread._ttsflow_held_wait_s = held_wait_s  # type: ignore[attr-defined]
    if getattr(AIOKafkaConsumerThread, "_ttsflow_turns", False):
        return
    fetch = AIOKafkaConsumerThread._fetch_records

    async def _fetch_records(self: Any, consumer: Any, active_partitions: Any, timeout: float | None = None,
                             max_records: int | None = None) -> Any:
        timeout = fetch_timeout(timeout, getattr(self.consumer, "_buffered_partitions", None),
                                wait_s=AIOKafkaConsumerThread._ttsflow_held_wait_s)  # type: ignore[attr-defined]
        drained = await fetch(self, consumer, active_partitions, timeout=timeout, max_records=max_records)
        take_turns(getattr(consumer._fetcher, "_records", None), drained)
        return drained

    AIOKafkaConsumerThread._fetch_records = _fetch_records  # type: ignore[method-assign]
    AIOKafkaConsumerThread._ttsflow_turns = True  # type: ignore[attr-defined]


def fetch_timeout(timeout: float | None, buffered: Any, *, wait_s: float) -> float | None:
    """The wait for fetched records: at most ``wait_s`` while faust holds a partition back because its
    queue is full (``buffered``: faust's ``Consumer._buffered_partitions``), so it is asked for again
    as soon as its queue drains."""
    if buffered and (timeout is None or timeout > wait_s):
        return wait_s
    return timeout


def take_turns(fetched: Any, drained: Any) -> None:
    """Move each partition just handed out (``drained``) that still has records buffered to the back
    of ``fetched`` (aiokafka's ``Fetcher._records``, an OrderedDict, read front to back)."""
    if not drained or not fetched:
        return
    for tp in drained:
        if tp in fetched:
            fetched.move_to_end(tp)


def seek_uncommitted_to_start(consumer: Any, topic: str) -> None:
    """Make faust's seek to committed offsets seek a ``topic`` partition that has none to its start.

    After a rebalance faust suspends the flow, clears the queues of what was fetched, and
    seeks every partition back to its committed offset; aiokafka skips a partition without
    one, so the fetcher goes on from where its prefetch stopped and the cleared records are
    never handed to the agent. Seen right after a stage restart, before its first commit:
    offsets 16-35 of a partition skipped (``input_gap``), or a whole partition fetched and
    dropped so the agent never saw one of its records. With no committed offset, what the
    stage must process is everything from the start (``auto.offset.reset`` is earliest);
    records it already answered are dropped as duplicates.
    """
    seek_to_committed = consumer.seek_to_committed

    async def seek_to_committed_or_start() -> Any:
        committed = await seek_to_committed()
        missing = [tp for tp, off in committed.items() if tp.topic == topic and (off is None or off < 0)]
        if missing:
            starts = await consumer.earliest_offsets(*missing)
            for tp in missing:
                start = starts.get(tp, 0) or 0
                await consumer.seek(tp, start)
                _log.info("event=seek_uncommitted partition=%d offset=%d", tp.partition, start)
        return committed

    consumer.seek_to_committed = seek_to_committed_or_start


class PassedOffsets:
    """Offsets of the input partitions a ``read_committed`` fetch passed over as it should: records of
    aborted transactions and transaction markers. Noted on the consumer's thread as aiokafka unpacks
    each fetch (:func:`read_committed_input`), read by the agent and the input watchdog, which must
    not take them for records faust dropped. The last ``keep`` ranges per partition."""

    def __init__(self, keep: int = 512) -> None:
        self._ranges: dict[int, deque[tuple[int, int]]] = {}
        self._keep = keep

    def note(self, partition: int, start: int, end: int) -> None:
        """Offsets ``[start, end)`` of ``partition`` hold nothing a reader is handed."""
        if start < end:
            ranges = self._ranges.get(partition)
            if ranges is None:
                ranges = self._ranges[partition] = deque(maxlen=self._keep)
            ranges.append((start, end))

    def covered(self, partition: int, start: int, end: int) -> bool:
        """Whether every offset of ``[start, end)`` was passed over that way."""
        at = start
        for a, b in sorted(list(self._ranges.get(partition, ()))):  # a copy: the consumer's thread appends
            if a > at:
                break
            at = max(at, b)
            if at >= end:
                return True
        return at >= end


def read_committed_input(topic: str, passed: PassedOffsets) -> None:
    """Make the stage read its input ``read_committed``, and note what that skips in ``topic``.

    faust reads ``read_committed`` only under its ``exactly_once`` guarantee (``Consumer.in_transaction``),
    which the stage does not run (see above): a request published in a transaction its producer then
    aborted was answered (checked on the real broker: five aborted, all five answered). aiokafka's
    consumer takes its isolation level at ``start``, so it is set on the consumer faust creates. A
    transaction's records and its marker take offsets the stage is never handed; aiokafka's unpacking
    of each fetch notes those ranges (``passed``), so the hole and stall checks tell them from records
    faust dropped. Process-wide (the stage process runs only this app)."""
    from aiokafka.consumer.fetcher import PartitionRecords
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    AIOKafkaConsumerThread._ttsflow_passed = (topic, passed)  # type: ignore[attr-defined]
    if getattr(AIOKafkaConsumerThread, "_ttsflow_read_committed", False):
        return
    create = AIOKafkaConsumerThread._create_worker_consumer
    unpack = PartitionRecords._unpack_records

    def _create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = create(self, transport)
        consumer._isolation_level = "read_committed"  # read by its start(), which builds the fetcher
        return consumer

    def _unpack_records(self: Any) -> Any:
        where, noted = AIOKafkaConsumerThread._ttsflow_passed  # type: ignore[attr-defined]
        tp = self._tp
        mine = tp.topic == where
        expect = self.next_fetch_offset
        for record in unpack(self):
            if mine and record.offset > expect:
                noted.note(tp.partition, expect, record.offset)
            expect = record.offset + 1
            yield record
        if mine and self.next_fetch_offset > expect:  # the fetch ended in aborted records or a marker
            noted.note(tp.partition, expect, self.next_fetch_offset)

    AIOKafkaConsumerThread._create_worker_consumer = _create_worker_consumer  # type: ignore[method-assign]
    PartitionRecords._unpack_records = _unpack_records  # type: ignore[method-assign]
    AIOKafkaConsumerThread._ttsflow_read_committed = True  # type: ignore[attr-defined]


def hold_read_offsets(consumer: Any, topic: str, refetching: Callable[[int], int | None]) -> None:
    """Make faust hand over every record of a ``topic`` partition that is being fetched again.

    faust's fetch loop (``Consumer._drain_messages``, faust-streaming 0.15.3) hands the agent only
    records at or above the partition's read offset, raises it to each record it hands over, and
    counts offsets it jumps over as done (a "gap": transaction markers). A seek back to a hole
    (:class:`~streams.stage.watch.Refetch`) lowers the read offset, but the loop may still be handing
    out the rest of a fetch taken before the seek: those records (past the hole) would raise it again,
    so the records fetched again from the hole were dropped below it, and each jump would have been
    counted done unprocessed. Here, while a partition is being fetched again, faust reads no read
    offset for it (so it drops nothing and counts no gap; the agent skips what came from before the
    seek until the offset sought comes, and counts the markers it passes itself); the offsets it
    hands over are still recorded, so from then on it tracks the partition as before."""
    from collections import defaultdict

    class ReadOffsets(defaultdict[Any, int | None]):
        def __getitem__(self, tp: Any) -> int | None:
            if getattr(tp, "topic", None) == topic and refetching(tp.partition) is not None:
                return None
            return super().__getitem__(tp)

    held = ReadOffsets(lambda: None)
    held.update(consumer._read_offset)
    consumer._read_offset = held


def guard_consumer_acks(consumer: Any, topic: str, processed: Any) -> None:
    """Make ``consumer.ack`` refuse, for ``topic``, every message not in ``processed``.

    faust's stream acks an event it *skips* without handing it to the agent: one fetched
    in an older consumer generation or while flow control is suspended (a rebalance). If
    that ack lands after the rebalance's seek to the committed offset C, the skipped
    offsets C, C+1, ... count as done and the next commit moves past records the stage
    never processed: their requests are lost (seen as a contiguous block of lost offsets
    right after a stage restart). A refused message is marked acked (so faust's
    ``wait_empty`` does not wait for it) but its offset is not committable, so after the
    seek it is read and processed again.
    """
    ack = consumer.ack

    def guarded_ack(message: Any) -> bool:
        if message.topic == topic and message not in processed:
            if not message.acked:
                message.acked = True
                consumer._unacked_messages.discard(message)
                _log.warning("event=skipped_ack_refused partition=%d offset=%d", message.partition, message.offset)
            return False
        processed.discard(message)
        return bool(ack(message))

    consumer.ack = guarded_ack

    # faust commits the first run of consecutive acked offsets unless it starts more than
    # ONE past the committed offset, and skips that check when the committed offset is 0:
    # a single record never processed at the committed offset (seen: offset 1 of a
    # partition committed 1, acked 2, 3, ...) was committed past. Here a run must start at
    # the committed offset (faust's gap tracking fills transaction markers into it first).
    new_offset = consumer._new_offset

    def guarded_new_offset(tp: Any) -> int | None:
        if tp.topic == topic:
            acked = consumer._acked[tp]
            committed = consumer._committed_offset[tp]
            if acked and committed is not None:
                gaps = consumer._gap[tp]
                low = min(min(acked), min((g.begin for g in gaps), default=min(acked)))
                if low > committed:
                    return None
        result: int | None = new_offset(tp)
        return result

    consumer._new_offset = guarded_new_offset


def leave_group_on_stop() -> None:
    """Make a static member (``group.instance.id``) leave its group when it stops cleanly.

    aiokafka 0.14's ``GroupCoordinator._maybe_leave_group`` sends no LeaveGroup when a
    ``group_instance_id`` is set (as the Java client does): the broker keeps the member and
    its partitions until its session times out, waiting for it to come back under the same
    id. Right for a crash (SIGKILL, OOM, the input watchdog's re-exec, a container
    restarted in its pod): the restart takes the partitions back at once. Wrong for a
    clean stop (SIGTERM): a scale-down or a Deployment's rolling update replaces the pod
    under a new name, and its partitions would sit idle for the session timeout. So here a
    clean stop leaves as a dynamic member does (a LeaveGroup by member id removes a static
    member too, and the group rebalances at once). Same body as aiokafka 0.14's, without the
    static check; process-wide (the stage process runs only this app).
    """
    from aiokafka import errors as kafka_errors
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from aiokafka.protocol.group import LeaveGroupRequest

    if getattr(GroupCoordinator, "_ttsflow_static_leave", False):
        return

    async def _maybe_leave_group(self: Any) -> None:
        if self.generation > 0:
            try:  # one attempt, as aiokafka's: the session timeout covers a lost request
                resp = await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
                err = kafka_errors.for_code(resp.error_code)
                if err is not kafka_errors.NoError:
                    raise err()
            except kafka_errors.KafkaError as e:
                _log.warning("event=leave_group_failed group=%s error=%r", self.group_id, e)
            else:
                _log.info("event=left_group group=%s instance_id=%s", self.group_id, self._group_instance_id)
        self.reset_generation()

    GroupCoordinator._maybe_leave_group = _maybe_leave_group  # type: ignore[method-assign]
    GroupCoordinator._ttsflow_static_leave = True  # type: ignore[attr-defined]


def fetch_state(consumer: Any, tp: Any) -> str:
    """What aiokafka's fetcher holds for ``tp`` (position, paused, awaiting an offset reset),
    for the log line of a stalled partition; faust keeps none of it."""
    try:
        from aiokafka.structs import TopicPartition

        sub = consumer._thread._ensure_consumer()._subscription.subscription
        st = sub.assignment.state_value(TopicPartition(tp.topic, tp.partition))
        return (f"position={getattr(st, '_position', None)} paused={st.paused} "
                f"awaiting_reset={st.awaiting_reset} valid={st.has_valid_position}")
    except Exception as e:  # a diagnostic only
        return f"unknown({e!r})"
