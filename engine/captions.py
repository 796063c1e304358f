# ruff: noqa: RUF001 - Chinese punctuation ends sentences too
"""WebVTT and SRT caption files from word timings: pure, deterministic, cut at word boundaries.

``cues(text, words)`` groups timed words into caption cues the way broadcast captions
read: at most ``max_lines`` lines of at most ``max_chars`` characters (42 and 2, the
usual limits), a new cue after a sentence's end or a pause longer than ``max_gap_s``,
never a word cut in two (a single word longer than a line gets a line of its own). A
cue's text is the source text between its first and last word (punctuation kept,
whitespace runs folded), so it reads as the user wrote it. ``to_vtt`` and ``to_srt``
render the cues.

Words are anything with ``text``, ``start``, ``end`` (character offsets into ``text``),
``start_s`` and ``end_s``: the engine's :class:`engine.timing.Word` and the wire form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Cue", "cues", "to_srt", "to_vtt"]

MAX_CHARS = 42
MAX_LINES = 2
MAX_GAP_S = 1.0
_SENTENCE_END = re.compile(r"[.!?…。！？]")
_SPACE = re.compile(r"\s+")
_TRAIL = re.compile(r"[^\s\w]*")
# a dot after these does not end a sentence ("Dr. Smith"); single capitals are initials
_ABBREVIATIONS = frozenset("mr mrs ms dr prof sr jr st mt vs etc no vol fig inc ltd co jan feb mar apr jun jul aug "
                           "sep sept oct nov dec gen col lt sgt capt gov sen rep rev".split())


class _Timed(Protocol):
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def start_s(self) -> float: ...
    @property
    def end_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Cue:
    """One caption: its lines, shown from ``start_s`` to ``end_s``."""

    start_s: float
    end_s: float
    lines: tuple[str, ...]


def _fill(lines: list[str], p: str, max_chars: int) -> None:
    """One greedy line-fill step: ``p`` (a word with what follows it up to the next word) onto ``lines``."""
    if lines and len((lines[-1] + p).strip()) <= max_chars:
        lines[-1] += p
    else:
        lines.append(p.lstrip())


def _wrap(pieces: Sequence[str], max_chars: int) -> list[str]:
    """Greedy line fill of ``pieces``."""
    lines: list[str] = []
    for p in pieces:
        _fill(lines, p, max_chars)
    return [line.strip() for line in lines]


def _between(text: str, w: _Timed, nxt: _Timed) -> str:
    """A word as shown before the next one: up to the next word's start, whitespace folded."""
    return _SPACE.sub(" ", text[w.start:nxt.start])


def _last(text: str, w: _Timed) -> str:
    """A cue's last word as shown: with only the punctuation right after it."""
    m = _TRAIL.match(text, w.end)
    return text[w.start:w.end] + (m.group(0) if m else "")


def _pieces(text: str, words: Sequence[_Timed]) -> list[str]:
    """Each word as shown: from its start up to the next word's start (whitespace folded); the
    cue's last word keeps only the punctuation right after it."""
    return [_between(text, w, words[i + 1]) if i + 1 < len(words) else _last(text, w) for i, w in enumerate(words)]


def cues(text: str, words: Sequence[_Timed], *, max_chars: int = MAX_CHARS, max_lines: int = MAX_LINES,
         max_gap_s: float = MAX_GAP_S) -> list[Cue]:
    """Caption cues for ``words`` (in order) of ``text``; see the module docstring for the rules."""
    out: list[Cue] = []
    cur: list[_Timed] = []
    filled: list[str] = []  # the greedy lines of the cue's words but its last (a prefix: it never changes)

    def flush() -> None:
        if cur:
            lines = _wrap(_pieces(text, cur), max_chars)
            end = max(cur[-1].end_s, cur[0].start_s + 0.001)
            out.append(Cue(round(cur[0].start_s, 3), round(end, 3), tuple(lines)))
            cur.clear()
            filled.clear()

    for w in words:
        if cur:
            between = text[cur[-1].end:w.start]
            prev = text[cur[-1].start:cur[-1].end]
            abbreviation = between.startswith(".") and (prev.lower() in _ABBREVIATIONS or
                                                        (len(prev) == 1 and prev.isupper()))
            ends = bool(_SENTENCE_END.search(between)) and not abbreviation
            breaks = ends or w.start_s - cur[-1].end_s > max_gap_s
            shown = _between(text, cur[-1], w)
            trial = list(filled)
            _fill(trial, shown, max_chars)
            _fill(trial, _last(text, w), max_chars)
            if breaks or len(trial) > max_lines:
                flush()
            else:
                _fill(filled, shown, max_chars)
        cur.append(w)
    flush()
    return out


def _stamp(seconds: float, sep: str) -> str:
    ms = round(seconds * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_vtt(cs: Sequence[Cue]) -> str:
    """A WebVTT file (UTF-8 text) of ``cs``."""
    body = "".join(f"{_stamp(c.start_s, '.')} --> {_stamp(c.end_s, '.')}\n" + "\n".join(c.lines) + "\n\n" for c in cs)
    return "WEBVTT\n\n" + body


def to_srt(cs: Sequence[Cue]) -> str:
    """An SRT file (UTF-8 text) of ``cs``, cues numbered from 1."""
    return "".join(f"{i}\n{_stamp(c.start_s, ',')} --> {_stamp(c.end_s, ',')}\n" + "\n".join(c.lines) + "\n\n"
                   for i, c in enumerate(cs, 1))
