"""Several backends behind the one engine interface: a request's voice picks the backend.

A worker configured with ``TTS_BACKENDS=hibari,kokoro`` serves every voice of every backend
with one :class:`BackendRouter`, which the worker uses exactly as it uses an ``Engine`` or a
``ModelManager`` (``prepare_many``, ``plan``, ``infer_batch``, ``postprocess_many``, ``info``).

Guarantees:

- Each voice belongs to exactly one backend (the first listed that offers it); an unknown
  voice fails only its item (``UnknownVoice``), an empty one gets the default backend's
  default voice.
- ``plan`` never puts items of two backends into one model call; inside one backend the
  backend's own engine plans (buckets, ``max_batch``). ``infer_batch`` refuses a mixed
  batch with ``BackendError`` rather than guessing.
- Audio comes out at one sample rate, the default backend's: a backend with another rate
  is resampled in ``postprocess_many`` (the worker joins parts at one rate).
- ``info`` names the set (``hibari+kokoro``: the worker's part identity); ``info_for(voice)``
  names the backend that speaks a voice (what a completion reports).
- ``on_batch(backend, items, audio_s)``, if set, is called after each post-processed model
  call: how a worker counts work per backend without the engine importing Prometheus.
- Hot reload: ``request_reload`` asks every backend served from the model store
  (``ModelManager``); ``maybe_reload`` reloads those asked, between batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine import mix
from engine.audio import resample
from engine.base import Audio, Failure, ModelInfo, Prepared, SynthItem
from engine.engine import synthesize_planned
from engine.errors import BackendError, ModelLoadError, UnknownVoice

__all__ = ["BackendRouter"]


class BackendRouter:
    """Engines by backend name, the first one the default; used from one thread at a time."""

    def __init__(self, engines: dict[str, Any], *, default: str | None = None) -> None:
        if not engines:
            raise ModelLoadError("a router needs at least one backend")
        self.engines = dict(engines)
        self.default = default or next(iter(self.engines))
        if self.default not in self.engines:
            raise ModelLoadError(f"default backend {self.default!r} is not served: {', '.join(self.engines)}")
        self.on_batch: Callable[[str, int, float], None] | None = None
        self.cold_start_s: float | None = None

    # -- what is served -------------------------------------------------------------
    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self.engines)

    def _voice_map(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, eng in self.engines.items():
            for v in eng.voices:
                out.setdefault(v, name)
        return out

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self._voice_map())

    @property
    def default_voice(self) -> str:
        return str(self.engines[self.default].default_voice)

    @property
    def sample_rate(self) -> int:
        return int(self.engines[self.default].sample_rate)

    @property
    def native_batching(self) -> bool:
        return any(bool(e.native_batching) for e in self.engines.values())

    @property
    def solo_capable(self) -> bool:
        return any(bool(getattr(e, "solo_capable", False)) for e in self.engines.values())

    @property
    def seconds_per_char(self) -> dict[str, float]:
        """Each engine's measured model seconds per character, by voice (see ``Engine.seconds_per_char``)."""
        out: dict[str, float] = {}
        for e in self.engines.values():
            out.update(getattr(e, "seconds_per_char", {}))
        return out

    @property
    def max_batch(self) -> int:
        return int(self.engines[self.default].max_batch)

    @property
    def info(self) -> ModelInfo:
        infos = [e.info for e in self.engines.values()]
        if len(infos) == 1:
            return infos[0]
        providers = {i.provider for i in infos}
        return ModelInfo(name="+".join(i.name for i in infos), version="+".join(i.version for i in infos),
                         precision="+".join(i.precision for i in infos),
                         provider=providers.pop() if len(providers) == 1 else "+".join(i.provider for i in infos))

    def backend_of(self, voice: str | None) -> str | None:
        """The backend that speaks ``voice`` (empty: the default); None if no backend has it."""
        if not voice:
            return self.default
        vmap = self._voice_map()
        if voice in vmap or not mix.is_mix(voice):
            return vmap.get(voice)
        try:  # a mix belongs to the backend of all its parts; that backend checks the mix itself
            backends = {vmap.get(name) for name, _ in mix.parse(voice)}
        except mix.MixError:
            return None
        return backends.pop() if len(backends) == 1 else None

    def info_for(self, voice: str | None) -> ModelInfo:
        """The model that speaks ``voice`` (the default backend's for an unknown one)."""
        return self.engines[self.backend_of(voice) or self.default].info  # type: ignore[no-any-return]

    def resolve_voice(self, voice: str | None) -> str:
        return voice or self.default_voice

    # -- split phases ---------------------------------------------------------------
    def prepare_many(self, items: Sequence[SynthItem]) -> list[Prepared | Failure]:
        out: list[Prepared | Failure | None] = [None] * len(items)
        by_backend: dict[str, list[int]] = {}
        for i, it in enumerate(items):
            b = self.backend_of(it.voice)
            if b is None:
                out[i] = Failure.of(self._unknown(it.voice))
                continue
            by_backend.setdefault(b, []).append(i)
        for b, idx in by_backend.items():
            res = self.engines[b].prepare_many([items[i] for i in idx])
            for i, r in zip(idx, res, strict=True):
                out[i] = r
        return [r if r is not None else Failure("engine_error", "no result") for r in out]

    def _unknown(self, voice: str | None) -> UnknownVoice:
        """Why no backend speaks ``voice``: for a mix, the part that is unknown or of another backend."""
        vmap = self._voice_map()
        if mix.is_mix(voice):
            try:
                parts = mix.parse(voice or "")
            except mix.MixError as e:
                return e
            first = vmap.get(parts[0][0])
            for name, _ in parts:
                if name not in vmap:
                    return UnknownVoice(f"voice mix {voice!r}: unknown voice {name!r}; served: {', '.join(self.voices)}")
                if vmap[name] != first:
                    return UnknownVoice(f"voice mix {voice!r}: {name!r} is a {vmap[name]} voice, {parts[0][0]!r} "
                                        f"a {first} one; a mix is of one backend")
        return UnknownVoice(f"unknown voice {voice!r}; served: {', '.join(self.voices)}")

    def _backend_of_prepared(self, p: Prepared) -> str:
        b = self.backend_of(p.item.voice)
        if b is None:  # prepare_many never lets one through
            raise BackendError(f"no backend speaks voice {p.item.voice!r}")
        return b

    def batch_key(self, prepared: Prepared) -> tuple[Any, ...]:
        b = self._backend_of_prepared(prepared)
        eng = self.engines[b]
        key = eng.batch_key(prepared) if eng.native_batching else (round(float(prepared.item.speed), 4),)
        return (b, *key)

    def plan(self, prepared: Sequence[Prepared]) -> list[list[int]]:
        """Groups of indices, each of one backend, planned by that backend's engine."""
        by_backend: dict[str, list[int]] = {}
        for i, p in enumerate(prepared):
            by_backend.setdefault(self._backend_of_prepared(p), []).append(i)
        out: list[list[int]] = []
        for b, idx in by_backend.items():
            for group in self.engines[b].plan([prepared[i] for i in idx]):
                out.append([idx[g] for g in group])
        return out

    def _one_backend(self, batch: Sequence[Prepared]) -> str:
        names = {self._backend_of_prepared(p) for p in batch}
        if len(names) != 1:
            raise BackendError(f"a model call mixes backends {sorted(names)}; plan() keeps them apart")
        return names.pop()

    def infer_batch(self, batch: Sequence[Prepared]) -> list[Any]:
        if not batch:
            return []
        return list(self.engines[self._one_backend(batch)].infer_batch(batch))

    def postprocess_many(self, raw: Sequence[Any], batch: Sequence[Prepared]) -> list[Audio | Failure]:
        if not batch:
            return []
        b = self._one_backend(batch)
        res = self.engines[b].postprocess_many(raw, batch)
        sr = self.sample_rate
        out: list[Audio | Failure] = []
        for r in res:
            if isinstance(r, Audio) and r.sample_rate != sr:
                r = Audio(np.asarray(resample(r.samples, r.sample_rate, sr), np.float32), sr, r.words,
                          r.marks)  # words and marks are in seconds
            out.append(r)
        if self.on_batch is not None:
            self.on_batch(b, len(batch), sum(r.duration_s for r in out if isinstance(r, Audio)))
        return out

    def synthesize(self, items: Sequence[SynthItem]) -> list[Audio | Failure]:
        return synthesize_planned(self, items)

    # -- hot reload (backends served from the model store) -----------------------------
    def _managers(self) -> list[Any]:
        return [e for e in self.engines.values() if hasattr(e, "maybe_reload")]

    def request_reload(self) -> None:
        for m in self._managers():
            m.request_reload()

    @property
    def reload_pending(self) -> bool:
        return any(m.reload_pending for m in self._managers())

    def maybe_reload(self) -> Any:
        """Reload every backend asked to; the last result (``swapped`` if any swapped), or None."""
        results = [r for r in (m.maybe_reload() for m in self._managers()) if r is not None]
        if not results:
            return None
        swapped = [r for r in results if r.swapped]
        return swapped[-1] if swapped else results[-1]

    def close(self) -> None:
        for e in self.engines.values():
            e.close()
