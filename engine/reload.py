"""Loading a model version into an engine, its health check, and hot reload between batches.

``ModelManager`` holds the engine that serves. ``reload()`` loads the version the store's
``current`` points to *beside* the serving one (which keeps answering ``synthesize`` on
other threads meanwhile), warms it up, runs an ASR-free health check on a few sentences
and only then swaps. Guarantees:

- A candidate that fails anywhere (checksum, onnxruntime refusing the file, warm-up,
  health check) is closed and refused; the old engine keeps serving and the result says
  why. ``reload`` never raises for a bad candidate.
- The swap is one reference assignment under a lock: a ``synthesize`` call uses either the
  old engine or the new one for its whole batch. The old engine is closed once the last
  call that leased it returns.
- ``install_sighup`` only sets a flag (signal handlers must not do work); the worker calls
  ``maybe_reload()`` between batches, on its loop thread.

Health check (no recognizer): every sentence gives audio; every sample finite; RMS above a
floor (not silent); seconds per input character within bounds (not truncated, not stuck).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from engine.base import Audio, SynthItem
from engine.engine import Engine
from engine.errors import EngineError, ModelLoadError
from engine.store import ModelStore, ModelVersion

__all__ = ["HEALTH_SENTENCES", "HealthReport", "ModelManager", "ReloadResult", "health_check",
           "install_sighup", "open_engine"]

_log = logging.getLogger("ttsflow.engine")

HEALTH_SENTENCES: tuple[str, ...] = (
    "The health check reads this first sentence aloud.",
    "Seven bright kites drifted slowly over the quiet harbor.",
    "Please confirm that every word of this line can be heard.",
)
RMS_FLOOR = 0.003            # ~ -50 dBFS: below this the "speech" is silence
S_PER_CHAR = (0.02, 0.25)    # normal speech is ~0.06-0.08 s per character


# --------------------------------------------------------------------------- loading
def open_engine(mv: ModelVersion, *, providers: str | Sequence[str] = "auto", threads: int = 0, max_batch: int = 8,
                warm_up: bool = True, deterministic: bool = False) -> Engine:
    """An engine for an installed version (warmed up; ``cold_start_s`` set).

    ``deterministic`` turns Piper's noise off (noise scales 0) so two precisions can be
    compared sample for sample; hibari is deterministic already (seeded DSP noise).
    """
    from engine.registry import backend_class, load_engine

    if not deterministic or mv.model != "piper":
        return load_engine(mv.model, model_path=mv.onnx_path, precision=mv.precision, providers=providers,
                           threads=threads, version=mv.version, config_path=mv.config_path, max_batch=max_batch,
                           warm_up=warm_up)
    t0 = time.perf_counter()
    be = backend_class("piper")(mv.onnx_path, config_path=mv.config_path, providers=providers,  # type: ignore[call-arg]
                                threads=threads, precision=mv.precision, version=mv.version,
                                noise_scale=0.0, noise_w=0.0)
    engine = Engine(be, max_batch=max_batch)
    if warm_up:
        engine.warm_up()
    engine.cold_start_s = time.perf_counter() - t0
    return engine


# --------------------------------------------------------------------------- health check
@dataclass(frozen=True, slots=True)
class HealthReport:
    ok: bool
    reason: str
    seconds: float
    sentences: list[dict[str, Any]] = field(default_factory=list)


def health_check(engine: Any, sentences: Sequence[str] = HEALTH_SENTENCES, *, rms_floor: float = RMS_FLOOR,
                 s_per_char: tuple[float, float] = S_PER_CHAR) -> HealthReport:
    """Speak ``sentences`` and judge the audio without a recognizer (see the module docstring)."""
    t0 = time.perf_counter()
    try:
        results = engine.synthesize([SynthItem(s, "") for s in sentences])
    except Exception as e:  # the engine should not raise, but a broken model may make it
        return HealthReport(False, f"synthesize raised {type(e).__name__}: {e}", time.perf_counter() - t0)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for text, res in zip(sentences, results, strict=True):
        if not isinstance(res, Audio):
            problems.append(f"{text[:24]!r}: no audio ({res.code}: {res.message})")
            rows.append({"text": text, "ok": False})
            continue
        x = np.asarray(res.samples, np.float64)
        finite = bool(np.all(np.isfinite(x)))
        rms = float(np.sqrt(np.mean(x * x))) if len(x) and finite else 0.0
        spc = res.duration_s / max(1, len(text))
        row = {"text": text, "duration_s": round(res.duration_s, 3), "rms": round(rms, 5),
               "s_per_char": round(spc, 4), "finite": finite}
        problem = None
        if not finite:
            problem = "non-finite samples"
        elif rms < rms_floor:
            problem = f"silent (rms {rms:.5f} < {rms_floor})"
        elif not s_per_char[0] <= spc <= s_per_char[1]:
            problem = f"implausible duration ({spc:.3f} s/char outside {s_per_char[0]}..{s_per_char[1]})"
        if problem:
            problems.append(f"{text[:24]!r}: {problem}")
        row["ok"] = problem is None
        rows.append(row)
    return HealthReport(not problems, "; ".join(problems) or "ok", round(time.perf_counter() - t0, 3), rows)


# --------------------------------------------------------------------------- hot reload
@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What a reload did. ``swapped`` False with ``reason`` says why the old engine stayed."""

    swapped: bool
    serving: str
    candidate: str
    reason: str
    load_s: float = 0.0
    cold_start_s: float = 0.0
    health: HealthReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Loader = Callable[[ModelVersion], Engine]


class ModelManager:
    """The serving engine of one model, swapped by ``reload`` only after a health check."""

    def __init__(self, store: ModelStore, model: str, *, loader: Loader | None = None,
                 providers: str | Sequence[str] = "auto", threads: int = 0, max_batch: int = 8,
                 health_sentences: Sequence[str] = HEALTH_SENTENCES) -> None:
        self.store = store
        self.model = model
        self._loader: Loader = loader or (lambda mv: open_engine(mv, providers=providers, threads=threads,
                                                                 max_batch=max_batch))
        self._health_sentences = tuple(health_sentences)
        self._lock = threading.Lock()            # guards _engine, _version, _leases, _retired
        self._reloading = threading.Lock()       # one reload at a time
        self._engine: Engine | None = None
        self._version: ModelVersion | None = None
        self._leases: dict[int, int] = {}
        self._retired: dict[int, Engine] = {}
        self._pending = False                    # set from a signal handler: a plain flag
        self.last_result: ReloadResult | None = None

    # -- serving ------------------------------------------------------------------------
    @property
    def version(self) -> ModelVersion:
        if self._version is None:
            raise ModelLoadError(f"{self.model}: no engine loaded; call start()")
        return self._version

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise ModelLoadError(f"{self.model}: no engine loaded; call start()")
        return self._engine

    @contextmanager
    def lease(self) -> Iterator[Engine]:
        """The serving engine, kept open until the ``with`` block ends even if a reload swaps it."""
        with self._lock:
            engine = self.engine
            self._leases[id(engine)] = self._leases.get(id(engine), 0) + 1
        try:
            yield engine
        finally:
            close = None
            with self._lock:
                n = self._leases[id(engine)] - 1
                if n:
                    self._leases[id(engine)] = n
                else:
                    del self._leases[id(engine)]
                    close = self._retired.pop(id(engine), None)
            if close is not None:
                close.close()

    def synthesize(self, items: Sequence[SynthItem]) -> list[Any]:
        with self.lease() as engine:
            return engine.synthesize(items)

    def __getattr__(self, name: str) -> Any:
        """Everything else of ``Engine`` (``info``, ``prepare_many``, ``infer_batch``...) from the
        serving engine, so a worker can take the manager where it took an engine.

        A worker that calls the phases separately must swap only between batches: call
        ``maybe_reload()`` on its loop thread (as the SIGHUP flag does), not ``reload()``
        from another thread, or one batch could be prepared by one model and inferred by
        the next.
        """
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.engine, name)

    # -- loading ------------------------------------------------------------------------
    def _load(self, mv: ModelVersion) -> tuple[Engine | None, ReloadResult]:
        """Verify, load, warm up and health-check ``mv``; never raises for a bad model."""
        serving = self._version.ref if self._version else "-"
        t0 = time.perf_counter()
        try:
            self.store.verify(mv)
            engine = self._loader(mv)
        except Exception as e:  # any failure to load a candidate is a refusal, not a crash
            reason = f"load failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            return None, ReloadResult(False, serving, mv.ref, reason, load_s=round(time.perf_counter() - t0, 3))
        load_s = time.perf_counter() - t0
        health = health_check(engine, self._health_sentences)
        chars = sum(len(x) for x in self._health_sentences)
        if health.ok and chars and isinstance(getattr(engine, "seconds_per_char", None), dict):
            engine.seconds_per_char[engine.default_voice] = health.seconds / chars  # warm, several sentences
        cold = engine.cold_start_s if engine.cold_start_s is not None else load_s
        if not health.ok:
            engine.close()
            return None, ReloadResult(False, serving, mv.ref, f"health check failed: {health.reason}",
                                      load_s=round(load_s, 3), cold_start_s=round(cold, 3), health=health)
        return engine, ReloadResult(True, mv.ref, mv.ref, "ok", load_s=round(load_s, 3),
                                    cold_start_s=round(cold, 3), health=health)

    def start(self) -> ReloadResult:
        """Load the current version (installing the shipped model if the store is empty).

        Raises ``ModelLoadError`` if it fails: at start-up there is no old engine to keep.
        """
        mv = self.store.current(self.model)
        engine, result = self._load(mv)
        if engine is None:
            raise ModelLoadError(f"{mv.ref}: {result.reason}")
        with self._lock:
            self._engine, self._version = engine, mv
        self.last_result = result
        _log.info("event=model_loaded model=%s version=%s precision=%s provider=%s cold_start_s=%.3f",
                  self.model, mv.version, mv.precision, engine.info.provider, result.cold_start_s)
        return result

    def reload(self, *, force: bool = False) -> ReloadResult:
        """Load what ``current`` points to beside the serving engine; swap if healthy.

        Without ``force`` a reload to the version already serving does nothing.
        """
        if not self._reloading.acquire(blocking=False):
            return ReloadResult(False, self.version.ref, "-", "a reload is already running")
        try:
            try:
                mv = self.store.current(self.model, install=False)
            except EngineError as e:
                result = ReloadResult(False, self.version.ref, "-", f"no current version: {e}")
                self._log_result(result)
                return result
            if not force and self._version is not None and mv.dir == self._version.dir \
                    and mv.manifest.sha256 == self._version.manifest.sha256:
                return ReloadResult(False, mv.ref, mv.ref, "unchanged")
            engine, result = self._load(mv)
            if engine is not None:
                with self._lock:
                    old = self._engine
                    self._engine, self._version = engine, mv
                    if old is not None and id(old) in self._leases:
                        self._retired[id(old)] = old   # closed by the last lease
                        old = None
                if old is not None:
                    old.close()
            self.last_result = result
            self._log_result(result)
            return result
        finally:
            self._reloading.release()

    def _log_result(self, r: ReloadResult) -> None:
        if r.swapped:
            _log.info("event=model_reloaded model=%s version=%s cold_start_s=%.3f health_s=%.3f",
                      self.model, r.serving, r.cold_start_s, r.health.seconds if r.health else 0.0)
        else:
            _log.warning("event=model_reload_refused model=%s serving=%s candidate=%s reason=%r",
                         self.model, r.serving, r.candidate, r.reason)

    # -- signals ------------------------------------------------------------------------
    def request_reload(self) -> None:
        """Ask for a reload at the next ``maybe_reload`` (safe from a signal handler)."""
        self._pending = True

    @property
    def reload_pending(self) -> bool:
        return self._pending

    def maybe_reload(self) -> ReloadResult | None:
        """Reload if one was requested; the worker calls this between batches."""
        if not self._pending:
            return None
        self._pending = False
        return self.reload()

    def close(self) -> None:
        with self._lock:
            engine, self._engine = self._engine, None
            retired = list(self._retired.values()) if not self._leases else []
        if engine is not None:
            engine.close()
        for e in retired:
            e.close()


def install_sighup(manager: ModelManager) -> Any:
    """Make SIGHUP request a reload (the reload itself runs at the next ``maybe_reload``).

    Must be called from the main thread. Returns the previous handler.
    """
    return signal.signal(signal.SIGHUP, lambda _signum, _frame: manager.request_reload())
