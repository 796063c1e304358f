"""The stage's faust app: the agent, its dedup table, timers (heartbeat, dedup expiry, input watchdog).

Wires :class:`~streams.stage.core.StageCore` (pure per-record logic) to faust with the
patches of :mod:`streams.stage.patches`, and creates the stage's topics before faust starts.
See :mod:`streams.stage` for what the stage guarantees.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from streams.kafka.topics import dedup_table_name, open_table_name, rate_table_name
from streams.settings import Settings
from streams.stage.admission import Bucket, bucket_key, decode_bucket
from streams.stage.core import Record, StageCore, served_voices
from streams.stage.cut import preload_words
from streams.stage.dedup import SeenIndex, UserSeen
from streams.stage.lexicons import LexiconReader, lexicon_store
from streams.stage.patches import (
    PassedOffsets,
    fetch_in_turns,
    fetch_state,
    leave_group_on_stop,
    read_committed_input,
    stage_app_class,
)
from streams.stage.pending import Deferred, Handled
from streams.stage.pieces import CONTROL_HEADER, OpenIndex, OpenRequest, decode_open, open_key, tick_value
from streams.stage.watch import InputWatch, Refetch, input_hole

__all__ = ["build_app", "claim_stage_instance_id", "prepare_topics"]

_log = logging.getLogger("ttsflow.stage")
# when this process last re-executed itself for an input hole (kept across os.execv in the environment)
_HOLE_RESTART_ENV = "TTSFLOW_STAGE_HOLE_RESTART_AT"


_PIECE_DROPS = ("piece_repeated", "tick_stale", "tick_unreadable")  # counted, not logged (a hostile stream sends millions)


def _is_tick(headers: Any) -> bool:
    """One of the stage's own timer records (header ``ttsflow-control: tick``)."""
    if not headers:
        return False
    items = headers.items() if isinstance(headers, dict) else headers
    return any(k == CONTROL_HEADER and v == b"tick" for k, v in items)


def _key_str(key: bytes | None) -> str:
    return "" if key is None else key.decode("utf-8", "surrogateescape")


def claim_stage_instance_id(settings: Settings) -> str:
    """``<app id>-<hostname>-<slot>``: the lowest slot no live stage of this cluster and app id
    holds on this host (:func:`streams.identity.claim_slot`, shared with the worker's
    transactional id), held until exit; a stage restarted after a crash takes the dead
    one's id, hence its static membership and its partitions."""
    from streams.identity import claim_slot, host_name

    slot = claim_slot("stage", settings.kafka.bootstrap_servers, settings.stage.stage_app_id)
    return f"{settings.stage.stage_app_id}-{host_name()}-{slot}"


async def _sweep_expired(store: Any, index: SeenIndex, now: float, *, chunk: int = 10_000) -> int:
    """Drop expired dedup entries from faust's local store (memory dict, or one RocksDB per
    partition, whose keys sort by bucket), yielding to the loop every ``chunk`` keys."""
    n = 0
    dbs = getattr(store, "_dbs", None)
    if dbs is not None:  # faust.stores.rocksdb.Store
        for db in list(dbs.values()):
            doomed = []
            for key in db.keys():
                if not index.expired(key, now):
                    break  # sorted by bucket: the rest is live
                doomed.append(key)
            for i, key in enumerate(doomed):
                del db[key]
                if i % chunk == chunk - 1:
                    await asyncio.sleep(0)
            n += len(doomed)
        return n
    data = store.data  # faust.stores.memory.Store
    keys = list(data.keys())
    for i, key in enumerate(keys):
        if index.expired(key, now):
            data.pop(key, None)
            n += 1
        if i % chunk == chunk - 1:
            await asyncio.sleep(0)
    return n


def build_app(settings: Settings, metrics: Any, *, core: StageCore | None = None) -> Any:
    """The faust app of the stage (not started). ``metrics`` is a :class:`StageMetrics`."""
    from faust.streams import _current_event  # the record a table write belongs to (see flush)

    _StageApp = stage_app_class()
    preloading: threading.Thread | None = None
    if core is None:
        # the lexicon topics, read whole before the first request is handled (streams/stage/lexicons.py)
        lexicons = lexicon_store(settings.stage)
        reader = LexiconReader(settings.kafka, lexicons)
        if not reader.start(wait_s=30.0):
            _log.warning("event=lexicons_not_loaded waited_s=30 count=%d", len(lexicons))
        core = StageCore(settings.stage, settings.kafka, settings.engine, voices=served_voices(settings.engine),
                         on_dropped=metrics.foreign_dropped, lexicons=lexicons)
        if "han" in settings.stage.first_budgets and any(v.speaks("Han") for v in core.served):
            preloading = preload_words()  # a short first segment of Mandarin is cut at a jieba word boundary
    brokers = [f"kafka://{b.strip()}" for b in settings.kafka.bootstrap_servers.split(",") if b.strip()]
    # Static membership (KIP-345): a stage restarted after a SIGKILL rejoins under the same
    # group.instance.id and gets its partitions back without a rebalance, so the other
    # stages never stop and it need not wait out the dead member's session (seen before:
    # every stage idle ~10 s after each kill; one killed again within ~8 s of its restart
    # never started). A clean stop still leaves the group at once (leave_group_on_stop).
    instance_id = settings.stage.stage_instance_id or claim_stage_instance_id(settings)
    # one data dir per stage identity: RocksDB locks its files, and a restarted stage with the
    # same identity (same partitions back) finds its table where it left it
    datadir = Path(settings.process.home) / "stage" / settings.stage.stage_app_id / instance_id
    datadir.mkdir(parents=True, exist_ok=True)
    leave_group_on_stop()
    fetch_in_turns(held_wait_s=settings.stage.stage_held_fetch_ms / 1000.0)
    passed = PassedOffsets()  # aborted transactions' records and markers in the input (read_committed)
    read_committed_input(settings.kafka.topic_requests, passed)
    metrics.identify(instance_id=instance_id, group=settings.stage.stage_app_id)
    from streams.kafka.config import faust_credentials

    app = _StageApp(
        settings.stage.stage_app_id,
        broker=brokers,
        broker_credentials=faust_credentials(settings.kafka),
        key_serializer="raw",
        value_serializer="raw",
        processing_guarantee=settings.stage.stage_guarantee,
        store="rocksdb://" if settings.stage.stage_store == "rocksdb" else "memory://",
        web_enabled=False,
        topic_partitions=settings.kafka.partitions,
        topic_replication_factor=settings.kafka.replication_factor,
        consumer_auto_offset_reset="earliest",
        datadir=str(datadir),
        producer_acks=-1,
        broker_commit_every=1000,
        broker_commit_interval=settings.stage.stage_commit_interval_ms / 1000.0,
        consumer_group_instance_id=instance_id,
        broker_client_id=instance_id,  # what `ttsflow lag --json` and the broker's group view show
        # a member that dies and does not come back (a pod replaced under a new name) holds its
        # partitions until its session times out: keep that short
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        # partitions in turns of at most this many records, and a short queue in front of the agent: a
        # flooded partition never keeps the others' records waiting for long (patches.fetch_in_turns)
        broker_max_poll_records=settings.stage.stage_poll_records,
        stream_buffer_maxsize=settings.stage.stage_buffer_records,
        # outputs gathered into few produce requests: with none, a flood's outputs were one socket write each
        producer_linger=settings.stage.stage_linger_ms / 1000.0,
    )
    requests = app.topic(settings.kafka.topic_requests, key_type=bytes, value_type=bytes,
                         key_serializer="raw", value_serializer="raw")
    # Raw bytes in and out of the table (the app's serializers): one entry per (record key,
    # request id) in a time bucket, the value its first-seen time (streams/stage/dedup.py).
    seen = app.Table(dedup_table_name(settings.stage), default=None, partitions=settings.kafka.partitions, key_type=bytes,
                     value_type=bytes)
    index = SeenIndex(settings.stage.dedup_window_s)
    source_topic = settings.kafka.topic_requests
    # faust checks on the first table write that the changelog has as many partitions as the
    # source topic; right after a start the consumer may not know the changelog yet ("has 0
    # partitions") and the check crashes the agent mid-record (seen in every SIGKILL run).
    # Both topics are made with settings.partitions, so the check is skipped.
    seen._verified_source_topics_for_partitions.add(source_topic)
    # open requests sent in pieces (streams/stage/pieces.py), and an index of them in memory
    opened = app.Table(open_table_name(settings.stage), default=None, partitions=settings.kafka.partitions,
                       key_type=bytes, value_type=bytes)
    opened._verified_source_topics_for_partitions.add(source_topic)
    # each user's admission bucket (streams/stage/admission.py), per partition
    rates = app.Table(rate_table_name(settings.stage), default=None, partitions=settings.kafka.partitions,
                      key_type=bytes, value_type=bytes)
    rates._verified_source_topics_for_partitions.add(source_topic)
    # A table write's changelog record must be delivered before its input record may be committed:
    # faust's commit flushes its producer first, but that flush (faust-streaming 0.15.3,
    # ProducerBuffer.flush_atmost) returns after 0.1 s without a message sent, and a message its
    # drain task has taken off the buffer but not yet handed to the client is in neither; a SIGKILL
    # then loses the write while the offset stays committed (seen: a stream's piece missing from the
    # open table after a stage SIGKILL, its later pieces held forever behind the gap, the request
    # closed by stream_timeout). The changelog futures are kept here and awaited in flush().
    changelog_sent: list[Any] = []
    for table in (seen, opened, rates):
        def _kept(*args: Any, _send: Any = table.send_changelog, **kwargs: Any) -> Any:
            fut = _send(*args, **kwargs)
            changelog_sent.append(fut)
            return fut
        table.send_changelog = _kept
    open_index = OpenIndex()
    indexed_gen: list[int | None] = [None]
    # handled records whose outputs are not yet known delivered, and their table writes (pending.py)
    deferred = Deferred()
    batch_records = settings.stage.stage_batch_records
    handling = asyncio.Lock()  # the agent's record and a timer's flush never interleave
    agent_stream: list[Any] = []

    def sync_index() -> None:
        """Rebuild the index from the table after each assignment (the table holds the partitions held),
        with the open-table writes still held on top."""
        gen = app.consumer_generation_id
        if indexed_gen[0] != gen:
            open_index.rebuild(opened.items())
            for ok, state in deferred.open_writes().items():
                if state is None:
                    open_index.delete(ok)
                else:
                    open_index.put(ok, decode_open(state))
            indexed_gen[0] = gen
            metrics.open_requests(len(open_index))

    class _OpenView:
        __slots__ = ("user_key",)

        def __init__(self, user_key: bytes) -> None:
            self.user_key = user_key

        def get(self, request_id: str) -> OpenRequest | None:
            raw = deferred.open_get(open_key(self.user_key, request_id), opened.get)
            return decode_open(raw) if raw else None

        def user_open(self) -> int:
            return open_index.user_count(self.user_key)

        def all_open(self) -> int:
            return len(open_index)

    class _RateView:
        __slots__ = ("in_order", "key")

        def __init__(self, key: bytes, in_order: bool) -> None:
            self.key, self.in_order = key, in_order

        def get(self) -> Bucket | None:
            return decode_bucket(deferred.rate_get(self.key, rates.get))

    # record keys being refused rate_limited now, and how many so far: logged when it starts and ends,
    # not per record (a flood is thousands)
    limited: dict[bytes, int] = {}
    app.guard_acks(source_topic)

    async def send(rec: Record, src_partition: int) -> Awaitable[Any]:
        headers = list(rec.headers) or None
        return await app.producer.send(rec.topic, rec.key, rec.value, rec.partition, None, headers)

    async def delivered() -> None:
        sent, changelog_sent[:] = list(changelog_sent), []
        for f in sent:
            await f

    async def flush(stream: Any) -> None:
        """Wait for the held records' outputs, then make their table writes and mark them processed
        (each id or open text is recorded only after its outputs are delivered: a crash repeats, never
        loses), in input order; a key written several times in the run is written once, its last state."""
        held = deferred.take()
        for h in held:
            for f in h.deliveries:
                await f
        # the last write of each key only (a run of one request's pieces is one changelog record), made
        # as of its own record: faust writes a table key to the changelog partition of the current event
        seen_writes = {h.seen[0]: (h.event, h.seen[1]) for h in held if h.seen is not None}
        open_writes = {h.open[0]: (h.event, h.open[1]) for h in held if h.open is not None}
        rate_writes = {h.rate[0]: (h.event, h.rate[1]) for h in held if h.rate is not None}
        current = _current_event.get(None)
        try:
            for sk, (ev, sv) in seen_writes.items():
                _current_event.set(weakref.ref(ev))
                seen[sk] = sv
            for ok, (ev, state) in open_writes.items():
                _current_event.set(weakref.ref(ev))
                if state is None:
                    if opened.get(ok) is not None:
                        del opened[ok]
                else:
                    opened[ok] = state
            if rate_writes:
                # the buckets last, once the ids and open texts are in their changelogs: a bucket read
                # back after a crash never covers an admitted request that is not found seen or open
                await delivered()
            for rk, (ev, bucket) in rate_writes.items():
                _current_event.set(weakref.ref(ev))
                rates[rk] = bucket
        finally:
            _current_event.set(current)
        await delivered()  # the writes are in the changelog (not only in faust's buffer) before any commit
        for h in held:
            app.mark_processed(h.event.message)
            await stream.ack(h.event)

    # (consumer generation, last offset processed) per input partition: a jump within one
    # generation is a hole in what the agent was handed (transaction markers, or records
    # faust dropped around a rebalance); logged so a lost request can be traced
    last_offset: dict[int, tuple[int, int]] = {}
    holed: dict[int, int] = {}  # partition -> the generation in which records after a hole were handled

    def note_offset(msg: Any) -> None:
        gen = app.consumer_generation_id
        prev = last_offset.get(msg.partition)
        if prev is not None and prev[0] == gen and msg.offset > prev[1] + 1:
            _log.warning("event=input_gap partition=%d after_offset=%d offset=%d generation=%d", msg.partition,
                         prev[1], msg.offset, gen)
        last_offset[msg.partition] = (gen, msg.offset)

    def restart(reason: str) -> None:
        """Re-execute the stage in place (same PID, same command line): it reads again from the
        committed offsets; the records handled but not yet flushed are not marked processed."""
        _log.error("event=stage_restart reason=%s; restarting to re-read from the committed offset", reason)
        metrics.ready(False)
        metrics.close()
        logging.shutdown()
        os.environ[_HOLE_RESTART_ENV] = str(time.time()) if reason.startswith("input_hole") else \
            os.environ.get(_HOLE_RESTART_ENV, "")
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])

    def source_tp(partition: int) -> Any:
        return next((t for t in app.consumer.assignment() if t.topic == source_topic and t.partition == partition),
                    None)

    def hole_before(msg: Any) -> tuple[int, int] | None:
        tp = source_tp(msg.partition)
        committed = app.consumer._committed_offset.get(tp) if tp is not None else None
        return input_hole(msg.offset, generation=app.consumer_generation_id, last=last_offset.get(msg.partition),
                          committed=committed)

    refetch = Refetch()

    def expected_offset(msg: Any) -> int | None:
        """The offset the agent should be handed next in ``msg``'s partition (None: unknown)."""
        prev = last_offset.get(msg.partition)
        if prev is not None and prev[0] == app.consumer_generation_id:
            return prev[1] + 1
        tp = source_tp(msg.partition)
        return app.consumer._committed_offset.get(tp) if tp is not None else None

    def count_passed(msg: Any, start: int) -> None:
        """Offsets ``start`` up to ``msg``'s passed over as they should be (a transaction's marker, an aborted
        transaction's records) count as done for the commit, from the committed offset itself if need be
        (faust counts such a jump only from one past its read offset, and not at all while a partition is
        fetched again: patches.hold_read_offsets)."""
        tp = source_tp(msg.partition)
        if tp is not None and start < msg.offset:
            gaps = app.consumer._gap[tp]
            gaps.addi(start, msg.offset)
            gaps.merge_overlaps()
    app.refetching = refetch.sought  # faust's read offset held at a hole being fetched again (patches)

    async def seek_back(partition: int, offset: int, reason: str) -> bool:
        """Fetch ``partition`` again from ``offset`` in place (:class:`~streams.stage.watch.Refetch`);
        False when that was tried enough for this offset (or the partition is gone)."""
        tp = source_tp(partition)
        if tp is None or not refetch.start(partition, offset, generation=app.consumer_generation_id,
                                           now=time.monotonic()):
            return False
        _log.warning("event=input_refetch partition=%d offset=%d reason=%s", partition, offset, reason)
        # faust counted the jump over the hole as done (a "gap", as for a transaction marker): with the hole's
        # first record processed, its commit would pass records not processed yet. Nothing at or above the
        # offset sought counts as done until it is processed again (markers there are counted again as passed)
        gaps = app.consumer._gap.get(tp)
        if gaps:
            gaps.chop(offset, 2**62)
        await app.consumer.seek_wait({tp: offset})  # on the consumer's thread; faust reads from there again
        return True

    @app.agent(requests)
    async def stage(stream: Any) -> None:
        agent_stream[:] = [stream]
        stream.enable_acks = False  # acked by flush(), once processed
        async for event in stream.events():
            msg = event.message
            if refetch.skip(msg.partition, msg.offset, generation=app.consumer_generation_id, now=time.monotonic()):
                app.consumer.ack(msg)  # fetched past a hole being read again: released unprocessed, never committed
                continue
            expected = expected_offset(msg)
            hole = hole_before(msg)
            if hole is not None and passed.covered(msg.partition, hole[0], hole[1]):
                hole = None  # an aborted transaction and its marker: nothing there to be handed
            if hole is not None:
                # records faust fetched and never handed over: handled after them, a stream's later pieces
                # would wait for the missing ones until it timed out. Fetched again in place; if that does
                # not fill it, read again from the committed offset by a restart (at most once a minute: a
                # hole that a re-read cannot fill is left to the watchdog)
                _log.error("event=input_hole partition=%d from_offset=%d to_offset=%d generation=%s",
                           msg.partition, hole[0], hole[1], app.consumer_generation_id)
                if await seek_back(msg.partition, hole[0], "input_hole"):
                    app.consumer.ack(msg)
                    continue
                last_restart = float(os.environ.get(_HOLE_RESTART_ENV) or 0)
                if time.time() - last_restart > 60:
                    restart(f"input_hole partition={event.message.partition} offsets={hole[0]}-{hole[1] - 1}")
                # handled after the hole until a re-read fills it: the admission must not count the hole decided
                holed[event.message.partition] = app.consumer_generation_id
            elif expected is not None and msg.offset > expected:
                count_passed(msg, expected)
            async with handling:
                await handle(event)
                if len(deferred) >= batch_records:
                    await flush(stream)

    @app.timer(0.05)
    async def flush_held() -> None:
        """The records held are flushed every 50 ms when fewer than stage_batch_records came: their
        outputs went out when they were handled (no answer waits for this), so the wait only moves
        their table writes and committable offsets; pieces of one request within it are one write."""
        if len(deferred) and agent_stream:
            async with handling:
                await flush(agent_stream[0])

    async def handle(event: Any) -> None:
        """One input record: its outputs sent, its table writes held until they are delivered."""
        msg = event.message
        note_offset(msg)
        t0 = time.perf_counter()
        metrics.consumed()
        k = msg.key or b""
        sync_index()
        user_seen = UserSeen(index, deferred.seen_get(seen.get), k, core.clock())
        outcome = core.handle(msg.key, msg.value, partition=msg.partition, offset=msg.offset,
                              timestamp_ms=int(msg.timestamp * 1000) if msg.timestamp else None, seen=user_seen,
                              opened=_OpenView(k), tick=_is_tick(msg.headers),
                              rate=_RateView(bucket_key(k, msg.partition),
                                             in_order=holed.get(msg.partition) != app.consumer_generation_id))
        metrics.processed(time.perf_counter() - t0)
        futs = [await send(r, msg.partition) for r in outcome.records]
        seen_write = index.entry(k, outcome.remember, core.clock()) if outcome.remember is not None else None
        open_write = None
        if outcome.open is not None:
            ok, state = open_key(k, outcome.open[0]), outcome.open[1]
            open_write = (ok, state)
            if state is None:
                open_index.delete(ok)
            else:
                open_index.put(ok, decode_open(state))
            metrics.open_requests(len(open_index))
        rate_write = (bucket_key(k, msg.partition), outcome.rate) if outcome.rate is not None else None
        deferred.add(Handled(event, futs, seen_write, open_write, rate_write))
        if outcome.code == "rate_limited":
            n = limited.get(k, 0)
            if n == 0:
                _log.warning("event=rate_limited key=%s first_request_id=%s", _key_str(k), outcome.request_id)
                if len(limited) >= 10_000:  # keys that never came back: forget them (this is only for the log)
                    limited.clear()
            limited[k] = n + 1
        elif k in limited and outcome.rate is not None:  # admitted again
            _log.info("event=rate_limit_lifted key=%s refused=%d", _key_str(k), limited.pop(k))
        n_segments = sum(1 for r in outcome.records if r.topic == settings.kafka.topic_segments)
        if outcome.open is not None and outcome.kind == "failed":
            metrics.piece("failed", n_segments - 1)  # (the rejection goes to the same topic)
        if outcome.kind in ("piece", "closed") or outcome.code in _PIECE_DROPS:
            metrics.piece(outcome.kind if outcome.kind != "duplicate" else
                          ("tick" if (outcome.code or "").startswith("tick") else "repeated"), n_segments)
            if outcome.kind == "closed":
                _log.info("event=pieces_closed request_id=%s key=%s segments=%d", outcome.request_id,
                          _key_str(msg.key), n_segments)
        elif outcome.kind == "segments":
            metrics.segments(len(outcome.records))
            if msg.timestamp:
                metrics.request_age(time.time() - msg.timestamp)
        elif outcome.code == "rate_limited":  # counted, logged once a run of them (above)
            metrics.failed(outcome.code)
        elif outcome.kind == "failed":
            metrics.failed(outcome.code or "?")
            _log.info("event=request_failed request_id=%s key=%s code=%s", outcome.request_id, _key_str(msg.key),
                      outcome.code)
        elif outcome.kind == "dead_letter":
            metrics.dead_letter(outcome.code or "?")
            _log.info("event=dead_letter partition=%d offset=%d reason=%s", msg.partition, msg.offset,
                      outcome.code)
        else:
            metrics.duplicate()
            _log.info("event=duplicate request_id=%s key=%s", outcome.request_id, _key_str(msg.key))
        metrics.heartbeat()

    @app.timer(1.0)
    async def beat() -> None:
        metrics.heartbeat()

    # Requests sent in pieces: an idle one's held words are cut, a silent one is closed, by a
    # record the timer sends to the request's own partition, so the change happens in order with
    # its pieces and again the same way if the records are re-read (streams/stage/pieces.py).
    idle_s = settings.stage.stream_idle_cut_ms / 1000.0

    @app.timer(0.2)
    async def pieces_timer() -> None:
        if app.in_recovery or app.rebalancing:
            return
        sync_index()
        for user_key, partition, rid, uid, kind, changes in open_index.due(
                core.clock(), idle_s=idle_s, timeout_s=settings.stage.stream_timeout_s):
            await app.producer.send(source_topic, user_key, tick_value(rid, uid, kind, changes), partition, None,
                                    [(CONTROL_HEADER, b"tick")])

    # Entries of buckets older than the previous one can never match again: drop them from
    # the local store (no tombstones: the changelog deletes them by retention). Checked once
    # a minute, done when the bucket has moved on since the last sweep.
    swept: list[int] = []

    @app.timer(60.0)
    async def expire_seen() -> None:
        if app.in_recovery or app.rebalancing:
            return
        now = core.clock()
        b = index.bucket(now)
        if swept and swept[-1] == b:
            return
        n = await _sweep_expired(seen.data, index, now)
        swept[:] = [b]
        if n:
            _log.info("event=dedup_expired entries=%d", n)

    # faust can leave an assigned input partition unserved (see InputWatch): the stage then
    # restarts itself in place (same PID, same command line) and reads again from the
    # committed offset; duplicates are dropped by the worker.
    watch = InputWatch(stall_s=settings.stage.stage_stall_s)

    @app.timer(2.0)
    async def input_watchdog() -> None:
        if app.in_recovery or app.rebalancing:  # tables are being rebuilt: nothing is fetched yet
            watch.forget(set())
            return
        consumer = app.consumer
        try:
            tps = [tp for tp in consumer.assignment() if tp.topic == source_topic]
            ends = await asyncio.wait_for(consumer.highwaters(*tps), 10.0) if tps else {}
        except Exception as e:  # broker unreachable, rebalance under way: look again later
            _log.debug("event=input_watch_skipped error=%r", e)
            return
        now = time.monotonic()
        watch.forget({tp.partition for tp in tps})
        refetch.forget({tp.partition for tp in tps})
        for tp in tps:
            committed = consumer._committed_offset.get(tp)
            last = last_offset.get(tp.partition)
            processed_next = None if last is None else last[1] + 1
            delivered = last is not None and last[0] == app.consumer_generation_id
            end = ends.get(tp)  # read_committed: the last stable offset
            done = max((x for x in (committed, processed_next) if x is not None), default=0)
            if end is not None and done < end and passed.covered(tp.partition, done, end):
                end = done  # only aborted records and markers are left: nothing waits
            reason = watch.check(tp.partition, committed=committed, processed_next=processed_next,
                                 end=end, acked_waiting=bool(consumer._acked.get(tp)), now=now,
                                 delivered=delivered)
            if reason is None:
                continue
            _log.error("event=%s partition=%d committed=%s processed_next=%s end=%s paused=%s fetch_state=%s",
                       reason, tp.partition, committed, processed_next, ends.get(tp), tp in consumer._paused_partitions,
                       fetch_state(consumer, tp))
            start = committed if committed is not None and committed >= 0 else None
            if start is not None and await seek_back(tp.partition, start, reason):
                watch.forget({t.partition for t in tps} - {tp.partition})  # its clock starts again
                continue
            restart(reason)

    @app.task
    async def started() -> None:
        metrics.ready(True)
        _log.info("event=stage_started app_id=%s instance_id=%s guarantee=%s topic=%s", settings.stage.stage_app_id,
                  instance_id, settings.stage.stage_guarantee, settings.kafka.topic_requests)
        if preloading is not None:  # jieba's dictionary too, once loaded
            await asyncio.get_running_loop().run_in_executor(None, preloading.join, 30.0)
        # what the start made (faust, its clients, the dictionaries) lives as long as the process: out of
        # the collector's sight, a full collection no longer stops the event loop for 40-50 ms to scan it
        gc.freeze()

    app.stage_agent = stage  # type: ignore[attr-defined]
    return app


def prepare_topics(settings: Settings) -> Settings:
    """Create every topic the stage uses (its changelog and leader topic included) before faust
    starts, with as many partitions as the requests topic really has. Where the stage may not
    create topics (ACLs) they must exist already: logged, and faust is left to try."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from streams.kafka import client_config, ensure_topics

    try:
        md = AdminClient(client_config(settings.kafka, log_level=3)).list_topics(
            settings.kafka.topic_requests, timeout=10)
        t = md.topics.get(settings.kafka.topic_requests)
        if t is not None and t.error is None and t.partitions and len(t.partitions) != settings.kafka.partitions:
            _log.warning("event=partitions_from_topic topic=%s partitions=%d setting=%d", settings.kafka.topic_requests,
                         len(t.partitions), settings.kafka.partitions)
            settings = settings.replace(partitions=len(t.partitions))
        created = ensure_topics(settings.kafka, settings.stage)
        _log.info("event=topics_ready created=%s", ",".join(created) or "-")
    except KafkaException as e:
        _log.warning("event=topics_not_prepared error=%s", e)
    return settings
