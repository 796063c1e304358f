# ruff: noqa: RUF001, RUF002 - full-width and CJK punctuation is the subject here
"""Text normalization and segmentation for the stage: pure functions, no Kafka.

Guarantees (checked by hypothesis property tests in ``tests/unit/test_text.py``):

* :func:`normalize` is idempotent: ``normalize(normalize(t)) == normalize(t)``. It
  applies NFKC (full-width letters, digits and punctuation become half-width, so
  Chinese ``，！？；：`` become ``,!?;:`` and ``…`` becomes ``...``), removes
  zero-width characters (U+200B-U+200D, U+2060, U+FEFF), other format characters
  (category Cf: bidi marks, soft hyphen, tags) except the prepended concatenation
  marks that carry meaning (U+0600-U+0605, U+06DD, U+070F, U+0890-U+0891, U+08E2,
  U+110BD, U+110CD), control characters (Cc) and lone surrogates (Cs, which could
  not be encoded as UTF-8 later); whitespace (including tabs and newlines) is folded
  to one space and the ends are trimmed. Numbers, dates and currency are left to the
  voice's own front end.
* :func:`split_segments` returns non-empty segments of at most ``max_chars``
  characters, each without leading or trailing whitespace, whose concatenation with
  all whitespace removed equals the input with all whitespace removed: nothing is
  lost, nothing reordered. Cuts prefer, in order: sentence ends (Chinese ``。！？；…``
  and their NFKC forms, English ``. ! ?`` aware of abbreviations, initials, decimals
  and ellipses), clause marks (``，,、;:；：``), spaces, a place between two
  characters where one is CJK, and last any place that does not detach a combining
  mark. Every sentence becomes at least one segment; sentences are not merged.
"""

from __future__ import annotations

import itertools
import re
import sys
import unicodedata

__all__ = ["clause_cuts", "normalize", "sentence_cuts", "split_segments"]

# --- normalize -----------------------------------------------------------------------

_KEEP_CF = frozenset([*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2, 0x110BD, 0x110CD])


def _removal_table() -> dict[int, None]:
    table: dict[int, None] = {}
    for cp in range(sys.maxunicode + 1):
        cat = unicodedata.category(chr(cp))
        if cat in ("Cf", "Cs") and cp not in _KEEP_CF:
            table[cp] = None
        elif cat == "Cc" and not chr(cp).isspace():
            table[cp] = None
    for cp in (0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF):  # Cf already; explicit for the reader
        table[cp] = None
    return table


_REMOVE = _removal_table()


def _once(text: str) -> str:
    # Removal before NFKC, so that a base letter and a combining mark separated by a
    # zero-width space compose the same way on the first and the second pass.
    text = unicodedata.normalize("NFKC", text.translate(_REMOVE)).translate(_REMOVE)
    return " ".join(text.split())


def normalize(text: str) -> str:
    """NFKC, zero-width and control characters removed, whitespace folded, trimmed."""
    if text.isascii() and text.isprintable() and "  " not in text and text == text.strip():
        return text  # fast path: nothing to do for plain single-spaced ASCII
    out = _once(text)
    # NFKC is not closed under the deletions and folding above in rare corner cases
    # (a removed character between two that then compose); iterate to the fixed point.
    for _ in range(4):
        again = _once(out)
        if again == out:
            return out
        out = again
    return out


# --- split ---------------------------------------------------------------------------

_CLOSERS = "\"'”’」』）)】]》>»"
_CJK_ENDS = "。！？；…｡"
_ASCII_ENDS = ".!?"
_CLAUSE_CJK = "，、；：､"
_CLAUSE_ASCII = ",;:"

# Lower-case tokens (without their final dot) after which a '.' does not end a sentence.
_ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al approx dept est fig figs no nos vol vols
    inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
    gen col lt sgt capt cmdr adm gov sen rep rev hon u.s u.k u.n e.u a.m p.m ph.d b.a m.a m.d
    dc d.c u.s.a viz ca op ed eds pp ch sec art
    """.split()
)

_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)$")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz.")


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (
        0x3040 <= o <= 0x30FF  # kana
        or 0x3400 <= o <= 0x4DBF
        or 0x4E00 <= o <= 0x9FFF
        or 0xF900 <= o <= 0xFAFF
        or 0xAC00 <= o <= 0xD7AF  # hangul
        or 0x3000 <= o <= 0x303F  # CJK punctuation
        or 0x20000 <= o <= 0x3FFFF
    )


def _skip_closers(t: str, j: int) -> int:
    while j < len(t) and t[j] in _CLOSERS:
        j += 1
    return j


def _dot_ends_sentence(t: str, i: int, j: int) -> bool:
    """Does the run of dots t[i:j] (j after the run and its closers) end a sentence?"""
    nxt = t[j] if j < len(t) else ""
    follows_break = nxt == "" or nxt.isspace() or _is_cjk(nxt)
    if not follows_break:
        return False  # 3.14, example.com, U.S.A (inside a token)
    dots = 0
    while i + dots < len(t) and t[i + dots] == ".":
        dots += 1
    if dots >= 2:  # ellipsis: a sentence end only before a capital, CJK or the end
        if nxt == "" or _is_cjk(nxt):
            return True
        k = j
        while k < len(t) and t[k].isspace():
            k += 1
        return k >= len(t) or t[k].isupper() or _is_cjk(t[k])
    k = i  # the word before the dot starts after the last character that cannot be in it: searching
    while k > 0 and t[k - 1] in _WORD_CHARS:  # from there, not from 0, keeps a 100,000-character
        k -= 1                                # text linear (from 0 it took ~9 s in the stage's loop)
    m = _WORD_BEFORE.search(t, k, i)
    if m is not None:
        word = m.group(1)
        if word.lower().rstrip(".") in _ABBREVIATIONS:
            return False
        if len(word) == 1 and word.isupper():  # an initial: J. K. Rowling
            return False
        if "." in word.strip("."):  # dotted acronym such as U.S.A.
            return False
    return True


_END_CANDIDATE = re.compile(r"[.!?;。！？；…｡]")  # every character the loop below can end a sentence at


def sentence_cuts(t: str) -> list[int]:
    """Indices where a new sentence starts (exclusive of 0 and len(t))."""
    cuts: list[int] = []
    i, n = 0, len(t)
    while i < n:
        m = _END_CANDIDATE.search(t, i)  # jump to the next mark that can end a sentence (C speed)
        if m is None:
            break
        i = m.start()
        ch = t[i]
        if ch in _CJK_ENDS or ch in "!?" or ch == "." or (ch == ";" and i > 0 and _is_cjk(t[i - 1])):
            j = i + 1
            while j < n and (t[j] in _CJK_ENDS or t[j] in _ASCII_ENDS):
                j += 1
            j = _skip_closers(t, j)
            if ch in _CJK_ENDS or ch == ";":
                end = True
            elif ch in "!?":
                nxt = t[j] if j < n else ""
                end = nxt == "" or nxt.isspace() or _is_cjk(nxt) or _is_cjk(t[i - 1] if i else "a")
            else:
                end = _dot_ends_sentence(t, i, j)
            if end and 0 < j < n:
                cuts.append(j)
            i = j
        else:
            i += 1
    return cuts


def clause_cuts(t: str) -> list[int]:
    """Indices where a clause ends (after a comma, semicolon or colon, CJK or ASCII, and any closing
    quote; an ASCII mark only before a space, the end or CJK, not in ``1,000`` or ``10:30``),
    exclusive of 0 and len(t)."""
    cuts: list[int] = []
    n = len(t)
    for i, ch in enumerate(t):
        if ch in _CLAUSE_CJK:
            j = _skip_closers(t, i + 1)
        elif ch in _CLAUSE_ASCII:
            j = _skip_closers(t, i + 1)
            nxt = t[j] if j < n else ""
            if not (nxt == "" or nxt.isspace() or _is_cjk(nxt) or (i > 0 and _is_cjk(t[i - 1]))):
                continue  # 1,000 and 10:30 and http://
        else:
            continue
        if 0 < j < n:
            cuts.append(j)
    return sorted(set(cuts))


def _space_cuts(t: str) -> list[int]:
    return [i for i, ch in enumerate(t) if ch.isspace() and i > 0]


def _char_cuts(t: str) -> list[int]:
    cjk = [i for i in range(1, len(t)) if (_is_cjk(t[i - 1]) or _is_cjk(t[i])) and not _combining(t[i])]
    return cjk


def _combining(ch: str) -> bool:
    return unicodedata.category(ch).startswith("M")


def _hard_cut(piece: str, max_chars: int) -> list[str]:
    out: list[str] = []
    while len(piece) > max_chars:
        cut = max_chars
        while cut > 1 and _combining(piece[cut]):
            cut -= 1  # do not detach a combining mark from its base
        if cut <= 1:
            cut = max_chars
        out.append(piece[:cut])
        piece = piece[cut:]
    if piece:
        out.append(piece)
    return out


_LEVELS = (clause_cuts, _space_cuts, _char_cuts)


def _pack(t: str, max_chars: int, level: int) -> list[str]:
    """Split ``t`` (stripped, non-empty) into pieces of at most max_chars, greedily."""
    if len(t) <= max_chars:
        return [t]
    if level >= len(_LEVELS):
        return _hard_cut(t, max_chars)
    bounds = [0, *_LEVELS[level](t), len(t)]
    pieces = [t[a:b] for a, b in itertools.pairwise(bounds) if a < b]
    out: list[str] = []
    cur = ""
    for p in pieces:
        cand = cur + p
        if len(cand.strip()) <= max_chars:
            cur = cand
            continue
        if cur.strip():
            out.append(cur.strip())
        if len(p.strip()) > max_chars:
            out.extend(_pack(p.strip(), max_chars, level + 1))
            cur = ""
        else:
            cur = p
    if cur.strip():
        out.append(cur.strip())
    return out


def split_segments(text: str, max_chars: int) -> list[str]:
    """Cut (normalized) text into segments of at most ``max_chars`` characters.

    One segment per sentence; a sentence longer than the limit is cut at clause marks,
    then spaces, then between CJK characters, then anywhere (packing greedily).
    """
    if max_chars < 1:
        raise ValueError("max_chars must be >= 1")
    t = text.strip()
    if not t:
        return []
    bounds = [0, *sentence_cuts(t), len(t)]
    out: list[str] = []
    for a, b in itertools.pairwise(bounds):
        sentence = t[a:b].strip()
        if sentence:
            out.extend(_pack(sentence, max_chars, 0))
    return out
