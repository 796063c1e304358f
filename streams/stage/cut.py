# ruff: noqa: RUF001, RUF003 - full-width and CJK punctuation is the subject here
"""Where to cut text that is still arriving, and a short first segment for fast first audio.

Pure functions, no Kafka. Text here is normalized (:func:`streams.stage.text.normalize`)
except that it may start or end with one space (the space between two pieces matters).

* :func:`cut_open` cuts the text held for a request sent in pieces into the segments that
  are complete now and the rest to hold: a sentence is complete when its end mark is
  followed by more text, or at once for an end mark that cannot continue (``!?`` and the
  CJK ones; a ``.`` may be ``3.14`` or ``example.com``, so it waits for the next
  character). ``force="idle"`` (the producer paused) also cuts at the last word boundary,
  keeping a possibly unfinished last word; ``force="all"`` (a flush, or the final piece)
  cuts everything. Held text longer than a segment is cut like a whole request's.
* The first segment of a streaming request is short (:func:`first_end`): it ends at the
  first clause or sentence boundary within a character budget per script
  (:data:`FIRST_BUDGET`); without one it ends at the last word boundary within the budget
  (a space, or a Mandarin word boundary from jieba), never inside a word. Text that fits
  the budget is not cut.
* Nothing is lost: the segments and the rest together hold every non-space character, in
  order; a segment without a letter or digit (``!`` after ``?`` came in another piece) is
  joined to its neighbour, since alone it would be silence.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Literal

from streams.stage.text import _is_cjk, clause_cuts, sentence_cuts, split_segments

__all__ = ["FIRST_BUDGET", "budget_for", "cut_open", "first_end", "preload_words", "shorten_first", "speakable"]

# Characters of the first segment of a streaming request, by script. Chosen so the first
# segment's audio is ~2-4 s: kokoro speaks Mandarin at ~4-5 characters a second and runs at
# a real-time factor of ~0.6 on this CPU (docs/using/streaming-input.md has the measurements).
FIRST_BUDGET: dict[str, int] = {"han": 10, "kana": 10, "hangul": 24, "other": 60}  # TTS_FIRST_SEGMENT_CHARS

_FINAL_ENDS = "!?。！？；…｡"
_FINAL_CLAUSE = "，、；：､"
_CLOSERS = "\"'”’」』）)】]》>»"

Force = Literal["idle", "all"] | None


def speakable(text: str) -> bool:
    """Has a letter or a digit: alone, anything else is silence."""
    return any(ch.isalnum() for ch in text)


def _script(text: str) -> str:
    for ch in text[:32]:
        o = ord(ch)
        if 0xAC00 <= o <= 0xD7AF:
            return "hangul"
        if 0x3040 <= o <= 0x30FF:
            return "kana"
        if _is_cjk(ch):
            return "han"
    return "other"


def budget_for(text: str, budgets: dict[str, int] | None = None) -> int | None:
    """The first segment's character budget for ``text`` by its first script (``budgets``: the stage's
    ``TTS_FIRST_SEGMENT_CHARS``, default :data:`FIRST_BUDGET`; a script it leaves out: None, no cut)."""
    b = FIRST_BUDGET if budgets is None else budgets
    return b.get(_script(text), b.get("other"))


def _jieba() -> Any:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()  # once per process (its dictionary: ~0.9 s, ~70 MiB); later calls return at once
    return jieba


def _jieba_ends(text: str) -> list[int]:
    """Word ends of CJK text (jieba)."""
    return [end for _w, _start, end in _jieba().tokenize(text)]


def preload_words() -> threading.Thread:
    """Load jieba's dictionary on a daemon thread now, so that the first Mandarin streaming request
    after a start whose first clause is longer than its budget (cut at a jieba word boundary) does not
    wait for it (0.9-1.2 s in one process, measured)."""
    t = threading.Thread(target=_jieba, name="jieba-preload", daemon=True)
    t.start()
    return t


def _word_ends(t: str, limit: int) -> list[int]:
    """Positions <= ``limit`` (and < len(t)) where a whole word ends and the next begins."""
    ends = [i for i in range(1, min(limit, len(t) - 1) + 1) if t[i].isspace() and not t[i - 1].isspace()]
    if any(_is_cjk(ch) for ch in t[:limit + 1]):
        ends += [e for e in _jieba_ends(t[:limit + 8]) if 0 < e <= limit and e < len(t)]
        ends = [e for e in ends if not (e < len(t) and _joins_latin(t, e))]
    return sorted(set(ends))


def _joins_latin(t: str, i: int) -> bool:
    """Cutting at ``i`` would split a run of Latin letters or digits (jieba keeps them whole; checked anyway)."""
    return 0 < i < len(t) and t[i - 1].isalnum() and t[i].isalnum() and not (_is_cjk(t[i - 1]) or _is_cjk(t[i]))


def _trailing_end(t: str, marks: str) -> bool:
    """``t`` ends with one of ``marks`` (then closers): a boundary that no later text can undo."""
    s = t.rstrip()
    while s and s[-1] in _CLOSERS:
        s = s[:-1]
    return bool(s) and s[-1] in marks


def first_end(t: str, budget: int, *, complete: bool) -> int:
    """Where the first segment of ``t`` (stripped) ends, or 0 for no cut. ``complete``: no more
    text follows ``t`` (a whole request, or the final piece)."""
    n = len(t)
    if n <= budget and complete:
        return 0
    bounds = [b for b in sorted(set(sentence_cuts(t) + clause_cuts(t))) if b <= budget]
    if not complete and n <= budget and _trailing_end(t, _FINAL_ENDS + _FINAL_CLAUSE):
        return n  # "你好，" held: the clause is complete
    if bounds:
        return bounds[0]
    if n <= budget:
        return 0
    ends = _word_ends(t, budget)
    return ends[-1] if ends else 0


def _merge_silent(pieces: list[str]) -> list[str]:
    out: list[str] = []
    carry = ""
    for p in pieces:
        p = f"{carry} {p}".strip() if carry else p
        carry = ""
        if not speakable(p):
            carry = p
            continue
        out.append(p)
    if carry:
        if out:
            out[-1] = f"{out[-1]}{carry}" if carry[:1] in _FINAL_ENDS + ".,;:" else f"{out[-1]} {carry}"
        else:
            out.append(carry)  # nothing speakable at all: the caller decides
    return out


def shorten_first(pieces: list[str], budget: int) -> list[str]:
    """A whole streaming request's segments with the first one cut short (:func:`first_end`)."""
    if not pieces:
        return pieces
    c = first_end(pieces[0], budget, complete=True)
    if not c:
        return pieces
    head, tail = pieces[0][:c].strip(), pieces[0][c:].strip()
    return _merge_silent([head, tail, *pieces[1:]]) if head and tail else pieces


def cut_open(held: str, *, max_chars: int, budget: int | None, force: Force = None) -> tuple[list[str], str]:
    """The segments complete in ``held`` and the text still held. ``budget``: the first segment's,
    while none was cut yet (None after)."""
    t = held.lstrip()
    if not t.strip():
        return [], held if force is None else ""
    n = len(t)
    out: list[str] = []
    if budget is not None:
        c = n if force == "all" and n <= budget else first_end(t, budget, complete=force == "all")
        if c:
            head = t[:c].strip()
            if speakable(head):
                out.append(head)
                t = t[c:]
                n = len(t)
                if not t.strip():
                    return out, ""
                t = t.lstrip()
                n = len(t)
    if force == "all":
        end = n
    else:
        cuts = sentence_cuts(t)
        end = cuts[-1] if cuts else 0
        if _trailing_end(t, _FINAL_ENDS):
            end = n
        if force == "idle" or (end == 0 and n > max_chars):
            ends = _word_ends(t, n)
            if t[-1:].isspace():
                ends.append(n)
            end = max(end, ends[-1] if ends else 0)
    done, rest = t[:end], t[end:]
    pieces = split_segments(done, max_chars) if done.strip() else []
    if force is None and len(rest) > max_chars:  # a long run without an end mark: cut it like a whole request's
        more = split_segments(rest, max_chars)
        pieces += more[:-1]
        rest = rest[rest.rfind(more[-1]):] if more else rest
    pieces = _merge_silent(out + pieces)
    if pieces and not speakable(pieces[-1]) and force != "all":
        rest = f"{pieces.pop()} {rest.lstrip()}"
    return pieces, rest
