"""The one interface every voice backend implements, and the values that pass through it.

The facade the worker calls (batch planning, one failing item failing only itself) is
:class:`engine.engine.Engine`; a hot-reloadable one is :class:`engine.reload.ModelManager`.
A backend splits synthesis into three steps so the worker can overlap them:

1. ``prepare(item)``: CPU text front end (G2P, tokenization). Raises ``ItemError`` for
   an item it cannot speak; the other items of a batch are unaffected.
2. ``infer(batch)``: the model, on whatever provider was chosen. Backends that batch
   natively (``native_batching``) run one padded call; others loop inside.
3. ``postprocess(raw, prepared)``: DSP and trimming, to float32 mono in [-1, 1].

A backend whose model predicts durations (``timestamps`` True) also times every word of
an item that asks for it (``SynthItem.timestamps``): ``prepare`` plans which word each
phoneme belongs to (:func:`engine.timing.plan_words`) and ``word_times(raw, prepared,
samples)`` reads the model's durations out of ``raw``. Backends without durations say
so (``timestamps`` False) and their audio carries no words: never invented times.

Nothing under ``engine/`` imports Kafka, S3, Redis or Prometheus (a unit test enforces it).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import EngineError
from engine.timing import Word, WordPlan
from schemas.events import (
    ModelInfo,  # the one model-info type: what a backend reports is what a completion names
    Span,
)

__all__ = ["Audio", "Backend", "Failure", "ModelInfo", "Prepared", "SynthItem", "Word"]


@dataclass(frozen=True, slots=True)
class SynthItem:
    """One piece of text to speak; ``timestamps``: also time each word (if the backend can);
    ``spans``: its resolved SSML pronunciation (:mod:`engine.pron`; ``text`` is their text), which a
    backend with ``spans`` True honours and another reads as ``text``; ``lang``: the one language
    (``zh``, ``ja``, ``en``) the stage read the whole text in (a request with a per-language voice
    map), which a backend that tells languages apart itself (kokoro) follows instead of guessing."""

    text: str
    voice: str
    speed: float = 1.0
    timestamps: bool = False
    spans: tuple[Span, ...] | None = None
    lang: str | None = None


@dataclass(frozen=True, slots=True)
class Prepared:
    """A backend's front-end output for one item (``length`` drives bucketing; ``words``: the
    word plan, when the item asked for timestamps and the backend has durations)."""

    item: SynthItem
    payload: Any
    length: int
    words: WordPlan | None = None
    shape: Any = None  # engine.pron.Shape of a span item: per chunk rate and pause


@dataclass(frozen=True, slots=True)
class Audio:
    """Float32 mono samples in [-1, 1] and their sample rate; ``words``: each word's span in
    them (None when not asked for, or the backend has no durations)."""

    samples: np.ndarray
    sample_rate: int
    words: tuple[Word, ...] | None = None
    marks: tuple[tuple[str, float], ...] | None = None  # SSML marks: (name, seconds)

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one item produced no audio; ``code`` goes into the failed completion."""

    code: str
    message: str

    @classmethod
    def of(cls, err: EngineError) -> Failure:
        return cls(err.code, str(err) or type(err).__name__)


class Backend(abc.ABC):
    """A loaded voice model. Instances are used from one thread at a time."""

    info: ModelInfo
    sample_rate: int
    voices: tuple[str, ...]
    default_voice: str
    native_batching: bool = False
    timestamps: bool = False
    spans: bool = False  # honours SynthItem.spans (breaks, phonemes, rate, language, marks)

    @abc.abstractmethod
    def prepare(self, item: SynthItem) -> Prepared: ...

    @abc.abstractmethod
    def infer(self, batch: Sequence[Prepared]) -> list[Any]: ...

    @abc.abstractmethod
    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray: ...

    def word_times(self, raw: Any, prepared: Prepared, samples: int,
                   starts: Sequence[int] = ()) -> tuple[Word, ...]:
        """Each word of ``prepared.words`` timed by the model's durations in ``raw``; ``samples``
        is the length of the audio ``postprocess`` made from ``raw``; ``starts``: where each model
        chunk's audio begins in it, for a span item (its breaks' pauses; :meth:`postprocess_spans`)."""
        raise NotImplementedError(f"{type(self).__name__} predicts no durations")

    def phonemes(self, prepared: Prepared) -> list[str]:
        """What the model will read for ``prepared``: its phoneme chunks (ids mapped back through the
        backend's vocabulary, ``_vocab``); empty for a backend without one."""
        vocab = getattr(self, "_vocab", None)
        if not isinstance(vocab, dict) or not isinstance(prepared.payload, list):
            return []
        inverse = {int(i): c for c, i in vocab.items()}
        return ["".join(inverse.get(int(i), "") for i in ids[1:-1]) for ids in prepared.payload]

    def postprocess_marked(self, raw: Any, prepared: Prepared) -> tuple[np.ndarray, tuple[tuple[str, float], ...]]:
        """``postprocess`` of a span item, with its marks' times (seconds); for backends with ``spans``."""
        wav, marks, _ = self.postprocess_spans(raw, prepared)
        return wav, marks

    def postprocess_spans(self, raw: Any, prepared: Prepared
                          ) -> tuple[np.ndarray, tuple[tuple[str, float], ...], tuple[int, ...]]:
        """:meth:`postprocess_marked`, and where each model chunk's audio starts in the result."""
        return self.postprocess(raw, prepared), (), ()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release sessions and threads."""
