# ruff: noqa: RUF002 - full-width forms are the subject of a docstring here
"""Word timings from a voice's own durations: when each word of the text as written is spoken.

Duration-based voices (hibari, Piper, Kokoro) predict, in the same forward pass as the
audio, how many output frames each input token lasts. This module turns those durations
into one :class:`Word` per word of the item's text, with its character offsets into that
text and its span in the item's audio.

How a phoneme is traced back to a word (``plan_words``):

1. The text is cut into words as the user wrote them (:func:`words_of`): runs of
   non-space characters with their surrounding punctuation trimmed; text with Han
   characters is cut by jieba's segmentation (so a Mandarin sentence gets its words).
2. Each word is phonemized alone with the backend's own front end: ``42`` alone reads
   "forty-two", so both spoken words belong to the one written word ``42``.
3. Those per-word phonemes, in order, are aligned with the phonemes the model really saw.
   Where the words alone read as many spoken tokens (space-separated runs holding a
   sound) as the model saw, token ``t`` of its input is token ``t`` of the words, each
   pair sharing a symbol (every sentence of the benchmark corpus on hibari: the same owners as
   the alignment below, at a quarter of its cost). Otherwise ``difflib``'s
   longest-matching-blocks (no junk heuristic): a phoneme inside a replaced stretch goes
   to the word at the same relative place; phonemes with no counterpart (pauses for
   punctuation, context-only changes) belong to no word. Punctuation symbols belong to no word
   either way.

Guarantees (``word_times``): one ``Word`` per word of ``words_of(text)``, in order;
``0 <= start_s <= end_s <= duration``; starts never decrease. A word the front end gave
no phonemes (a symbol read as nothing) gets the empty span where it stands (its
neighbour's end). Pauses for punctuation, between sentences and between the model's
chunks fall between words, never inside one. Nothing is invented: every time is a sum
of the model's own durations.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

__all__ = ["Word", "WordPhonemes", "WordPlan", "in_request", "plan_words", "segment_sources", "source_offsets",
           "trim_silent_ends", "word_times", "words_of"]

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_TOKEN = re.compile(r"\S+")
_KEEP_AT_EDGES = frozenset("%‰#&@°'")  # punctuation that is read aloud; kept in a word's span
_NEVER = 2**62  # a word's first sample before any unit of it is seen


class Word(msgspec.Struct, frozen=True):
    """One written word: ``text[start:end]`` is spoken from ``start_s`` to ``end_s`` (seconds).
    (A frozen Struct, not a frozen dataclass: made ~40 times a segment, at 0.1 us against 0.7.)"""

    text: str
    start: int
    end: int
    start_s: float
    end_s: float
    chars: tuple[Word, ...] = ()  # a Mandarin word's characters, each with its own span

    def shifted(self, chars: int, seconds: float) -> Word:
        """The same word in a longer text and audio that start ``chars`` and ``seconds`` earlier."""
        return Word(self.text, self.start + chars, self.end + chars,
                    round(self.start_s + seconds, 4), round(self.end_s + seconds, 4),
                    tuple(c.shifted(chars, seconds) for c in self.chars))


@dataclass(frozen=True, slots=True)
class WordPlan:
    """Which word each phoneme of each model chunk belongs to (``owners``, ``-1``: none) and, in a
    word of several Han characters, which of its characters (``chars``, ``-1``: none; empty when
    the text has no such word)."""

    words: tuple[tuple[int, int], ...]
    text: str
    owners: tuple[np.ndarray, ...]
    chars: tuple[np.ndarray, ...]

    def over_units(self, unit_map: Callable[[int, np.ndarray], np.ndarray]) -> WordPlan:
        """The same plan over the model's input units: ``unit_map(chunk, per_symbol)`` turns one
        chunk's per-symbol array into its per-unit array (pads, dropped symbols, id layouts)."""
        return WordPlan(self.words, self.text, tuple(unit_map(c, o) for c, o in enumerate(self.owners)),
                        tuple(unit_map(c, o) for c, o in enumerate(self.chars)))

    def kept(self, chunks: Sequence[Sequence[str]], keep: Callable[[str], bool]) -> WordPlan:
        """Over units laid out as a pad, each symbol ``keep`` accepts, a pad (hibari, kokoro)."""
        masks = [np.fromiter(map(keep, ch), bool, len(ch)) for ch in chunks]  # once a chunk, for both arrays

        def unit_map(c: int, arr: np.ndarray) -> np.ndarray:
            return np.concatenate(([-1], np.asarray(arr, np.int64)[masks[c]], [-1]))

        return self.over_units(unit_map)


class WordPhonemes:
    """A backend's front end on one word alone, remembered (bounded, least recently used first
    out): words repeat (Zipf), so timing costs one G2P per new word, not per word spoken."""

    def __init__(self, phonemize: Callable[[str], Sequence[str]], size: int = 16384) -> None:
        from collections import OrderedDict

        self._fn = phonemize
        self._size = size
        self._memo: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def __call__(self, word: str) -> tuple[str, ...]:
        got = self._memo.get(word)
        if got is not None:
            self._memo.move_to_end(word)
            return got
        got = tuple(self._fn(word))
        self._memo[word] = got
        if len(self._memo) > self._size:
            self._memo.popitem(last=False)
        return got


def _spoken(c: str) -> bool:
    return c in _KEEP_AT_EDGES or unicodedata.category(c)[0] not in "PZC"


def words_of(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the words of ``text`` as written, in order.

    Runs of non-space characters with punctuation trimmed from both ends (``"Hello,"``
    is ``Hello``; ``$9.99``, ``42%`` and ``don't`` stay whole); tokens of punctuation
    alone are not words. Text with Han characters is cut by jieba (its default
    dictionary, the one the Mandarin G2P uses).
    """
    spans: list[tuple[int, int]] = []
    if _HAN.search(text):
        import jieba

        pieces = [(s, e) for _w, s, e in jieba.tokenize(text)]
        # jieba splits "iPhone15" or "3.5" on its own terms; a Latin/digit run glued without space is one word
        merged: list[tuple[int, int]] = []
        for s, e in pieces:
            prev = text[merged[-1][0]:merged[-1][1]] if merged else ""
            sign = prev in ("-", "+", "\u2212") and text[s].isdigit()  # "-5℃" is one word
            if (merged and merged[-1][1] == s and not _HAN.search(text[s:e]) and not text[s:e].isspace()
                    and not _HAN.search(prev) and not text[s - 1].isspace()
                    and _spoken(text[s]) and (_spoken(text[s - 1]) or sign)):
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        candidates = merged
    else:
        candidates = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    for s, e in candidates:
        while s < e and not _spoken(text[s]) and not (text[s] in "-+\u2212" and s + 1 < e and text[s + 1].isdigit()):
            s += 1
        while e > s and not _spoken(text[e - 1]):
            e -= 1
        if s < e:
            spans.append((s, e))
    return spans


def _owners_by_alignment(ref: Sequence[str], ref_owner: Sequence[int], actual: Sequence[str]) -> np.ndarray:
    out = np.full(len(actual), -1, np.int64)
    sm = difflib.SequenceMatcher(None, ref, actual, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            out[j1:j2] = ref_owner[i1:i2]
        elif op == "replace":
            for j in range(j1, j2):
                out[j] = ref_owner[i1 + (j - j1) * (i2 - i1) // (j2 - j1)]
    return out


@functools.lru_cache(maxsize=4096)
def _sound(symbol: str) -> bool:
    """A phoneme symbol that is heard: not a space, punctuation, symbol or control character
    (remembered: a voice has a few dozen symbols, and the word plan asks of every one it reads)."""
    return any(unicodedata.category(ch)[0] not in "PZCS" for ch in symbol)


@functools.lru_cache(maxsize=4096)
def _punct(symbol: str) -> bool:
    """A symbol that starts with punctuation (it belongs to no word); remembered like :func:`_sound`."""
    return unicodedata.category(symbol[:1] or " ")[0] == "P"


def _tokens(symbols: Sequence[str]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of non-space symbols that holds a sound."""
    out: list[tuple[int, int]] = []
    start = -1
    for i, x in enumerate((*symbols, " ")):
        if x.isspace():
            if start >= 0 and any(map(_sound, symbols[start:i])):
                out.append((start, i))
            start = -1
        elif start < 0:
            start = i
    return out


@functools.lru_cache(maxsize=16384)
def _word_tokens(symbols: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The spoken tokens of a word read alone (:func:`_tokens`), remembered: words repeat."""
    return tuple(symbols[a:b] for a, b in _tokens(symbols))


def _owners_by_tokens(per_word: Sequence[Sequence[str]], actual: Sequence[str]) -> np.ndarray | None:
    """The owners of ``actual``'s symbols when its spoken tokens pair off, in order, with those of
    the words read alone (``per_word[k]``: word ``k``'s symbols), each pair sharing a symbol;
    None when they do not (then the alignment decides). Punctuation symbols belong to no word."""
    mine = [(k, tok) for k, ps in enumerate(per_word) for tok in _word_tokens(tuple(ps))]
    theirs = _tokens(actual)
    if len(mine) != len(theirs):
        return None
    out = [-1] * len(actual)  # a list while filled (an array's item assignment costs more)
    last, last_end = -1, 0
    for (k, ref), (a, b) in zip(mine, theirs, strict=True):
        if not set(ref).intersection(actual[a:b]):  # counts agree by chance: not the same words
            return None
        if k == last:  # "42" read "forty-two": the space between its spoken words is its too
            out[last_end:a] = [k] * (a - last_end)
        for j in range(a, b):
            if not _punct(actual[j]):
                out[j] = k
        last, last_end = k, b
    return np.asarray(out, np.int64)


def plan_words(text: str, chunks: Sequence[Sequence[str]], phonemize: Callable[[str], Sequence[str]]) -> WordPlan:
    """Map every phoneme of ``chunks`` (the model's input, chunk by chunk) to a word of ``text``.

    ``phonemize(word)`` is the backend's front end applied to one word alone; it returns
    the phoneme symbols (a string is a sequence of one-character symbols).
    """
    words = words_of(text)
    per_word: list[Sequence[str]] = []
    for s, e in words:
        try:
            per_word.append(tuple(phonemize(text[s:e])))
        except Exception:  # a word its front end cannot read alone gets the empty span
            per_word.append(())
    actual: list[str] = []
    bounds: list[tuple[int, int]] = []
    for ch in chunks:
        if actual:
            actual.append(" ")
        bounds.append((len(actual), len(actual) + len(ch)))
        actual += list(ch)
    own = _owners_by_tokens(per_word, actual)
    if own is None:
        ref: list[str] = []
        ref_owner: list[int] = []
        for k, ps in enumerate(per_word):
            if ref:
                ref.append(" ")
                ref_owner.append(-1)
            ref += ps
            ref_owner += [k] * len(ps)
        own = _owners_by_alignment(ref, ref_owner, actual)
    chars = np.full(len(actual), -1, np.int64)
    timed_chars = False  # no Mandarin word: no characters to time (``chars`` empty)
    for k, (s, e) in enumerate(words):
        if e - s > 1 and all(_HAN.match(c) for c in text[s:e]):  # a Mandarin word: where each character is
            idx = np.nonzero(own == k)[0]
            char_ref: list[str] = []
            char_owner: list[int] = []
            for i, c in enumerate(text[s:e]):
                try:
                    ps = list(phonemize(c))
                except Exception:  # a character its front end cannot read alone
                    ps = []
                char_ref += ps
                char_owner += [i] * len(ps)
            if len(idx) and char_ref:
                chars[idx] = _owners_by_alignment(char_ref, char_owner, [actual[i] for i in idx])
                timed_chars = True
    return WordPlan(tuple(words), text, tuple(own[a:b].copy() for a, b in bounds),
                    tuple(chars[a:b].copy() for a, b in bounds) if timed_chars else ())


def word_times(plan: WordPlan, unit_owners: Sequence[np.ndarray], unit_samples: Sequence[np.ndarray],
               chunk_starts: Sequence[int], sample_rate: int, total_samples: int, *,
               lead_samples: int = 0) -> tuple[Word, ...]:
    """The words of ``plan`` timed by the model's durations.

    Per model chunk ``c``: ``unit_owners[c][u]`` is the word of input unit ``u`` (``-1`` for
    pads and pauses), ``unit_samples[c][u]`` how many samples the model gave it, and
    ``chunk_starts[c]`` where the chunk's audio begins in the item's audio. ``lead_samples``:
    how far a chunk's audio runs ahead of its durations (a property of the decoder; see the
    backends), subtracted from every time in that chunk.
    """
    n = len(plan.words)
    first = [_NEVER] * n
    last = [-1] * n
    char_spans: dict[tuple[int, int], tuple[int, int]] = {}
    for c, (own, dur, base) in enumerate(zip(unit_owners, unit_samples, chunk_starts, strict=True)):
        own = np.asarray(own, np.int64)
        dur = np.asarray(dur, np.int64)
        base = int(base)
        # each word's first and last unit, in one pass over Python ints: a segment has ~100 units,
        # and a dozen numpy calls on arrays that small cost more than the loop (most of all on
        # caches the model call just went through)
        at = base - lead_samples
        for o, d in zip(own.tolist(), dur.tolist(), strict=True):
            at += d
            if o < 0:
                continue
            e = at if at > base else base
            a = e - d if e - d > base else base
            if a < first[o]:
                first[o] = a
            if e > last[o]:
                last[o] = e
        sub = plan.chars[c] if c < len(plan.chars) and len(plan.chars[c]) == len(own) else None
        if sub is None or not (sub >= 0).any():
            continue
        ends = np.maximum(base, base + np.cumsum(dur) - lead_samples)
        starts = np.maximum(base, ends - dur)
        valid = own >= 0
        for w in np.unique(own[valid & (sub >= 0)]):  # a Mandarin word's characters
            sel = own == w
            for ci in np.unique(sub[sel & (sub >= 0)]):
                cs = sel & (sub == ci)
                a0, b0 = char_spans.get((int(w), int(ci)), (int(starts[cs].min()), int(ends[cs].max())))
                char_spans[(int(w), int(ci))] = (min(a0, int(starts[cs].min())), max(b0, int(ends[cs].max())))
    out: list[Word] = []
    prev_start = prev_end = 0
    with_chars = {w for w, _ in char_spans}
    text = plan.text
    for k, ((s, e), f, la) in enumerate(zip(plan.words, first, last, strict=True)):
        a, b = (prev_end, prev_end) if la < 0 else (f, la)
        a = min(max(a, prev_start), total_samples)  # starts never decrease
        b = min(max(b, a), total_samples)
        out.append(Word(text[s:e], s, e, round(a / sample_rate, 4), round(b / sample_rate, 4),
                        _chars_of(text, s, e, k, a, b, char_spans, sample_rate) if k in with_chars else ()))
        prev_start, prev_end = a, max(prev_end, b)
    return tuple(out)


def _chars_of(text: str, s: int, e: int, k: int, a: int, b: int, spans: dict[tuple[int, int], tuple[int, int]],
              sample_rate: int) -> tuple[Word, ...]:
    """Each character of word ``k`` (``text[s:e]``, spoken in samples ``a..b``) with its span: its
    own phonemes' where it has them, else the empty span where the previous character ended."""
    out: list[Word] = []
    at = prev_start = a
    for i in range(e - s):
        ca, cb = spans.get((k, i), (at, at))
        ca = min(max(ca, prev_start), b)  # starts never decrease, and stay inside the word
        cb = min(max(cb, ca), b)
        out.append(Word(text[s + i], s + i, s + i + 1, round(ca / sample_rate, 4), round(cb / sample_rate, 4)))
        at, prev_start = max(at, cb), ca
    return tuple(out)


def trim_silent_ends(words: Sequence[Word], samples: np.ndarray, sample_rate: int,
                     floor_db: float = -40.0) -> tuple[Word, ...]:
    """``words`` with each end moved back over trailing silence inside its own span.

    A voice lengthens the last phoneme before a pause, and part of that duration is
    silence (hibari's "dog." lasts 300 ms past its sound). A word ends where its sound
    ends: 10 ms frames more than ``floor_db`` below the item's loudest frame are silence.
    Starts are not moved; an end never moves before its start.
    """
    hop = max(1, sample_rate // 100)
    n = len(samples) // hop
    if n == 0 or not words:
        return tuple(words)
    x = np.asarray(samples[: n * hop], np.float32).reshape(n, hop)
    power = np.einsum("ij,ij->i", x, x)  # frame energy (a dB threshold: no root, no log; float32: 4x faster)
    top = float(power.max())
    if top <= 0:  # silence throughout: nothing to trim
        return tuple(words)
    # the loud frames, in order (a few numpy calls: each costs more than the search below)
    loud = np.flatnonzero(power > top * 10 ** (floor_db / 10)).tolist()
    out = []
    find = bisect.bisect_left
    for w in words:
        a, b = int(w.start_s * sample_rate) // hop, min(n, -(-round(w.end_s * sample_rate) // hop))
        if b <= a:
            out.append(w)
            continue
        i = find(loud, b)  # back over the silent frames that end the word's span: just past its last loud frame
        k = loud[i - 1] + 1 if i else 0
        if k >= b:
            out.append(w)
            continue
        end_s = max(w.start_s, round(max(a, k) * hop / sample_rate, 4))
        if end_s == w.end_s:
            out.append(w)
            continue
        chars = tuple(c if c.end_s <= end_s else Word(c.text, c.start, c.end, min(c.start_s, end_s), end_s)
                      for c in w.chars) if w.chars else ()
        out.append(Word(w.text, w.start, w.end, w.start_s, end_s, chars))
    return tuple(out)


def source_offsets(original: str, normalized: str, lookahead: int = 4096) -> np.ndarray:
    """For each character of ``normalized`` (and one past its end), the offset in ``original``
    it came from. ``normalized`` is ``original`` after the stage's normalization (NFKC,
    invisible characters removed, whitespace folded, a few foreign words dropped): each
    character maps to the next source character whose NFKC form holds it (``Ｈ`` for ``H``,
    ``…`` for each of ``...``, the first of a run of spaces for its one space), walking both
    texts forward once, so offsets never decrease. A character found nowhere within
    ``lookahead`` source characters (a composition NFKC made of two) maps where the walk stands.
    """
    if original == normalized:
        return np.arange(len(normalized) + 1, dtype=np.int64)
    out = np.zeros(len(normalized) + 1, np.int64)
    n = len(original)
    i, pos = 0, 0  # the source character, and how much of its NFKC form is used up
    forms: dict[str, str] = {}
    for j, c in enumerate(normalized):
        k, p = i, pos
        limit = min(n, i + lookahead)
        while k < limit:
            o = original[k]
            if o == c and p == 0:
                p = 1
                break
            if c.isspace() and o.isspace():
                p = len(o)
                break
            form = forms.get(o)
            if form is None:
                form = forms[o] = unicodedata.normalize("NFKC", o)
            at = form.find(c, p)
            if at >= 0:
                p = at + 1
                break
            k, p = k + 1, 0
        if k < limit:
            i, pos = k, p
            if pos >= len(forms.get(original[k], original[k])):  # used up: the next character is next
                i, pos = k + 1, 0
            out[j] = k
        else:
            out[j] = min(i, max(n - 1, 0))
    out[len(normalized)] = len(original)
    return out


def in_request(original: str, normalized: str, segments: Sequence[str], parts: Sequence[Sequence[Word]],
               starts_s: Sequence[float]) -> list[Word]:
    """The words of every part placed in the request: times moved by the part's start in the
    joined audio (``engine.audio.part_starts``: the pauses between parts counted), character
    offsets moved to the segment's place in ``normalized`` and mapped back into ``original``
    (the text as the user sent it), so a caption points at what the user wrote.

    ``segments`` are the stage's segments of ``normalized``, in order (substrings of it, as
    ``split_segments`` makes them); ``parts[k]`` the words of segment ``k``'s audio.
    """
    src = source_offsets(original, normalized)
    out: list[Word] = []
    at = 0
    for seg, words, t0 in zip(segments, parts, starts_s, strict=True):
        base = normalized.find(seg, at)
        if base < 0:
            raise ValueError(f"segment not found in the normalized text after offset {at}: {seg[:40]!r}")
        at = base + len(seg)
        for w in words:
            out.append(_placed(original, src, base, t0, w))
    return out


def _placed(original: str, src: np.ndarray, base: int, t0: float, w: Word) -> Word:
    s, e = int(src[base + w.start]), int(src[base + w.end - 1]) + 1
    return Word(original[s:e], s, e, round(w.start_s + t0, 4), round(w.end_s + t0, 4),
                tuple(_placed(original, src, base, t0, c) for c in w.chars))


def segment_sources(original: str, text: str, segments: Sequence[str]) -> list[tuple[int, list[tuple[int, int]]]]:
    """Where each segment of ``text`` (the stage's normalized text, ``segments`` its pieces in
    order, as ``split_segments`` makes them) came from in ``original``: per segment, the offset of
    its first character and the breakpoints ``(i, d)`` after which character ``k`` maps to
    ``start + d + (k - i)`` (none when the segment is a verbatim copy). Compact: only changes of
    length make a breakpoint, so a segment carries a few numbers, never its original slice."""
    src = source_offsets(original, text)
    out: list[tuple[int, list[tuple[int, int]]]] = []
    at = 0
    for seg in segments:
        base = text.find(seg, at)
        if base < 0:
            raise ValueError(f"segment not found in the normalized text after offset {at}: {seg[:40]!r}")
        at = base + len(seg)
        rel = src[base:base + len(seg)] - src[base]
        jumps = np.nonzero(np.diff(rel) != 1)[0] + 1
        out.append((int(src[base]), [(int(i), int(rel[i])) for i in jumps]))
    return out
