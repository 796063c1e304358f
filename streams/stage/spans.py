"""An SSML request's spans cut into segments: pure, no Kafka (the ``text_type: ssml`` half of step 2).

Input: :func:`engine.ssml.parse`'s spans (text runs, phonemes, breaks, marks, boundaries).
Output: one span list per segment, each of at most ``max_chars`` characters of text.

Guarantees (``tests/unit/test_ssml.py``, hypothesis included):

* Every span's text is normalized like plain text (:func:`streams.stage.text.normalize`),
  keeping one space where a run began or ended with whitespace; the concatenation of every
  segment's text with whitespace removed equals that of the document's runs: nothing lost,
  nothing reordered. Breaks and marks keep their order among the text.
* Cuts fall at ``<s>``/``<p>`` edges and at sentence ends (the plain splitter's rules), never
  inside a ``phoneme`` span, and never at a ``break``: the sentences on both sides of a break
  stay in one segment, so the engine, which sees both sides' audio, makes the pause exactly its
  length. Only a piece longer than ``max_chars`` is cut further (clauses, spaces, characters),
  where a break may then fall at a segment's edge.
* A segment whose spans are plain text of the request's rate and language carries no spans (its
  hash and audio are those of the same plain text); a piece with no text (breaks, marks only)
  joins its neighbour.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from engine.ssml import BOUNDARY
from schemas.events import Span
from streams.stage.text import normalize, sentence_cuts, split_segments

__all__ = ["Piece", "cut_spans"]


@dataclass(frozen=True, slots=True)
class Piece:
    """One segment's text and, where they change anything, its spans."""

    text: str
    spans: tuple[Span, ...] | None


def _norm(text: str) -> str:
    n = normalize(text.strip())  # (stripped first: most runs then take normalize's fast path)
    if not n:
        return " " if text[:1].isspace() or text[-1:].isspace() else ""
    return (" " if text[:1].isspace() else "") + n + (" " if text[-1:].isspace() else "")


def _atoms(spans: list[Span]) -> tuple[str, list[tuple[int, int, Span]], list[int]]:
    """The document's text, each span with its [start, end) in it, and the boundary offsets."""
    text = ""
    placed: list[tuple[int, int, Span]] = []
    hard: list[int] = []
    for s in spans:
        if s is BOUNDARY:
            hard.append(len(text))
            continue
        if s.break_ms is not None or s.mark is not None:
            placed.append((len(text), len(text), s))
            continue
        t = _norm(s.text) if s.ph is None else (normalize(s.text) or normalize(s.ph))  # <phoneme/> empty: its ph
        if not t:
            continue
        placed.append((len(text), len(text) + len(t), s if t == s.text and s.mark is None and s.break_ms is None
                       else Span(text=t, ph=s.ph, alphabet=s.alphabet, rate=s.rate, lang=s.lang)))
        text += t
    return text, placed, hard


def _glued(text: str, cut: int, breaks: list[int]) -> bool:
    """A cut with only whitespace between it and a break: keep both sides together."""
    return any(not text[min(o, cut):max(o, cut)].strip() for o in breaks)


def _inside_phoneme(cut: int, placed: list[tuple[int, int, Span]]) -> tuple[int, int] | None:
    for a, b, s in placed:
        if s.ph is not None and a < cut < b:
            return a, b
    return None


def cut_spans(spans: list[Span], max_chars: int) -> list[Piece]:
    """The segments of a parsed SSML document (see the module's guarantees)."""
    text, placed, hard = _atoms(spans)
    breaks = [a for a, _, s in placed if s.break_ms is not None]
    cuts = sorted({c for c in [*hard, *sentence_cuts(text)] if 0 < c < len(text)})
    cuts = [c for c in cuts if not _glued(text, c, breaks) and _inside_phoneme(c, placed) is None]
    bounds = [0, *cuts, len(text)]
    ranges: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(bounds):
        if len(text[a:b].strip()) <= max_chars:
            ranges.append((a, b))
            continue
        pos = a
        for seg in split_segments(text[a:b], max_chars):
            start = text.index(seg, pos, b)
            ranges.append((pos, start + len(seg)))
            pos = start + len(seg)
        ranges[-1] = (ranges[-1][0], b)
    ranges = _out_of_phonemes(ranges, placed)
    starts = [s0 for s0, _, _ in placed]
    pieces = [_piece(text, placed, starts, a, b, i == 0, i == len(ranges) - 1) for i, (a, b) in enumerate(ranges)]
    return _fold_empty(pieces)


def _out_of_phonemes(ranges: list[tuple[int, int]], placed: list[tuple[int, int, Span]]) -> list[tuple[int, int]]:
    """Move a cut that fell inside a phoneme span (only a sub-cut can) to the span's start."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if out:
            inside = _inside_phoneme(a, placed)
            if inside is not None:
                a = inside[0] if inside[0] > out[-1][0] else inside[1]
                out[-1] = (out[-1][0], a)
        out.append((a, b))
    return [(a, b) for a, b in out if a < b or a == b == 0]


def _piece(text: str, placed: list[tuple[int, int, Span]], starts: list[int], a: int, b: int, first: bool,
           last: bool) -> list[Span]:
    out: list[Span] = []
    # placed is in order of start: only the spans from the last one starting before a can reach into [a, b]
    k = max(0, bisect.bisect_left(starts, a) - 1)
    while k > 0 and placed[k - 1][1] > a:  # (a span that starts earlier and still covers a)
        k -= 1
    for s0, s1, s in itertools.islice(placed, k, None):
        if s0 > b:
            break
        if s.text == "" and s.ph is None:  # a break or a mark: at a cut, it goes with the text before it
            if (a < s0 <= b) or (first and s0 == a) or (last and s0 == b):
                out.append(s)
            continue
        lo, hi = max(a, s0), min(b, s1)
        if lo < hi:
            piece = s.text if s.ph is not None else text[lo:hi]
            out.append(Span(text=piece, ph=s.ph, alphabet=s.alphabet, rate=s.rate, lang=s.lang))
    return out


def _strip(spans: list[Span]) -> list[Span]:
    """Whitespace at the segment's ends removed, and folded to one space where two runs meet."""
    prev_space = True
    for i, s in enumerate(spans):
        if s.text and s.ph is None and prev_space and s.text[:1].isspace():
            spans[i] = s = _with_text(s, s.text.lstrip())
        if s.text:
            prev_space = s.text[-1:].isspace()
    texts = [i for i, s in enumerate(spans) if s.text]
    if texts:
        i, j = texts[0], texts[-1]
        spans[i] = _with_text(spans[i], spans[i].text.lstrip())
        spans[j] = _with_text(spans[j], spans[j].text.rstrip())
    return [s for s in spans if s.text or s.ph is not None or s.break_ms is not None or s.mark is not None]


def _with_text(s: Span, text: str) -> Span:
    return Span(text=text, ph=s.ph, alphabet=s.alphabet, rate=s.rate, lang=s.lang)


def _fold_empty(pieces: list[list[Span]]) -> list[Piece]:
    """Pieces without text join a neighbour; each becomes a :class:`Piece`."""
    merged: list[list[Span]] = []
    carry: list[Span] = []
    for p in pieces:
        p = carry + p
        carry = []
        if not "".join(s.text for s in p).strip():
            if merged:
                merged[-1].extend(p)
            else:
                carry = p
            continue
        merged.append(p)
    if carry and merged:
        merged[-1].extend(carry)
    out: list[Piece] = []
    for p in merged:
        spans = _strip(p)
        text = "".join(s.text for s in spans)
        plain = all(s.ph is None and s.break_ms is None and s.mark is None and s.rate is None and s.lang is None
                    for s in spans)
        out.append(Piece(text, None if plain else tuple(spans)))
    return out
