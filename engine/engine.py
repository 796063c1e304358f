"""The engine facade: one loaded backend behind a batch interface.

``Engine.synthesize(items)`` returns one result per item, in order: ``Audio`` or a
``Failure``. An ``ItemError`` (bad text, unknown voice) fails only its item; a
``BackendError`` (the model failed) fails every item of the sub-batch it was in, each with
its own ``Failure``, and the other sub-batches still run. Nothing here raises for a bad
item.

For a worker that overlaps the phases, the same work is available in pieces:
``prepare_many`` (CPU front end), ``plan`` (which prepared items may share one model call:
same length bucket and speed when the backend batches natively, at most ``max_batch``),
``infer_batch`` (the model; raises ``BackendError``) and ``postprocess_many`` (DSP,
trimming). ``synthesize`` is exactly these four in sequence.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.base import Audio, Backend, Failure, ModelInfo, Prepared, SynthItem
from engine.errors import BackendError, EngineError, ItemError
from engine.timing import trim_silent_ends

__all__ = ["WARMUP_TEXT", "Engine", "pow2_bucket", "synthesize_planned"]

_log = logging.getLogger("ttsflow.engine")

WARMUP_TEXT = "Warming up the voice."


def pow2_bucket(length: int, floor: int = 16) -> int:
    """The smallest power of two >= ``length`` (at least ``floor``): a padding class."""
    b = floor
    while b < length:
        b *= 2
    return b


class Engine:
    """One backend, used from one thread at a time (like the backend itself)."""

    def __init__(self, backend: Backend, *, max_batch: int = 8) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.backend = backend
        self.max_batch = max_batch
        self.cold_start_s: float | None = None
        # voice -> seconds of one model call per character, measured as the engine loaded (warm-up, then
        # the store's health check): a worker's first estimate of a segment's cost, before its own calls
        self.seconds_per_char: dict[str, float] = {}

    # -- what is loaded -------------------------------------------------------------
    @property
    def info(self) -> ModelInfo:
        return self.backend.info

    @property
    def sample_rate(self) -> int:
        return self.backend.sample_rate

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self.backend.voices)

    @property
    def default_voice(self) -> str:
        return self.backend.default_voice

    @property
    def native_batching(self) -> bool:
        return bool(self.backend.native_batching)

    @property
    def solo_capable(self) -> bool:
        """Whether a call that starts alone runs on more cores than a lane's (:mod:`engine.solo`)."""
        gate = getattr(self.backend, "solo", None)
        return bool(getattr(gate, "enabled", False))

    @property
    def timestamps(self) -> bool:
        """Whether the voice times its words (duration-based models do; autoregressive ones cannot)."""
        return bool(self.backend.timestamps)

    def resolve_voice(self, voice: str | None) -> str:
        """The voice to use for a request that names ``voice`` (empty: the default)."""
        return voice or self.default_voice

    # -- split phases ---------------------------------------------------------------
    def prepare_many(self, items: Sequence[SynthItem]) -> list[Prepared | Failure]:
        """Front end for each item; an ``ItemError`` becomes that item's ``Failure``."""
        out: list[Prepared | Failure] = []
        for item in items:
            if not item.voice:
                item = dataclasses.replace(item, voice=self.default_voice)
            try:
                out.append(self.backend.prepare(item))
            except ItemError as e:
                out.append(Failure.of(e))
        return out

    def bucket_of(self, prepared: Prepared) -> int:
        """The padding class of a prepared item; only items of one class share a model call."""
        fn = getattr(self.backend, "bucket_of", None)
        return int(fn(prepared)) if fn is not None else pow2_bucket(prepared.length)

    def batch_key(self, prepared: Prepared) -> tuple[int, float]:
        """Items may share one model call only if their keys are equal (bucket, speed)."""
        return (self.bucket_of(prepared), round(float(prepared.item.speed), 4))

    def plan(self, prepared: Sequence[Prepared]) -> list[list[int]]:
        """Indices of ``prepared`` grouped into model calls, each at most ``max_batch``.

        Natively batching backends get groups of one (bucket, speed); the others get
        plain chunks in order (they loop inside ``infer`` anyway).
        """
        groups: dict[Any, list[int]] = {}
        for i, p in enumerate(prepared):
            key = self.batch_key(p) if self.native_batching else 0
            groups.setdefault(key, []).append(i)
        out: list[list[int]] = []
        for idx in groups.values():
            out += [idx[k:k + self.max_batch] for k in range(0, len(idx), self.max_batch)]
        return out

    def infer_batch(self, batch: Sequence[Prepared]) -> list[Any]:
        """Run the model on one planned batch. Raises ``BackendError`` if it fails."""
        if not batch:
            return []
        try:
            raw = self.backend.infer(batch)
        except BackendError:
            raise
        except ItemError as e:  # a backend that cannot tell which item: the batch fails
            raise BackendError(str(e)) from e
        if len(raw) != len(batch):
            raise BackendError(f"backend returned {len(raw)} results for {len(batch)} items")
        return raw

    def postprocess_many(self, raw: Sequence[Any], batch: Sequence[Prepared]) -> list[Audio | Failure]:
        """DSP and trimming per item; an ``EngineError`` fails that item only."""
        out: list[Audio | Failure] = []
        for r, p in zip(raw, batch, strict=True):
            try:
                marks = None
                starts: tuple[int, ...] = ()
                if p.shape is not None:  # a span item: its marks, and its chunks' places (its breaks' pauses)
                    wav, marks, starts = self.backend.postprocess_spans(r, p)
                    samples = np.asarray(wav, np.float32)
                else:
                    samples = np.asarray(self.backend.postprocess(r, p), np.float32)
                words = None
                if p.words is not None:
                    words = trim_silent_ends(self.backend.word_times(r, p, len(samples), starts), samples,
                                             self.sample_rate)
            except EngineError as e:
                out.append(Failure.of(e))
                continue
            out.append(Audio(samples, self.sample_rate, words, marks or None))
        return out

    # -- all at once ----------------------------------------------------------------
    def synthesize(self, items: Sequence[SynthItem]) -> list[Audio | Failure]:
        """One ``Audio`` or ``Failure`` per item, in the order given."""
        return synthesize_planned(self, items)

    def warm_up(self) -> float:
        """Synthesize one short sentence (first-run allocations, kernel choice); its seconds (and
        ``seconds_per_char`` of the default voice from it)."""
        t0 = time.perf_counter()
        res = self.synthesize([SynthItem(WARMUP_TEXT, self.default_voice)])
        if isinstance(res[0], Failure):
            from engine.errors import ModelLoadError

            raise ModelLoadError(f"warm-up failed: {res[0].code}: {res[0].message}")
        took = time.perf_counter() - t0
        self.seconds_per_char[self.default_voice] = took / len(WARMUP_TEXT)  # a first call: on the high side
        return took

    def close(self) -> None:
        self.backend.close()


def synthesize_planned(engine: Any, items: Sequence[SynthItem]) -> list[Audio | Failure]:
    """``items`` through ``engine``'s four steps (``prepare_many``, ``plan``, ``infer_batch``,
    ``postprocess_many``): one ``Audio`` or ``Failure`` per item, in the order given; a batch the
    backend fails fails each of its items. Shared by :class:`Engine` and the backend router."""
    results: list[Audio | Failure | None] = [None] * len(items)
    prepared = engine.prepare_many(items)
    ok: list[int] = []
    for i, p in enumerate(prepared):
        if isinstance(p, Failure):
            results[i] = p
        else:
            ok.append(i)
    ready: list[Prepared] = [prepared[i] for i in ok]
    for group in engine.plan(ready):
        batch = [ready[g] for g in group]
        try:
            raw = engine.infer_batch(batch)
        except BackendError as e:
            _log.warning("event=batch_failed size=%d error=%s", len(batch), e)
            for g in group:
                results[ok[g]] = Failure.of(e)
            continue
        for g, res in zip(group, engine.postprocess_many(raw, batch), strict=True):
            results[ok[g]] = res
    return [r if r is not None else Failure("engine_error", "no result") for r in results]
