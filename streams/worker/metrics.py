"""The worker's Prometheus metrics and its probe endpoints; the only worker module that
imports prometheus_client.

The loop calls small hook methods (``consumed``, ``batch``, ``completion``...) and never
touches a metric object. Metrics live in their own registry and are served, together
with ``/healthz`` (the loop is alive: it went round within ``stall_s``) and ``/readyz``
(the engine is loaded and the consumer has partitions or is waiting for them), on
``settings.metrics_port``. ``NullMetrics``-style use: a ``WorkerMetrics`` created with
``port=0`` collects but serves nothing (tests read values with :meth:`value`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.metrics_http import ProbedMetrics

__all__ = ["WorkerMetrics"]

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
_FILL_BUCKETS = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)


class WorkerMetrics(ProbedMetrics):
    def __init__(self, port: int = 0, *, stall_s: float = 60.0, host: str = "0.0.0.0") -> None:
        r = self.registry = CollectorRegistry()
        self._segments = Counter("ttsflow_worker_segments_consumed_total", "Segment events consumed.", registry=r)
        self._dropped = Counter("ttsflow_worker_segments_skipped_total",
                                "Segments dropped as already done, by reason.", ["reason"], registry=r)
        self._bad = Counter("ttsflow_worker_bad_segments_total", "Segment events that could not be decoded.",
                            registry=r)
        self._refused = Counter("ttsflow_worker_audio_refused_total",
                                "Synthesized parts refused by the audio check (empty, silent, too_short); each "
                                "fails its request.", ["reason"], registry=r)
        self._batches = Counter("ttsflow_worker_batches_total", "Engine batches run.", registry=r)
        self._fill = Histogram("ttsflow_worker_batch_fill", "Batch size divided by max_batch.",
                               buckets=_FILL_BUCKETS, registry=r)
        self._wait = Histogram("ttsflow_worker_queue_wait_seconds", "Time a segment waited in the batcher.",
                               buckets=(0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5), registry=r)
        self._synth = Histogram("ttsflow_worker_synth_seconds", "Engine time per batch.",
                                buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10), registry=r)
        self._e2e = Histogram("ttsflow_worker_e2e_latency_seconds",
                              "Request creation (or enqueue) to committed completion.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self._hits = Counter("ttsflow_worker_cache_hits_total", "Segments served from the Redis cache.", registry=r)
        self._misses = Counter("ttsflow_worker_cache_misses_total", "Segments not in the cache.", registry=r)
        self._s3_errors = Counter("ttsflow_worker_s3_errors_total", "S3 calls that failed.", registry=r)
        self._redis_errors = Counter("ttsflow_worker_redis_errors_total", "Redis calls that failed (cache bypassed).",
                                     registry=r)
        self._aborts = Counter("ttsflow_worker_transaction_aborts_total", "Kafka transactions aborted.", registry=r)
        self._replaced = Counter("ttsflow_worker_producer_replacements_total",
                                 "Transactional producers replaced after a call ignored its timeout.", registry=r)
        self._txn_s = Histogram("ttsflow_worker_transaction_seconds",
                                "Wall time of a committed transaction, begin to commit (on the producer thread; the loop goes on).",
                                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self._gc = Histogram("ttsflow_worker_gc_pause_seconds", "Python garbage collections (every thread waits).",
                             buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1), registry=r)
        self._commits = Counter("ttsflow_worker_transactions_total", "Kafka transactions committed.", registry=r)
        self._completions = Counter("ttsflow_worker_completions_total", "Completions committed, by status.",
                                    ["status"], registry=r)
        self._rtf = Histogram("ttsflow_worker_rtf", "Real-time factor of a batch: engine seconds / audio seconds.",
                              buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2), registry=r)
        self._audio = Counter("ttsflow_worker_audio_seconds_total", "Seconds of audio synthesized by the engine.",
                              registry=r)
        self._backend_segments = Counter("ttsflow_worker_backend_segments_total",
                                         "Segments synthesized, by backend (a worker serving several, TTS_BACKENDS).",
                                         ["backend"], registry=r)
        self._backend_audio = Counter("ttsflow_worker_backend_audio_seconds_total",
                                      "Seconds of audio synthesized, by backend (a worker serving several).",
                                      ["backend"], registry=r)
        self._inflight = Gauge("ttsflow_worker_inflight_segments", "Segments consumed and not yet committed.",
                               registry=r)
        self._assigned = Gauge("ttsflow_worker_assigned_partitions", "Partitions of tts.segments assigned.",
                               registry=r)
        self._ready = Gauge("ttsflow_worker_ready", "1 when the worker is ready to consume.", registry=r)
        self._reloads = Counter("ttsflow_worker_model_reloads_total",
                                "Hot model reloads (SIGHUP) applied by the worker, by result (ok or refused).",
                                ["result"], registry=r)
        self._standby = Gauge("ttsflow_worker_standby",
                              "1 while the worker is a warm standby (TTS_WORKER_SLOTS: model loaded, waiting to take "
                              "over a serving slot).", registry=r)
        self._standing_by = False
        self._start(port, host, stall_s)

    def standing_by(self, on: bool) -> None:
        """A warm standby: ``/readyz`` answers 200 ``standby`` (loaded, able to take over) while it waits."""
        self._standing_by = on
        self._standby.set(1 if on else 0)
        self.ready(on)

    def readiness(self, ok: bool) -> str:
        return "standby" if ok and self._standing_by else super().readiness(ok)

    # -- hooks the loop calls --------------------------------------------------------
    def consumed(self, n: int = 1) -> None:
        self._segments.inc(n)

    def skipped(self, reason: str, n: int = 1) -> None:
        self._dropped.labels(reason).inc(n)

    def bad_segment(self) -> None:
        self._bad.inc()

    def batch(self, size: int, max_batch: int, synth_s: float, audio_s: float, waits: list[float]) -> None:
        self._batches.inc()
        self._fill.observe(size / max_batch)
        self._synth.observe(synth_s)
        for w in waits:
            self._wait.observe(w)
        if audio_s > 0:
            self._rtf.observe(synth_s / audio_s)
            self._audio.inc(audio_s)

    def backend_batch(self, backend: str, items: int, audio_s: float) -> None:
        """One post-processed model call of ``backend`` (engine.router.BackendRouter.on_batch)."""
        self._backend_segments.labels(backend).inc(items)
        if audio_s > 0:
            self._backend_audio.labels(backend).inc(audio_s)

    def audio_refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()

    def cache(self, hit: bool) -> None:
        (self._hits if hit else self._misses).inc()

    def s3_error(self) -> None:
        self._s3_errors.inc()

    def redis_error(self, op: str = "", err: BaseException | None = None) -> None:
        self._redis_errors.inc()

    def transaction(self, committed: bool, seconds: float | None = None) -> None:
        (self._commits if committed else self._aborts).inc()
        if seconds is not None:
            self._txn_s.observe(seconds)

    def gc_pause(self, seconds: float) -> None:
        self._gc.observe(seconds)

    def producer_replaced(self) -> None:
        self._replaced.inc()

    def completion(self, status: str, e2e_s: float | None) -> None:
        self._completions.labels(status).inc()
        if e2e_s is not None and e2e_s >= 0:
            self._e2e.observe(e2e_s)

    def inflight(self, n: int) -> None:
        self._inflight.set(n)

    def assigned(self, n: int) -> None:
        self._assigned.set(n)

    def model_reload(self, swapped: bool) -> None:
        self._reloads.labels("ok" if swapped else "refused").inc()
