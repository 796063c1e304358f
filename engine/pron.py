# ruff: noqa: RUF001, RUF002 - IPA symbols are the subject here
"""A span item's pronunciation as model runs and the pauses between them. Pure (numpy only).

An SSML segment reaches a backend as :class:`schemas.Span` runs (:attr:`engine.base.SynthItem.spans`).
A backend that honours them (hibari, kokoro) reads each span into phonemes with its own G2P
(a ``phoneme`` span's ``ph`` converted by :func:`ipa_to_misaki` or :func:`pinyin_to_kokoro`), then
:func:`runs` groups them: phonemes of one rate read in one go (a phoneme span inside a sentence
keeps the sentence's flow), a new run where the rate changes or a break stands. :func:`join`
puts the runs' audio together so that a break of N ms is N ms of silence in the audio: the
voice's own trailing and leading silence around it are measured (:func:`edge_silence`) and
only the rest is inserted (never negative: a voice that already pauses longer keeps its pause).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from schemas.events import Span

__all__ = ["SILENCE_PEAK", "Run", "Shape", "edge_silence", "ipa_to_misaki", "join", "pinyin_to_kokoro", "runs"]

SILENCE_PEAK = 0.01  # |sample| below this (-40 dBFS) is silence, for pauses and their tests alike
MIN_RATE, MAX_RATE = 0.25, 4.0

# IPA as people write it -> the phoneme set of misaki (hibari, kokoro): its diphthongs are one
# letter, its affricates ligatures, its r is ɹ; length marks are dropped (misaki has none)
_IPA = (("eɪ", "A"), ("aɪ", "I"), ("oʊ", "O"), ("əʊ", "O"), ("aʊ", "W"), ("ɔɪ", "Y"), ("dʒ", "ʤ"), ("d͡ʒ", "ʤ"),
        ("tʃ", "ʧ"), ("t͡ʃ", "ʧ"), ("ɝ", "ɜɹ"), ("ɚ", "əɹ"), ("r", "ɹ"), ("g", "ɡ"), ("ɫ", "l"), ("ː", ""),
        ("ˑ", ""), ("e", "ɛ"), ("ɒ", "ɑ"), ("ɐ", "ə"), ("x", "k"), ("'", "ˈ"), (",", "ˌ"), (".", ""))
_SYLLABLE = re.compile(r"[\s'-]+")


def ipa_to_misaki(ipa: str) -> str:
    """IPA (``təˈmɑːtoʊ``) in misaki's phoneme set (``təmˈɑTO``-like); unknown symbols pass through
    for the backend's vocabulary to keep or drop."""
    out = ipa.strip()
    for a, b in _IPA:
        out = out.replace(a, b)
    return out


def pinyin_to_kokoro(pinyin: str) -> str:
    """Tone-numbered pinyin (``chong2 qing4``) as Kokoro's Mandarin phonemes, one word."""
    from misaki.zh import ZHG2P

    out = "".join(ZHG2P.py2ipa(s.replace("ü", "v").replace("u:", "v")) for s in _SYLLABLE.split(pinyin.strip()) if s)
    return out.replace(chr(815), "")  # as misaki's own reading drops the non-syllabic mark


@dataclass(frozen=True, slots=True)
class Run:
    """Phonemes read in one go at ``rate``, after a pause of ``pause_ms`` (None: the voice's
    own join); ``marks``: (name, character offset in ``phonemes``)."""

    phonemes: str
    rate: float = 1.0
    pause_ms: int | None = None
    marks: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Shape:
    """How a span item's chunks are spoken and joined: per chunk its rate and the pause before it
    (None: the voice's own join); ``trail_ms``: a pause after the last; ``marks``: (name, chunk,
    phoneme offset in the chunk)."""

    rates: tuple[float, ...]
    pauses: tuple[int | None, ...]
    trail_ms: int | None = None
    marks: tuple[tuple[str, int, int], ...] = ()


def runs(spans: Sequence[Span], read: Callable[[Span], str]) -> tuple[list[Run], int | None]:
    """The runs of ``spans`` (``read`` gives a text or phoneme span's phonemes) and the pause
    after the last run (None if none)."""
    out: list[Run] = []
    parts: list[str] = []
    marks: list[tuple[str, int]] = []
    rate = 1.0
    pause: int | None = None

    def close() -> None:
        nonlocal parts, marks, pause
        ph = " ".join(parts)
        if ph.strip():
            out.append(Run(ph, rate, pause, tuple(marks)))
            pause, parts, marks = None, [], []

    for s in spans:
        if s.break_ms is not None:
            close()
            pause = (pause or 0) + s.break_ms
            continue
        if s.mark is not None:
            marks.append((s.mark, len(" ".join(parts)) + (1 if parts else 0)))
            continue
        r = min(MAX_RATE, max(MIN_RATE, s.rate or 1.0))
        if r != rate and parts:
            close()
        rate = r
        ph = read(s).strip()
        if ph:
            parts.append(ph)
    close()
    if marks and out:  # marks after the last phoneme: at the end of the last run
        last = out[-1]
        out[-1] = Run(last.phonemes, last.rate, last.pause_ms, last.marks + tuple((n, len(last.phonemes))
                                                                                  for n, _ in marks))
    return out, pause


def edge_silence(samples: np.ndarray, *, end: bool) -> int:
    """Samples of silence (|x| < :data:`SILENCE_PEAK`) at the start, or at the ``end``, of ``samples``."""
    loud = np.flatnonzero(np.abs(samples) >= SILENCE_PEAK)
    if loud.size == 0:
        return len(samples)
    return int(len(samples) - 1 - loud[-1]) if end else int(loud[0])


def join(waves: Sequence[np.ndarray], shape: Shape, sample_rate: int, gap_s: float) -> tuple[np.ndarray, list[int]]:
    """The chunks' audio joined: a pause of N ms where ``shape`` asks (edge silences counted in),
    ``gap_s`` of silence elsewhere; also each chunk's first sample in the result."""
    parts: list[np.ndarray] = []
    starts: list[int] = []
    at = 0
    for i, w in enumerate(waves):
        p = shape.pauses[i] if i < len(shape.pauses) else None
        if i == 0:
            pad = 0 if p is None else max(0, round(p * sample_rate / 1000) - edge_silence(w, end=False))
        elif p is None:
            pad = round(gap_s * sample_rate)
        else:
            have = edge_silence(waves[i - 1], end=True) + edge_silence(w, end=False)
            pad = max(0, round(p * sample_rate / 1000) - have)
        if pad:
            parts.append(np.zeros(pad, np.float32))
            at += pad
        starts.append(at)
        parts.append(np.asarray(w, np.float32))
        at += len(w)
    if shape.trail_ms is not None and waves:
        pad = max(0, round(shape.trail_ms * sample_rate / 1000) - edge_silence(waves[-1], end=True))
        parts.append(np.zeros(pad, np.float32))
    return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), starts


def chunked(spans: Sequence[Span], read: Callable[[Span], str],
            fit: Callable[[str], list[str]]) -> tuple[list[str], Shape]:
    """The model chunks of a span item (each run cut by the backend's ``fit``) and their :class:`Shape`."""
    rs, trail = runs(spans, read)
    chunks: list[str] = []
    rates: list[float] = []
    pauses: list[int | None] = []
    marks: list[tuple[str, int, int]] = []
    for r in rs:
        first = len(chunks)
        pieces = [c for c in fit(r.phonemes) if c.strip()]
        for k, c in enumerate(pieces):
            chunks.append(c)
            rates.append(r.rate)
            pauses.append(r.pause_ms if k == 0 else None)
        ends = np.cumsum([len(c) + 1 for c in pieces]).tolist() if pieces else []
        for name, off in r.marks:
            j = next((k for k, e in enumerate(ends) if off < e), len(pieces) - 1)
            start = ends[j - 1] if j > 0 else 0
            marks.append((name, first + max(j, 0), max(0, off - start)))
    return chunks, Shape(tuple(rates), tuple(pauses), trail, tuple(marks))


def mark_times(shape: Shape, chunks: Sequence[str], starts: Sequence[int], lengths: Sequence[int],
               sample_rate: int) -> tuple[tuple[str, float], ...]:
    """Each mark's time in seconds: its chunk's start plus its share of the chunk's phonemes
    (linear within a chunk: exact at run edges, where marks usually stand)."""
    out: list[tuple[str, float]] = []
    for name, k, off in shape.marks:
        if k >= len(starts):
            continue
        frac = min(1.0, off / max(1, len(chunks[k])))
        out.append((name, round((starts[k] + frac * lengths[k]) / sample_rate, 3)))
    return tuple(out)


def keep(shape: Shape, kept: Sequence[bool]) -> Shape:
    """``shape`` without the chunks not kept (nothing speakable): a dropped chunk's pause moves
    to the next kept one (added), its marks to the kept chunk before it."""
    rates: list[float] = []
    pauses: list[int | None] = []
    index: list[int] = []
    carry: int | None = None
    for i, k in enumerate(kept):
        p = shape.pauses[i]
        if not k:
            carry = p if carry is None else carry + (p or 0)
            index.append(max(0, len(rates) - 1))
            continue
        index.append(len(rates))
        rates.append(shape.rates[i])
        pauses.append(p if carry is None else carry + (p or 0))
        carry = None
    trail = shape.trail_ms if carry is None else carry + (shape.trail_ms or 0)
    marks = tuple((n, index[c], 0 if not kept[c] else off) for n, c, off in shape.marks if c < len(index))
    return Shape(tuple(rates), tuple(pauses), trail, marks)
