"""The worker loop: segments in, audio in S3, one completion per request, exactly once.

The loop (:meth:`Worker.step`) reads like the protocol. :class:`Worker` is the shell: it holds
the clients, threads and wiring, and hands what they return to the pure core
(:class:`~streams.worker.core.WorkerCore`: the ledger, the answers, what a transaction
carries), which decides. Collaborators return what happened; none calls back into the loop.
The steps: 0) between batches, apply a pending model reload (SIGHUP), 1) poll, 2) decode and
drop what is already done, 3) look up the Redis cache, 4) batch the misses, 5) synthesize
ready batches, 6) collect encoded parts (their PUTs in flight), 7) join finished requests and upload
their audio, 8) produce chunks, completions, done records and offsets in one transaction
(:class:`~streams.worker.checkpoint.Checkpoint`, the transaction's one owner: pipelined, at
most one in flight on the producer's thread while the loop polls and synthesizes; a backend
without batching gets batches of one, so each item is answered and committed as soon as it
is made). Steps 6 and 7 are :meth:`Worker._advance`, also run before a revoke, a forced model
swap and a graceful stop.

Guarantees (docs/concepts/exactly-once.md):

* Offsets follow durability. Per partition the committed offset is the first segment
  not yet done (:class:`~streams.worker.offsets.OffsetTracker`). A segment is done when its
  audio is in S3; a last segment (and every segment of a failed request) when its
  request's completion is produced in the transaction that commits the offset.
* Streaming requests: a chunk per segment (``tts.chunks``, key = user id) with the part's
  audio, produced in the transaction whose offsets pass the segment
  (:meth:`~streams.worker.ledger.Ledger.take_chunks`), so a segment redone after a crash is
  one whose chunk was never committed: each chunk once, in ``seq`` order.
* One transaction per commit: completions (``tts.completed``, key = user id), a record
  per answered request in the compacted done topic (key = request id, partition = the
  segment's partition) and the consumer offsets (``send_offsets_to_transaction`` with
  the group metadata, so a zombie is fenced) commit together or not at all.
* No second completion: on assignment of partition p the worker reads partition p of
  the done topic (read_committed) and drops every segment of a request found there, so a
  restarted worker, a new owner after a rebalance or a re-emitted segment never answers
  twice. Redis is only a cache. The record counts for the stage's dedup window
  (``dedup_window_s``): after it the stage lets a reused request id through, and so does
  the worker.
* Errors as librdkafka means them: retriable -> capped backoff and retry; abortable ->
  abort, rewind every assigned partition to its committed offset, drop in-memory work;
  fatal (fenced) -> exit non-zero. A commit that times out is retried, never aborted.
  A transactional call still running 5 s past its own 5 s timeout (librdkafka's
  ``send_offsets_to_transaction`` after a broker restart, librdkafka#5456) is left behind
  with its producer: a new producer with the same ``transactional.id`` fences it (its
  transaction is completed or aborted before ``init_transactions`` returns), and the work
  is redone from the committed offsets, as after an abort.
  S3 unreachable -> nothing is committed; in-memory work is dropped and the partitions
  rewound and paused while the consumer keeps polling (it stays in the group) until S3
  answers again. Redis unreachable -> cache bypass, counted.
* An engine failure on one item fails that request (failed completion with the code),
  not the batch's other requests and not the process.
* Audio is checked before it is called ok (:func:`engine.quality.check_audio`, about
  10 microseconds a part): a near-silent part, or one far shorter than its text implies at
  its voice's measured speaking rate, fails its request with ``synthesis_failed`` and the
  reason. A completion's ``model.voice`` names the voice that spoke.
* Hot reload (hibari, piper: the engine is an ``engine.reload.ModelManager``): SIGHUP only
  sets a flag; the swap happens at the top of a loop turn when nothing is in flight (no
  batched, synthesizing, joining or unfinished request), so every part of a request is made
  by one model and keyed with its identity. If work never drains within
  ``reload_max_wait_s`` the worker synthesizes what is batched with the old model, waits
  for its uploads and joins, then swaps: a request whose parts span the swap is joined from
  memory (its old parts keep the keys they were stored under) and its completion names the
  new model. A refused candidate leaves the old model serving.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from engine.engine import Engine
from storage.cache import AudioCache
from storage.errors import S3Unavailable, StorageError
from storage.s3 import AudioStore
from streams.errors import AbortableError, RetriableError, StorageFatal
from streams.kafka import retry as kafka_retry
from streams.kafka.consumer import PartitionedConsumer, leave_group
from streams.kafka.producer import WEDGE_GRACE_S, TransactionalProducer
from streams.settings import BatchingSettings, KafkaSettings
from streams.worker.batcher import MicroBatcher
from streams.worker.checkpoint import Checkpoint
from streams.worker.core import Topics, WorkerCore
from streams.worker.done_log import DoneLog
from streams.worker.joiner import Joiner
from streams.worker.ledger import Ledger, Seg
from streams.worker.parts import PartMaker
from streams.worker.prelude import KafkaReady
from streams.worker.rebalance import Rebalance
from streams.worker.recovery import Recovery
from streams.worker.reload_gate import ReloadGate

if TYPE_CHECKING:
    from engine.reload import ModelManager

__all__ = ["Worker"]

_log = logging.getLogger("ttsflow.worker")

# While a lane is idle and work is in flight, the loop waits in consume() (librdkafka cannot be woken
# from Python), so a part or join that finishes meanwhile is taken in at the next turn. 1 ms took the
# median request's `collect` from 3.5 to 2.1 ms but cost the worker ~45 us of CPU a turn, 5-10% more CPU
# a request at 3-7 requests/s, and no answer came sooner (bench paired, docs/concepts/latency.md).
_BUSY_POLL_S = 0.005
_SETTLE_TIMEOUT_S = 30.0    # a forced reload waits this long for the calls and joins in flight
_RELOAD_MAX_WAIT_S = 30.0   # a pending reload waits this long for the work in flight to drain
# librdkafka prefetches up to 1 MB per partition into one queue that consume() reads in order: a
# long request's segments (one partition) fetched at once would be served before every other
# partition's. Small per-partition fetches keep the queue interleaved, so other users' short
# requests wait for a few batches, not for the long request (bench bigrequest measures it).
# Latency: librdkafka postpones a partition's next fetch by fetch.queue.backoff.ms (default 1 s)
# once its queue passes those thresholds, which the small ones above reach under load: 10 ms costs
# a few more fetcher wake-ups. fetch.wait.max.ms (default 500) bounds how long the broker holds an
# empty fetch; 100 ms answers sooner after a pause or an aborted read at up to 10 empty fetches a
# second per broker connection when idle.
_FAIR_FETCH = {"max.partition.fetch.bytes": 16 * 1024, "queued.min.messages": 16,
               "queued.max.messages.kbytes": 1024, "fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 100}


class Worker:
    """One worker process: the loop over its collaborators. Used from one thread (the loop's)."""

    def __init__(self, kafka: KafkaSettings, batching: BatchingSettings, engine: Engine | ModelManager,
                 store: AudioStore, cache: AudioCache, metrics: Any, *, dedup_window_s: int, consumer: Any = None,
                 producer: Any = None, reader: Any = None, overlap: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, reload_max_wait_s: float = _RELOAD_MAX_WAIT_S,
                 producer_factory: Callable[[], Any] | None = None, wedge_grace_s: float = WEDGE_GRACE_S,
                 lanes: int = 1, ready: KafkaReady | None = None) -> None:
        from confluent_kafka import Consumer, Producer

        from streams.kafka import consumer_config, reader_config, transactional_config

        self.kafka, self.engine, self.store, self.cache, self.metrics, self.clock = \
            kafka, engine, store, cache, metrics, clock
        self._stop = threading.Event()
        self._closing = False  # close() began: a revoke then commits nothing
        self.gate = ReloadGate(engine, metrics, clock=clock, max_wait_s=reload_max_wait_s)
        self.ledger = Ledger(dedup_window_s=dedup_window_s, max_request_audio_s=batching.max_request_audio_s,
                             join_memory_bytes=batching.join_memory_mb * 1024 * 1024, sample_rate=engine.sample_rate,
                             backlog_credit_s=batching.backlog_credit_ms / 1000)
        self.core = WorkerCore(self.ledger, self.gate, metrics,
                               topics=Topics(kafka.topic_completed, kafka.topic_chunks, kafka.topic_done),
                               uri=store.uri, bucket=store.bucket, sample_rate=engine.sample_rate,
                               engine_times=bool(getattr(engine, "timestamps", False)))

        # static membership: a worker restarted under its transactional id gets its partitions back at once
        def new_consumer() -> Any:
            return Consumer(consumer_config(
                kafka, kafka.worker_group, **{"client.id": kafka.effective_transactional_id,
                                              "group.instance.id": kafka.effective_group_instance_id}, **_FAIR_FETCH))

        # a consumer fenced for good (after a broker restart) is replaced by a new one, same identity
        self.consumer = PartitionedConsumer(consumer or new_consumer(), kafka.topic_segments,
                                            factory=new_consumer if consumer is None else None)
        producer_ = TransactionalProducer(
            producer_factory or (lambda: Producer(transactional_config(kafka))),
            producer=producer if producer is not None else (ready.producer if ready is not None else None),
            wedge_grace_s=wedge_grace_s, heartbeat=metrics.heartbeat, on_replaced=metrics.producer_replaced,
            stopping=self._stop.is_set)
        self._ready = ready or KafkaReady()  # done while the model loaded (streams.worker.prelude)
        # read to its end on each assignment: a fetch that finds nothing new is held by the broker for
        # fetch.wait.max.ms before the end is known (default 500 ms: 0.50 s of a restarted worker's
        # 0.51 s done-set load with 5 records; 10 ms: 0.02 s)
        self.done_log = DoneLog(kafka.topic_done, dedup_window_s,
                                reader or Consumer(reader_config(kafka, **{"enable.partition.eof": True,
                                                                           "fetch.wait.max.ms": 10})),
                                stopping=self._stop.is_set)
        # DSP/encode on a second thread while the model runs pays off when the model runs on a device;
        # on 2 CPU cores it measured within noise (the model already uses both), so auto = device only
        self.overlap = engine.info.provider != "CPUExecutionProvider" if overlap is None else overlap
        self._io = ThreadPoolExecutor(4, thread_name_prefix="s3")
        # a backend that runs items one by one (hibari) gets batches of one: each item leaves as it is
        # made and its request is answerable then, not when a batch of 8 ends; batching engines keep batches
        self.native_batching = bool(engine.native_batching)
        batcher: MicroBatcher[Seg] = MicroBatcher.from_section(
            batching if self.native_batching else dataclasses.replace(batching, max_batch=1), clock)
        # model calls at once (streams.worker.main.model_lanes: 2 one-by-one backends on 2+ cores)
        self.lanes = lanes
        self.parts = PartMaker(engine, store, cache, metrics, batcher, max_batch=batcher.max_batch,
                               overlap=self.overlap, io=self._io, lanes=lanes,
                               eager=batching.eager_batches)
        self.joiner = Joiner(store, self._io, sample_rate=engine.sample_rate, max_audio_s=batching.max_request_audio_s,
                             engine_times=bool(getattr(engine, "timestamps", False)), joins=batching.max_joins)
        self.checkpoint = Checkpoint(core=self.core, producer=producer_, consumer=self.consumer,
                                     segments_topic=kafka.topic_segments, metrics=metrics, clock=clock,
                                     interval_s=kafka.worker_commit_interval_ms / 1000,
                                     transactional_id=kafka.effective_transactional_id)
        self.recovery = Recovery(ledger=self.ledger, parts=self.parts, joiner=self.joiner, consumer=self.consumer,
                                 checkpoint=self.checkpoint, store=store, metrics=metrics, clock=clock,
                                 stopping=self._stop.is_set)
        self.rebalance = Rebalance(ledger=self.ledger, done_log=self.done_log, consumer=self.consumer,
                                   parts=self.parts, metrics=metrics, segments_topic=kafka.topic_segments)
        self._producer = producer_
        self._cap = 4 * batching.max_batch  # records taken per poll: the front end runs on this thread
        self._woken = threading.Event()  # a watched future finished (see step 1)
        self._watched: weakref.WeakSet[Future[Any]] = weakref.WeakSet()
        self._wake = _setter(self._woken)
        self._read_ahead = batching.read_ahead_kb * 1024
        self.cache.on_error = metrics.redis_error

    @property
    def identity(self) -> str:
        return self.gate.identity

    @property
    def abandoned(self) -> list[Any]:
        """Producers replaced while a call of theirs was wedged (their destructor could hang the exit)."""
        return self._producer.abandoned

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Create the done topic, initialise transactions (fencing older instances), subscribe; the first two
        only where the prelude did not (:mod:`streams.worker.prelude`)."""
        ready, self._ready = self._ready, KafkaReady()  # used once: a replaced producer is not kept alive here
        if ready.done_partitions is None:
            self.done_log.ensure(self.kafka)
        else:
            self.done_log.partitions = ready.done_partitions
        if ready.producer is None:
            self.checkpoint.open()
        self.consumer.subscribe(on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)
        self.metrics.ready(True)
        _log.info("event=worker_started transactional_id=%s member=%s group=%s model=%s provider=%s overlap=%s "
                  "lanes=%d", self.kafka.effective_transactional_id, self.kafka.effective_group_instance_id,
                  self.kafka.worker_group, self.identity,
                  self.gate.model_info.provider, self.overlap, self.lanes)

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> int:
        """Loop until stopped; 0 after a clean shutdown, raises ``FatalError`` otherwise."""
        self.start()
        try:
            while not self._stop.is_set():
                self.run_once()
            self._drain()
        except StorageError as e:  # access denied, no bucket: configuration, not an outage
            raise StorageFatal(str(e)) from e
        finally:
            self.close()
        return 0

    def run_once(self) -> None:
        """One pass of the loop, with the reactions to S3, abortable and retriable errors."""
        try:
            self.step()
        except S3Unavailable as e:
            self.recovery.s3_outage(e)
        except AbortableError as e:  # the transaction's or the loop's own; a wedged producer too
            self.checkpoint.abort(e)
            self.recovery.redo_from_committed()
        except RetriableError as e:
            _log.warning("event=retry error=%s", e)
            time.sleep(kafka_retry.backoff(1))

    def close(self) -> None:
        self.metrics.ready(False)
        self._closing = True
        self.checkpoint.abort_quietly()
        member = self.consumer.member_id() if self._stop.is_set() else None  # a crash keeps its membership
        try:
            self.consumer.close()
            if member is not None:  # told to stop (scale-down): leave, so nobody waits a session timeout
                leave_group(self.kafka, self.kafka.worker_group, member)
        finally:
            self.checkpoint.close()
            self.done_log.close()
            self.parts.close()
            self._io.shutdown(wait=True, cancel_futures=True)

    # -- the loop ------------------------------------------------------------------
    def step(self) -> None:
        """One turn of the protocol."""
        self.metrics.heartbeat()

        # 0) between batches: apply a pending model reload (SIGHUP) when nothing is in flight, or after
        #    finishing what is once it waited long enough
        if self.gate.pending:
            reload = self.gate.due(idle=self._idle())
            if reload == "settle_first":
                self._settle()
            if reload != "no":
                self.gate.swap()
        now = self.clock()

        # 1) poll: no longer than the batcher's next deadline, briefly while work is in flight
        #    (a rewind that could not finish is retried first; its partitions admit nothing until it does)
        self.consumer.rejoin_if_stranded(now)
        if self.consumer.rewind_pending & self.consumer.assigned:
            self.consumer.rewind(self.consumer.rewind_pending & self.consumer.assigned)
        self.consumer.apply_backpressure(self.parts.held_by_partition(), self._read_ahead)
        timeout = 0.2
        deadline = self.parts.next_deadline()  # None while every lane is taken: nothing to start before one frees
        if deadline is not None:
            timeout = min(timeout, max(0.0, deadline - now))
        busy = self.parts.busy() or self.joiner.busy() or self.checkpoint.in_flight or bool(self.ledger.answers)
        if busy:
            timeout = min(timeout, _BUSY_POLL_S)
        assigned = len(self.consumer.assigned)
        want = max(1, min(500, self._cap - self.parts.backlog()), self._cap // max(1, assigned))
        if busy and not self.parts.lane_idle():
            # every lane is working: a record read now would only queue behind them, while a part,
            # join or transaction that finishes moves a request on at once (its future wakes the loop)
            self._watch()
            self._woken.wait(timeout)
            self._woken.clear()
            timeout = 0.0
        msgs = self.consumer.consume(want, timeout)

        # 2) decode, drop what is done (a record of a partition just revoked or to be re-read is skipped)
        fresh: list[Seg] = []
        for msg in msgs:
            if msg.error() is not None:
                self.consumer.note_error(msg.error(), self.clock())
                continue
            if not self.consumer.admits(msg.partition()):
                continue
            s = self.core.admit(msg, self.clock())
            if s is not None:
                fresh.append(s)

        for job in self.core.read_whole(fresh):  # S3 asked about its object now, not at its join
            self.joiner.ask(job.req, job.hashes, job.identities)

        # 3) cache lookup (a part being made already is waited for); 4) batch the misses
        misses: list[Seg] = []
        for s in fresh:
            if self.ledger.join_waiting(s):
                continue
            hit = self.parts.cached(s)
            if hit is not None:
                self.ledger.part_ready(s, hit)
                continue
            self.ledger.start_waiting(s)
            misses.append(s)
        self.core.parts_failed(self.parts.batch(misses))

        # 5) hand ready batches to the model lanes (threads of their own, so this loop goes on answering
        #    and committing while they run; DSP and encode after the model, the PUT on the S3 pool), as many as the lanes
        #    take plus one queued: a backend without batching gets batches of one, each answered as made
        now = self.clock()
        while self.parts.ready(now):
            self.parts.synthesize(self.parts.take(now))
            now = self.clock()

        # 6) collect encoded parts (their PUTs in flight); 7) join finished requests in order, answer them
        self._advance()

        # 8) the transaction (chunks + completions + done records + offsets), pipelined: apply the one
        #    in flight if it committed, start the next if one is due (it commits on the producer's thread)
        self.checkpoint.poll()
        self.checkpoint.start()
        self.metrics.inflight(self.ledger.tracker.pending())

    def _watch(self) -> None:
        """Every future the loop waits for sets :attr:`_woken` when it finishes (once each)."""
        for fut in (*self.parts.futures(), *self.joiner.futures(), *self.checkpoint.futures()):
            if fut not in self._watched:
                self._watched.add(fut)
                fut.add_done_callback(self._wake)

    def _advance(self) -> None:
        """Steps 6 and 7: parts made (or failed) into the ledger; requests failed or fully made answered
        or handed to the joiner; finished joins answered."""
        self.core.parts_done(self.parts.collect())
        for job in self.core.to_join():
            self.joiner.submit(job.req, job.hashes, job.identities)
        self.core.joined(self.joiner.collect())
        # a request answered failed (audio_too_long, a failed part) may have much of itself read ahead
        unwanted = self.ledger.unwanted()
        if unwanted:
            self.parts.batcher.remove_if(lambda s: s.work_id in unwanted)  # waiting is keyed by work id

    # -- rebalance callbacks (inside consume(), on the loop's thread) -----------------
    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.rebalance.assign({tp.partition for tp in partitions})

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        """Commit what is durable before giving the partitions away; the new owner redoes the rest."""
        gone = {tp.partition for tp in partitions}
        if not self._closing:
            try:
                self._advance()
                self.checkpoint.commit_durable()
            except (AbortableError, S3Unavailable) as e:
                self.checkpoint.abort_quietly(e)
                self.recovery.redo_from_committed(self.consumer.assigned - gone)
        self.rebalance.forget(gone)
        _log.info("event=revoked partitions=%s now=%s", sorted(gone), sorted(self.consumer.assigned))

    def on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {tp.partition for tp in partitions}
        _log.warning("event=partitions_lost partitions=%s", sorted(gone))
        self.rebalance.forget(gone)

    # -- in flight -------------------------------------------------------------------
    def _idle(self) -> bool:
        """Nothing batched, synthesizing, joining or waiting for more segments: a swap splits nothing."""
        return not (len(self.parts.batcher) or self.parts.busy() or self.joiner.busy()) and self.ledger.idle()

    def _settle(self) -> None:
        """Finish, with the serving model, everything batched, synthesizing or joining (before a forced swap)."""
        _log.warning("event=model_reload_settle batched=%d unfinished_requests=%d", len(self.parts.batcher),
                     len(self.ledger.requests))
        self.parts.synthesize_all(self.clock)
        wait(self.parts.futures(), _SETTLE_TIMEOUT_S)
        self._advance()
        wait(self.joiner.futures(), _SETTLE_TIMEOUT_S)
        self.core.joined(self.joiner.collect())

    def _drain(self) -> None:
        """Graceful stop: finish the work in flight (bounded), commit what is done."""
        deadline = self.clock() + 10.0
        try:
            while (self.parts.busy() or self.joiner.busy()) and self.clock() < deadline:
                self._advance()
                time.sleep(0.01)
            self._advance()
            self.checkpoint.commit_durable()
        except (AbortableError, S3Unavailable) as e:
            self.checkpoint.abort_quietly(e)


def _setter(event: threading.Event) -> Callable[[Future[Any]], None]:
    """A future's done callback that sets ``event`` (the thread that finished it wakes the loop)."""
    return lambda _fut: event.set()
