"""The seeds' design, built the way a competent user runs it: Celery + Redis, one task per request.

This is the benchmark peer of ttsflow (``ttsflow bench baseline``), not part of the product.

What one task (``baseline.synthesize``) does, in the worker process that runs it:

1. normalize the text and split it into segments (``streams.stage.text``, the very functions
   the ttsflow stage uses, same ``max_segment_chars``);
2. look the whole request up in the Redis audio cache (key: SHA-256 of voice, format and
   normalized text -> S3 key of the finished audio): a hit returns at once;
3. synthesize every segment with the same engine and voice as a ttsflow worker (all of
   the request's segments in one ``Engine.synthesize`` call, so a batching backend
   batches within the request), join them (``engine.audio.join``), encode WAV;
4. upload to the same S3 server and bucket (own key prefix), set the cache entry, and
   return ``{"key", "duration_s", "segments", "cached"}`` through the result backend.

Configuration (a deployment that is not crippled):

* the REAL Redis as broker and as result backend, on DB numbers of their own (broker
  ``/2``, results ``/3``), so ttsflow's cache on ``/0`` is never touched; the audio
  cache lives in the results DB under ``baseline:req:``;
* prefork pool, ``concurrency`` = the number of worker processes ttsflow gets; the
  engine is loaded once per pool process at ``worker_process_init`` (after the fork:
  onnxruntime sessions do not survive a fork), with ``threads`` = cores / processes;
* ``worker_prefetch_multiplier=1``, ``task_acks_late=True``,
  ``task_reject_on_worker_lost=True``: a task whose pool process is SIGKILLed is
  requeued at once, and one whose whole worker node dies is redelivered once the
  broker's ``visibility_timeout`` passes. That is at-least-once, the best Celery offers:
  a kill between the upload and the ack runs the request twice;
* no gossip, mingle or heartbeat (needless broker chatter for a single-queue service).

Each finished execution appends its request id to ``baseline:exec:<run_id>`` (results DB)
just before it returns: the benchmark's count of executions per request id, from which
duplicates are read (the result backend keeps only the last answer).

There is no HTTP front: the load generator calls ``apply_async`` (``.delay()`` with a
task id and a queue) directly, which is what the front would do per request; the
benchmark so measures the service, not a web server.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from streams.bench.harness import redis_db_url

__all__ = ["CACHE_NS", "EXEC_NS", "READY_NS", "TASK", "make_app"]

TASK = "baseline.synthesize"
CACHE_NS = "baseline:req:"
EXEC_NS = "baseline:exec:"
READY_NS = "baseline:ready:"
BROKER_DB = 2
RESULT_DB = 3

_log = logging.getLogger("bench.baseline")


def make_app(redis_url: str, *, visibility_timeout_s: int = 60, name: str = "ttsflow-baseline") -> Celery:
    """The Celery app on the Redis server of ``redis_url`` (broker DB 2, results DB 3)."""
    app = Celery(name, broker=redis_db_url(redis_url, BROKER_DB), backend=redis_db_url(redis_url, RESULT_DB))
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_pool="prefork",
        broker_transport_options={"visibility_timeout": int(visibility_timeout_s)},
        result_expires=3600,
        task_ignore_result=False,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
    )
    app.task(name=TASK, bind=True)(_synthesize)
    return app


# --- per pool process -----------------------------------------------------------------
class _State:
    settings: Any = None
    engine: Any = None
    store: Any = None
    redis: Any = None
    voice: str = ""
    model: str = ""


_state = _State()


def _load(run_id: str, **_: Any) -> None:
    """Load the engine, the S3 client and the Redis client once in this pool process."""
    import redis

    from storage.s3 import AudioStore
    from streams.settings import load_settings

    s = load_settings()
    _state.settings = s
    _state.engine = _open_engine(s)
    _state.voice = s.engine.voice or _state.engine.default_voice
    _state.model = f"{_state.engine.info.name}:{_state.engine.info.version}:{_state.engine.info.precision}"
    _state.store = AudioStore.from_section(s.s3, prefix=f"{s.s3.s3_prefix}baseline/")  # a bench run's own prefix
    _state.redis = redis.Redis.from_url(redis_db_url(s.redis.redis_url, RESULT_DB), socket_timeout=5)
    _state.redis.set(f"{READY_NS}{run_id}:{os.getpid()}", _state.model, ex=3600)
    _log.info("event=engine_loaded pid=%d model=%s threads=%d", os.getpid(), _state.model, s.engine.threads)


def _open_engine(s: Any) -> Any:
    """The engine a ttsflow worker with these settings serves: the store's current version if any."""
    from streams.worker.main import open_engine

    return open_engine(s.engine, model_dir=s.effective_model_dir, max_batch=s.batching.max_batch)


def _unload(**_: Any) -> None:
    for closer in (_state.engine, _state.store):
        if closer is not None:
            try:
                closer.close()
            except Exception:  # shutting down anyway
                pass


def install_process_hooks(run_id: str) -> None:
    """Load the engine in each pool process as it starts (``worker_process_init``)."""
    worker_process_init.connect(lambda **kw: _load(run_id, **kw), weak=False)
    worker_process_shutdown.connect(_unload, weak=False)


def request_digest(text: str, voice: str, fmt: str) -> str:
    """The cache key of a whole request: SHA-256 of voice, format and normalized text."""
    return hashlib.sha256(f"baseline-req-v1\0{voice}\0{fmt}\0{text}".encode()).hexdigest()


def _synthesize(self: Any, request_id: str, text: str, run_id: str, fmt: str = "wav") -> dict[str, Any]:
    from engine import Failure, SynthItem
    from engine import audio as audio_codec
    from streams.stage.text import normalize, split_segments

    t0 = time.perf_counter()
    started_at = time.time()
    synth_s = upload_s = 0.0
    s = _state.settings
    norm = normalize(text)
    segs = split_segments(norm, s.stage.max_segment_chars)
    if not segs:
        raise ValueError("empty text")
    digest = request_digest(norm, _state.voice, fmt)
    cache_key = CACHE_NS + digest
    hit = _state.redis.get(cache_key)
    if hit is not None:
        key, _, dur = hit.decode().partition(" ")
        out = {"key": key, "duration_s": float(dur or 0), "segments": len(segs), "cached": True}
    else:
        t_synth = time.perf_counter()
        results = _state.engine.synthesize([SynthItem(seg, _state.voice) for seg in segs])
        synth_s = time.perf_counter() - t_synth
        bad = [r for r in results if isinstance(r, Failure)]
        if bad:
            raise RuntimeError(f"{bad[0].code}: {bad[0].message}")
        sr = _state.engine.sample_rate
        joined = audio_codec.join([r.samples for r in results], sr)
        data = audio_codec.encode(joined, sr, fmt)
        key = _state.store.key("req", digest, fmt)
        t_put = time.perf_counter()
        _state.store.put(key, data, audio_codec.content_type(fmt))
        upload_s = time.perf_counter() - t_put
        duration = round(len(joined) / sr, 4)
        _state.redis.set(cache_key, f"{key} {duration}", ex=s.redis.cache_ttl_s)
        out = {"key": key, "duration_s": duration, "segments": len(segs), "cached": False}
    _state.redis.rpush(EXEC_NS + run_id, request_id)
    _state.redis.expire(EXEC_NS + run_id, 3600)
    out["task_s"] = round(time.perf_counter() - t0, 4)
    out.update(started_at=started_at, synth_s=round(synth_s, 4), upload_s=round(upload_s, 4))  # bench's breakdown
    return out
