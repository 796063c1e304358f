"""Where spoken text was written: the offset map of SSML and lexicon rewrites. Pure.

What a voice reads is not always what the user wrote: ``<sub alias="World Wide Web">WWW</sub>``
is read as its alias, ``<say-as>`` as its expansion, a lexicon's alias in place of its grapheme,
and markup between words is not read at all. :class:`Spoken` is the text as read (before the
stage's per-run normalization), built in order from two kinds of stretches:

- **verbatim** text: each character read is one character of the source, at its own offset
  (markup, entities and comments in between make the offsets jump);
- **replaced** text (a *group*): the whole stretch was read for one written stretch of the
  source (``WWW``); its words are one caption, written as the source wrote it.

:func:`segment_sources` then follows each segment's (normalized) text back through it, the same
forward walk as plain text's normalization map (:func:`engine.timing.source_offsets`), and gives
each segment its offsets into the source and its groups in segment coordinates.

Guarantees (``tests/unit/test_spoken.py``, hypothesis included): offsets never decrease and stay
inside the source; a group's source stretch is where its element's content (or its lexicon
grapheme) stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.timing import source_offsets

__all__ = ["Group", "SegmentMap", "Spoken", "rewritten", "segment_sources"]


@dataclass(frozen=True, slots=True)
class Group:
    """Spoken characters ``[i, j)`` read for source characters ``[start, end)``, written ``text``."""

    i: int
    j: int
    start: int
    end: int
    text: str


@dataclass(slots=True)
class Spoken:
    """The text as read, each character's source offset, and its replaced stretches."""

    text: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    size: int = 0  # len("".join(text))

    def verbatim(self, text: str, offsets: Sequence[int]) -> None:
        """``text`` read as written, character ``k`` at source offset ``offsets[k]``."""
        assert len(text) == len(offsets)
        self.text.append(text)
        self.offsets.extend(offsets)
        self.size += len(text)

    def replaced(self, said: str, start: int, end: int, written: str) -> None:
        """``said`` read for source characters ``[start, end)``, written ``written``."""
        if not said:
            return
        self.groups.append(Group(self.size, self.size + len(said), start, max(start, end), written))
        self.text.append(said)
        self.offsets.extend([start] * len(said))
        self.size += len(said)


@dataclass(frozen=True, slots=True)
class SegmentMap:
    """One segment's offsets into the source: ``start`` and breakpoints ``map`` (as
    :class:`schemas.SegmentSource`) and its groups as ``(i, j, start, end, text)`` in the segment."""

    start: int
    map: list[tuple[int, int]]
    groups: list[tuple[int, int, int, int, str]]


def segment_sources(spoken: Spoken, segments: Sequence[str], source_len: int) -> list[SegmentMap]:
    """Each of ``segments`` (the stage's segments of ``spoken``'s text, normalized, in order)
    mapped back to the source. A character inside a group maps linearly from the group's start
    (few breakpoints); its words are placed by the group, not by the map."""
    said = "".join(spoken.text)
    joined = "".join(segments)
    walk = source_offsets(said, joined)  # segment character -> spoken character
    src = np.asarray([*spoken.offsets, source_len], np.int64)
    group_of = np.full(len(said) + 1, -1, np.int64)
    for k, gr in enumerate(spoken.groups):
        group_of[gr.i:gr.j] = k
    out: list[SegmentMap] = []
    at = 0
    for seg in segments:
        idx = walk[at:at + len(seg)]
        at += len(seg)
        if not len(seg):
            out.append(SegmentMap(int(src[walk[at]]) if at < len(walk) else source_len, [], []))
            continue
        pos = np.maximum.accumulate(np.minimum(src[idx], source_len))  # (a walk that found nothing stays put)
        grp = group_of[idx]
        groups: list[tuple[int, int, int, int, str]] = []
        k = 0
        while k < len(seg):
            g = int(grp[k])
            if g < 0:
                k += 1
                continue
            e = k
            while e < len(seg) and grp[e] == g:
                e += 1
            gr = spoken.groups[g]  # (the group this run of characters was read for)
            groups.append((k, e, gr.start, gr.end, gr.text))
            pos[k:e] = gr.start + np.arange(e - k)  # linear inside a group (its words are placed by the group):
            k = e                                   # two breakpoints, not one per character
        rel = pos - pos[0]
        jumps = np.nonzero(np.diff(rel) != 1)[0] + 1
        out.append(SegmentMap(int(pos[0]), [(int(i), int(rel[i])) for i in jumps], groups))
    return out


def rewritten(original: str, normalized: str, hits: Sequence[tuple[int, int, str]]) -> Spoken:
    """Plain text a lexicon rewrote: ``normalized`` (the stage's normalization of ``original``)
    with each hit ``(a, b, said)`` (``normalized[a:b]`` read as ``said``) a group."""
    src = source_offsets(original, normalized).tolist()
    out = Spoken()
    pos = 0
    for a, b, said in sorted(hits):
        if a > pos:
            out.verbatim(normalized[pos:a], src[pos:a])
        out.replaced(said, src[a], src[b - 1] + 1 if b > a else src[a], normalized[a:b])
        pos = max(pos, b)
    if pos < len(normalized):
        out.verbatim(normalized[pos:], src[pos:len(normalized)])
    return out
