"""``ttsflow worker``: process start-up -- settings, transactional id, engine, metrics, S3, Redis -- then the loop.

The loop itself is :class:`streams.worker.loop.Worker`; this module only builds what it
needs, installs the signal handlers and maps the one error root that stops a worker
to an exit status.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from storage.cache import AudioCache
from storage.s3 import AudioStore
from streams.errors import FatalError, KafkaAccessError, RetriableError, StorageFatal, StreamError
from streams.settings import EngineSettings, S3Settings, Settings, SettingsError, load_settings
from streams.worker.loop import Worker

__all__ = ["cache_namespace", "claim_transactional_id", "end_open_transaction", "main", "member_id", "open_engine",
           "serve_slot", "serving_slot", "take_over_slot"]

_log = logging.getLogger("ttsflow.worker")


def cache_namespace(s3: S3Settings) -> str:
    """Redis key prefix of the segment cache: one per bucket and prefix (one per audio store)."""
    return f"ttsflow:seg:{s3.s3_bucket}/{s3.s3_prefix}:"


def open_engine(engine: EngineSettings, *, model_dir: Path, max_batch: int) -> Any:
    """The engine a worker with this engine section serves, started: a hibari/piper/kokoro backend from the versioned
    store under ``model_dir`` (a ``ModelManager``: the store's current version decides, hot reload on SIGHUP),
    chattts from the user's asset dir (no store, no hot reload). Several backends (``TTS_BACKENDS``): one
    :class:`engine.router.BackendRouter` over them, the voice picking the backend. Raises ``EngineError``
    (ModelLoadError, StoreError)."""
    names = engine.served_backends
    if len(names) == 1:
        return _open_backend(engine, names[0], model_dir=model_dir, max_batch=max_batch)

    from engine.router import BackendRouter

    t0 = time.perf_counter()
    engines: dict[str, Any] = {}
    try:
        for name in names:
            engines[name] = _open_backend(engine, name, model_dir=model_dir, max_batch=max_batch)
    except EngineError:
        for e in engines.values():
            e.close()
        raise
    router = BackendRouter(engines, default=names[0])
    router.cold_start_s = time.perf_counter() - t0
    return router


def model_lanes(engine: EngineSettings, cores: int | None = None) -> tuple[int, int]:
    """(model calls at once, intra-op threads per call) for this engine section on ``cores`` cores.

    ``TTS_MODEL_LANES`` 0 (auto) is 2 when every served backend runs items one by one (hibari,
    kokoro: its calls cannot use a batch to fill the cores) and the budget is 2 or more threads, else 1.
    ``TTS_THREADS`` is the budget the lanes share (0: all cores); one lane with no budget set
    leaves onnxruntime its default (all cores)."""
    from engine.errors import ModelLoadError
    from engine.registry import backend_class

    budget = engine.threads or cores or len(os.sched_getaffinity(0))
    lanes = engine.model_lanes
    if lanes == 0:
        try:
            one_by_one = all(not backend_class(n).native_batching for n in engine.served_backends)
        except ModelLoadError:
            one_by_one = False
        lanes = 2 if one_by_one and budget >= 2 else 1
    if lanes == 1:
        return 1, engine.threads
    return lanes, max(1, budget // lanes)


def _open_backend(engine: EngineSettings, name: str, *, model_dir: Path, max_batch: int) -> Any:
    from engine.registry import load_engine
    from engine.store import MODELS

    if name in MODELS:
        from engine.reload import ModelManager
        from engine.store import ModelStore

        manager = ModelManager(ModelStore(model_dir), name, providers=engine.providers,
                               threads=engine.threads, max_batch=max_batch)
        manager.start()
        return manager
    options = engine.engine_options() if name == engine.backend else {}
    return load_engine(name, precision=engine.precision, providers=engine.providers,
                       threads=engine.threads, max_batch=max_batch, **options)


def claim_transactional_id(settings: Settings, *, lock_dir: Path | None = None, slots: int = 256) -> str:
    """``<prefix>-<hostname>-<slot>``: the lowest slot no live worker of this cluster and prefix
    holds on this host (:func:`streams.identity.claim_slot`), held until exit.

    Workers started side by side on one machine must not share a transactional.id (each
    would fence the other, forever), yet a restarted worker should take its predecessor's
    id, so that its first ``init_transactions`` aborts the transaction the dead one left
    open instead of leaving ``read_committed`` readers stuck behind it until the transaction
    timeout. The prefix (``TTS_TRANSACTIONAL_ID_PREFIX``, default the worker group) keeps
    two groups on one host apart and lets a Kafka ACL grant a group its ids by prefix.
    In Kubernetes the StatefulSet sets ``TTS_TRANSACTIONAL_ID`` to the prefix and pod name.
    """
    from streams.identity import claim_slot

    prefix = settings.kafka.effective_transactional_id_prefix
    slot = claim_slot("worker", settings.kafka.bootstrap_servers, prefix, lock_dir=lock_dir, slots=slots)
    return _host_id(settings, slot)


def _host_id(settings: Settings, slot: int) -> str:
    """``<prefix>-<hostname>-<slot>``: a claimed transactional id, or a serving slot's group member."""
    from streams.identity import host_name

    return f"{settings.kafka.effective_transactional_id_prefix}-{host_name()}-{slot}"


def serving_slot(settings: Settings, *, lock_dir: Path | None = None) -> int | None:
    """With ``TTS_WORKER_SLOTS`` N: the lowest of the N serving slots free on this host, held until exit,
    or None when live workers hold all N (this one is a standby: :func:`take_over_slot`). A slot is a
    static group member (:func:`member_id`); the transactional id is the process's own
    (:func:`claim_transactional_id`), so a standby readies its producer before it serves."""
    from streams.identity import claim_slot

    try:
        return claim_slot("member", settings.kafka.bootstrap_servers, settings.kafka.effective_transactional_id_prefix,
                          lock_dir=lock_dir, slots=settings.kafka.worker_slots)
    except FatalError:
        return None


def take_over_slot(settings: Settings, *, lock_dir: Path | None = None,
                   stop: Callable[[], bool] = lambda: False) -> int | None:
    """A standby's wait: the first of the ``TTS_WORKER_SLOTS`` serving slots to be freed (a serving
    worker killed or stopped), held until exit; None once ``stop()`` says so."""
    from streams.identity import wait_for_slot

    return wait_for_slot("member", settings.kafka.bootstrap_servers, settings.kafka.effective_transactional_id_prefix,
                         settings.kafka.worker_slots, lock_dir=lock_dir, stop=stop)


def member_id(settings: Settings, slot: int) -> str:
    """The group member (``group.instance.id``) of serving slot ``slot``: ``<prefix>-<hostname>-<slot>``."""
    return _host_id(settings, slot)


def serve_slot(settings: Settings, slot: int, *, lock_dir: Path | None = None) -> threading.Thread | None:
    """This worker now serves ``slot`` (held): its transactional id noted in the slot for the next
    holder, and the transactional id the last holder noted, if another, fenced on a thread
    (:func:`end_open_transaction`). Returns that thread, if any."""
    from streams.identity import held_slot_note, note_in_held_slot

    kafka = settings.kafka
    scope = ("member", kafka.bootstrap_servers, kafka.effective_transactional_id_prefix, slot)
    last = held_slot_note(*scope, lock_dir=lock_dir).strip()
    note_in_held_slot(*scope, kafka.effective_transactional_id, lock_dir=lock_dir)
    if not last or last == kafka.effective_transactional_id:
        return None
    t = threading.Thread(target=end_open_transaction, args=(settings, last), kwargs={"lock_dir": lock_dir},
                         name="fence-last", daemon=True)
    t.start()
    return t


def end_open_transaction(settings: Settings, transactional_id: str, *, lock_dir: Path | None = None,
                         timeout_s: float = 10.0) -> bool:
    """End now, not at its timeout, the transaction a dead worker may have left open under
    ``transactional_id`` (one of this host's claimed ids): a producer of that id is initialised
    (``init_transactions`` fences the dead one; the coordinator aborts its transaction, and
    ``read_committed`` readers of what it wrote stop waiting behind it), then dropped. Done only
    while holding that id's lock: a live process that claimed it (a restart) fences it itself.
    Returns whether it was done. Errors are logged (the transaction then ends at its timeout)."""
    from confluent_kafka import Producer

    from streams.identity import try_slot
    from streams.kafka import transactional_config

    kafka = settings.kafka
    slot = transactional_id.rpartition("-")[2]
    if not slot.isdigit() or _host_id(settings, int(slot)) != transactional_id:
        _log.warning("event=fence_skipped transactional_id=%s reason=%r", transactional_id, "not an id of this host")
        return False
    held = try_slot("worker", kafka.bootstrap_servers, kafka.effective_transactional_id_prefix, int(slot),
                    lock_dir=lock_dir)
    if held is None:
        _log.info("event=fence_skipped transactional_id=%s reason=%r", transactional_id, "a live process holds it")
        return False
    t0 = time.monotonic()
    try:
        producer = Producer(transactional_config(dataclasses.replace(kafka, transactional_id=transactional_id)))
        producer.init_transactions(timeout_s)
        del producer
    except Exception as e:  # broker down, refused: the transaction's own timeout ends it
        _log.warning("event=fence_failed transactional_id=%s error=%s", transactional_id, e)
        return False
    finally:
        held.close()
    _log.info("event=last_holder_fenced transactional_id=%s took_s=%.2f", transactional_id, time.monotonic() - t0)
    return True


_STANDBY_NICE = 19  # a standby's start yields the CPU to every process that runs at the usual priority
_AUTOGROUP = Path("/proc/self/autogroup")


def _yield_while_starting() -> Callable[[], None] | None:
    """A standby's start (imports, the model's load and warm-up: about a second of CPU on a small host)
    at the lowest CPU priority, so that on the host of a killed worker it does not slow the standby that
    took over and is draining the dead one's backlog. Returns what gives the process its priority back,
    called before the standby waits; None where nothing was lowered.

    Two priorities are lowered, each only where it can be raised again:

    * every thread's nice (this thread's now; threads started after, onnxruntime's and the clients',
      inherit it), where ``CAP_SYS_NICE`` or ``RLIMIT_NICE`` allows raising it (tried on a thread of
      its own, which then ends). It orders threads of one scheduling group only.
    * the nice of the process's *autogroup*, where the process leads its own session (a supervisor's
      ``setsid``, so the group is its alone). Linux with ``sched_autogroup`` (the default on desktop
      and many server kernels) shares the CPU between sessions first: a thread's nice 19 there took
      nothing from a worker of another session (two busy processes on one core, one at nice 19: 50%
      each; its autogroup at 19: 98% / 2%). Raising it back to 0 needs no privilege. Inside a CPU
      cgroup (a container, a systemd unit) the cgroup decides and this changes nothing."""
    before = os.getpriority(os.PRIO_PROCESS, 0)  # on Linux, this thread's
    threads = before < _STANDBY_NICE and _may_raise_priority(before)
    group = _autogroup_nice()
    if group is not None and not (0 <= group < _STANDBY_NICE and _set_autogroup_nice(_STANDBY_NICE)):
        group = None
    if not threads and group is None:
        return None
    if threads:
        os.setpriority(os.PRIO_PROCESS, 0, _STANDBY_NICE)

    def restore() -> None:
        if threads:
            for tid in os.listdir("/proc/self/task"):
                try:
                    os.setpriority(os.PRIO_PROCESS, int(tid), before)
                except ProcessLookupError:  # a thread that ended meanwhile
                    pass
        if group is not None and not _set_autogroup_nice(group, tries=50):  # it would serve at nice 19
            _log.warning("event=standby_priority_not_restored autogroup_nice=%d", _STANDBY_NICE)
            return
        _log.info("event=standby_priority_restored nice=%s autogroup_nice=%s", before if threads else "unchanged",
                  "unchanged" if group is None else group)

    return restore


def _autogroup_nice() -> int | None:
    """The nice of this process's autogroup where the process leads its session (the group, one per
    session, is then its own: no other process's priority changes with it); None otherwise, or where
    the kernel has no autogroups."""
    if os.getsid(0) != os.getpid():
        return None
    try:
        return int(_AUTOGROUP.read_text().split()[-1])  # "/autogroup-123 nice 0"
    except (OSError, ValueError, IndexError):
        return None


def _set_autogroup_nice(nice: int, *, tries: int = 10) -> bool:
    """Set this process's autogroup's nice; False where the kernel refuses. An unprivileged process gets one
    change every 100 ms (any process's, kernel-wide): a refusal for that (EAGAIN) is tried again, ``tries``
    times in all, 0.11 s apart."""
    for _ in range(tries):
        try:
            _AUTOGROUP.write_text(str(nice))
            return True
        except BlockingIOError:
            time.sleep(0.11)
        except OSError:
            return False
    return False


def _may_raise_priority(to: int) -> bool:
    """Whether a thread of this process lowered below nice ``to`` may go back to it (tried on a thread
    that ends after)."""
    ok: list[bool] = []

    def attempt() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, to + 1)
            os.setpriority(os.PRIO_PROCESS, 0, to)
            ok.append(True)
        except PermissionError:
            ok.append(False)

    t = threading.Thread(target=attempt, name="nice-probe")
    t.start()
    t.join()
    return bool(ok and ok[0])


_GC_LOG_S = 0.005  # a garbage collection at least this long is logged (the tail benchmarks read them)


def _watch_gc(metrics: Any) -> None:
    """Time each garbage collection; log those of ``_GC_LOG_S`` or more (``event=gc_pause``)."""
    import gc

    began = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        took = time.perf_counter() - began[0]
        metrics.gc_pause(took)
        if took >= _GC_LOG_S:
            _log.info("event=gc_pause generation=%d ms=%.1f at=%.3f", info.get("generation", -1), took * 1000,
                      time.time())

    gc.callbacks.append(on_gc)


def _beside_the_load(fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
    """``fn(*args, **kwargs)`` on a thread of its own, started now: work a start needs after the model's
    load done while onnxruntime builds its sessions (which lets go of the GIL). ``result()`` raises what it raised."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="start-beside-load")
    done = pool.submit(fn, *args, **kwargs)
    pool.shutdown(wait=False)  # the thread ends with its one task
    return done


def _stand_by(settings: Settings, metrics: Any) -> int | None:
    """A warm standby's wait, its model loaded and warm and its producer ready: until a serving slot is
    freed (its worker killed or stopped), then that slot; None on SIGTERM or SIGINT meanwhile.
    ``/readyz`` answers 200 ``standby`` while it waits."""
    stopping: list[int] = []

    def _on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    before = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    metrics.identify(standby_for=settings.kafka.effective_transactional_id_prefix,
                     transactional_id=settings.kafka.effective_transactional_id, group=settings.kafka.worker_group)
    metrics.standing_by(True)
    _log.info("event=standby_waiting slots=%d prefix=%s transactional_id=%s", settings.kafka.worker_slots,
              settings.kafka.effective_transactional_id_prefix, settings.kafka.effective_transactional_id)
    t0 = time.monotonic()
    try:
        taken = take_over_slot(settings, stop=lambda: metrics.heartbeat() or bool(stopping))
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    metrics.standing_by(False)
    if taken is None:
        _log.info("event=standby_stopped signum=%d", stopping[0])
        return None
    _log.info("event=standby_takeover member=%s waited_s=%.1f at=%.3f", member_id(settings, taken),
              time.monotonic() - t0, time.time())
    return taken


def _freeze_heap() -> None:
    """What the start made (the model's front end and its dictionaries, the clients, the modules) lives
    as long as the process: moved out of the collector's sight, so a full collection while serving
    scans only what serving made (on hibari's start, ~56,000 tracked objects: 31-35 ms a full collection)."""
    import gc

    gc.freeze()


def _exit_code(e: StreamError, *, stopping: bool) -> int:
    """How a worker that stopped on ``e`` exits: 0 only when told to stop while still retrying."""
    if isinstance(e, StorageFatal):  # access denied, no bucket: configuration, not an outage
        _log.critical("event=storage_fatal error=%s", e)
        return 1
    if isinstance(e, FatalError):
        _log.critical("event=fatal error=%s", e)
        return 1
    if isinstance(e, RetriableError):  # still retrying (broker unreachable at start) when told to stop
        _log.warning("event=stopped_while_retrying error=%s", e)
        return 0 if stopping else 1
    raise e


def _kafka_refusal(settings: Settings) -> KafkaAccessError | None:
    """Why the cluster refuses this worker (login, TLS, a missing ACL), checked before the model loads;
    None when it accepts it or does not answer yet (the loop waits for a broker that is down)."""
    from streams.kafka.access import require, role_needs

    try:
        require(settings.kafka, role_needs(settings.kafka, "worker"), role="worker", timeout_s=5.0)
    except KafkaAccessError as e:
        return e
    except RetriableError as e:
        _log.warning("event=access_not_checked error=%s", e)
    return None


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="ttsflow worker", description="Run a synthesis worker (exactly-once).")
    ap.add_argument("--max-batch", type=int, help="most segments per engine batch (TTS_MAX_BATCH)")
    ap.add_argument("--max-wait-ms", type=int, help="longest wait for a batch to fill (TTS_MAX_WAIT_MS)")
    ap.add_argument("--backend", help="engine backend (TTS_BACKEND)")
    ap.add_argument("--metrics-port", type=int, help="Prometheus port, 0 disables (TTS_METRICS_PORT)")
    ap.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                    help="postprocess/encode on a second thread while the model runs (default: only on GPU)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, backend=args.backend,
                                 metrics_port=args.metrics_port)
    except SettingsError as e:
        print(f"ttsflow worker: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.process.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    slot: int | None = None  # the serving slot held (with TTS_WORKER_SLOTS)
    standby = False
    if not settings.kafka.transactional_id:
        settings = settings.replace(transactional_id=claim_transactional_id(settings))
        if settings.kafka.worker_slots:
            slot = serving_slot(settings)
            standby = slot is None  # every serving slot held: load, ready the producer, then wait to take one
    elif settings.kafka.worker_slots:
        _log.warning("event=worker_slots_ignored reason=%r", "TTS_TRANSACTIONAL_ID is given: no slots, no standby")
    if slot is not None:
        settings = settings.replace(group_instance_id=member_id(settings, slot))
        serve_slot(settings, slot)
    if (refused := _kafka_refusal(settings)) is not None:
        print(f"ttsflow worker: {refused}", file=sys.stderr)
        return 1
    restore_priority = _yield_while_starting() if standby else None
    from engine.reload import ModelManager, install_sighup
    from engine.router import BackendRouter
    from streams.worker.metrics import WorkerMetrics
    from streams.worker.prelude import KafkaPrelude

    # fencing and the done topic while the model loads (a standby's too: its producer is ready when it takes over)
    prelude = KafkaPrelude(settings).start()
    # the Redis client (importing redis, ~0.1 s of Python) beside the model's load, not after it
    cache_made = _beside_the_load(AudioCache.from_section, settings.redis, namespace=cache_namespace(settings.s3))
    engine: Any
    lanes, threads = model_lanes(settings.engine)
    try:
        engine = open_engine(dataclasses.replace(settings.engine, threads=threads),
                             model_dir=settings.effective_model_dir, max_batch=settings.batching.max_batch)
        if isinstance(engine, ModelManager):  # served from the versioned store: hot reload on SIGHUP
            if settings.engine.precision not in ("auto", engine.version.precision):
                _log.warning("event=precision_ignored precision=%s serving=%s hint=%r", settings.engine.precision,
                             engine.version.ref, "the store's current version decides; `ttsflow model use` changes it")
            install_sighup(engine)
        elif isinstance(engine, BackendRouter):  # several backends: SIGHUP reloads those served from the store
            install_sighup(engine)  # type: ignore[arg-type]
    except EngineError as e:  # ModelLoadError, StoreError
        print(f"ttsflow worker: {e}", file=sys.stderr)
        return 2
    _log.info("event=engine_loaded model=%s provider=%s cold_start_s=%.2f lanes=%d threads_per_call=%s",
              engine.info.name, engine.info.provider, engine.cold_start_s or 0.0, lanes, threads or "all")
    _freeze_heap()
    # boto3's client (0.2-0.3 s of Python) is made while the worker joins its group, not before: PUTs and
    # HEADs go without it, its first GET waits for it (made beside the model's load, it slowed the load as much)
    store = AudioStore.from_section(settings.s3).warm()
    metrics = WorkerMetrics(settings.process.metrics_port)  # serves /metrics, /healthz, /readyz once the model is loaded
    if standby:
        if restore_priority is not None:
            restore_priority()
        taken = _stand_by(settings, metrics)
        if taken is None:  # told to stop while waiting
            prelude.result()  # (its thread ended: nothing of it outlives the process's close)
            cache_made.result().close()
            store.close()
            engine.close()
            metrics.close()
            return 0
        settings = settings.replace(group_instance_id=member_id(settings, taken))
        serve_slot(settings, taken)  # the dead worker's open transaction ended beside the start
    metrics.identify(transactional_id=settings.kafka.effective_transactional_id,
                     member=settings.kafka.effective_group_instance_id, group=settings.kafka.worker_group)
    _watch_gc(metrics)
    if isinstance(engine, BackendRouter):
        engine.on_batch = metrics.backend_batch
    cache = cache_made.result()
    worker = Worker(settings.kafka, settings.batching, engine, store, cache, metrics,
                    dedup_window_s=settings.stage.dedup_window_s, overlap=args.overlap, lanes=lanes,
                    ready=prelude.result())

    def _on_signal(signum: int, _frame: Any) -> None:
        _log.info("event=signal signum=%d", signum)
        worker.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        code = worker.run()
    except StreamError as e:  # the one root: its kind says how the process ends
        code = _exit_code(e, stopping=worker.stopping)
    finally:
        cache.close()
        store.close()
        engine.close()
        metrics.close()
    if worker.abandoned:  # a producer left wedged in a call: its destructor could hang the exit
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
