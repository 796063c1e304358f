# ruff: noqa: RUF001 - typographic apostrophes are part of words here
"""Pronunciation lexicons: W3C PLS 1.0 documents, parsed safely, and applied to text. Pure.

A PLS document (``<lexicon version="1.0" alphabet="ipa" xml:lang="en-US">`` holding ``<lexeme>``s of
one or more ``<grapheme>`` and an ``<alias>`` or a ``<phoneme>``) is parsed with the same guard as
SSML (:func:`engine.ssml.safe_parse`: no DTD, no entities, no external references); a bad one
raises :class:`LexiconError` with line, column and reason. Bounds: :class:`LexiconLimits`.

How entries apply (:func:`apply`), the rules this implementation documents:

- **Whole words only.** A Latin-script grapheme (one or more words: ``W3C``, ``New York``) matches a
  run of whole words, never the inside of a longer word (``W3C`` not in ``W3Cx``); a grapheme in Han
  or kana script (no spaces between words) matches wherever its characters stand.
- **Case.** PLS compares graphemes as written: matching is case-sensitive (``Nice`` the city and
  ``nice`` the word differ); list both spellings to match both.
- **Order.** Lexicons apply in the order the request names them and the first that has a word wins;
  inside one lexicon the first lexeme with a grapheme wins, and the longest grapheme at a place wins.
- **What a match becomes.** An ``alias`` replaces the word by its text (read by the voice as text);
  a ``phoneme`` (the first, or the one with ``prefer="true"``) replaces its reading: a
  :class:`schemas.Span` with ``ph`` and the lexicon's ``alphabet`` (``ipa``, or ``x-pinyin``).
- Text the request already fixed (``phoneme``, ``sub``, ``say-as`` in SSML) is not rewritten.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from engine.errors import EngineError
from engine.ssml import ALPHABETS, Refused, safe_parse
from schemas.errors import InvalidSSML
from schemas.events import Span

__all__ = ["Applier", "Entry", "Lexicon", "LexiconError", "LexiconLimits", "apply", "parse_pls", "version_of"]

_W = r"[^\W_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"  # letters and digits, not Han or kana
_WORD = re.compile(rf"{_W}(?:['’.-]{_W})*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


class LexiconError(EngineError, ValueError):
    """A lexicon that cannot be stored: not PLS, refused XML, or past a bound (the message says which)."""


@dataclass(frozen=True, slots=True)
class LexiconLimits:
    """Bounds on one lexicon (the stage's and the writers' ``TTS_LEXICON_*`` settings)."""

    max_bytes: int = 256 * 1024
    max_entries: int = 5_000
    max_grapheme_chars: int = 100
    max_value_chars: int = 500


@dataclass(frozen=True, slots=True)
class Entry:
    grapheme: str
    alias: str | None = None
    phoneme: str | None = None


@dataclass(frozen=True, slots=True)
class Lexicon:
    """One parsed lexicon: ``key`` ``owner/name``, ``version`` the digest of its document."""

    key: str
    version: str
    alphabet: str
    lang: str | None
    entries: dict[str, Entry]
    _words: dict[tuple[str, ...], Entry] = field(default_factory=dict, repr=False)
    _longest: int = 1
    _cjk: re.Pattern[str] | None = None
    ref: str = ""  # owner/name@version: what a completion names (set by build)


def version_of(document: str) -> str:
    """A lexicon version: the first 16 hex digits of its document's SHA-256 (same document, same version)."""
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class _PLSBuilder:
    def __init__(self, limits: LexiconLimits) -> None:
        self.limits = limits
        self.alphabet = "ipa"
        self.lang: str | None = None
        self.entries: dict[str, Entry] = {}
        self.stack: list[str] = []
        self.text: list[str] = []
        self.graphemes: list[str] = []
        self.alias: str | None = None
        self.phoneme: str | None = None
        self.preferred = False
        self._prefer = False
        self.root = False

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        tag = tag.rsplit(":", 1)[-1]
        if len(self.stack) >= 4:
            raise Refused("PLS nests lexicon > lexeme > grapheme/alias/phoneme; this is deeper")
        if not self.stack:
            if tag != "lexicon":
                raise Refused(f"the root element is <{tag}>; a PLS document is <lexicon>...</lexicon>")
            self.root = True
            self.alphabet = attrs.get("alphabet", "ipa").strip().lower()
            if self.alphabet not in ALPHABETS:
                raise Refused(f"alphabet {self.alphabet!r} is not supported; use one of {', '.join(ALPHABETS)}")
            self.lang = attrs.get("xml:lang")
        elif tag == "lexeme":
            self.graphemes, self.alias, self.phoneme, self.preferred = [], None, None, False
        elif tag in ("grapheme", "alias", "phoneme", "example"):
            self.text = []
            if tag == "phoneme" and attrs.get("prefer") == "true" and self.phoneme is not None and not self.preferred:
                self.phoneme = None  # the preferred pronunciation replaces an earlier one
            self._prefer = attrs.get("prefer") == "true"
        self.stack.append(tag)

    def end(self, tag: str) -> None:
        tag = self.stack.pop()
        value = " ".join("".join(self.text).split())
        if tag == "grapheme":
            if not value or len(value) > self.limits.max_grapheme_chars:
                raise Refused(f"a grapheme must have 1 to {self.limits.max_grapheme_chars} characters")
            self.graphemes.append(value)
        elif tag in ("alias", "phoneme"):
            if len(value) > self.limits.max_value_chars:
                raise Refused(f"<{tag}> has {len(value)} characters; the limit is {self.limits.max_value_chars}")
            if tag == "alias" and self.alias is None and self.phoneme is None:
                self.alias = value
            elif tag == "phoneme" and (self.phoneme is None or (self._prefer and not self.preferred)):
                self.phoneme, self.preferred = value, self._prefer
        elif tag == "lexeme":
            if not self.graphemes or (self.alias is None and self.phoneme is None):
                raise Refused("a <lexeme> needs a <grapheme> and an <alias> or a <phoneme>")
            for g in self.graphemes:
                if g not in self.entries:
                    if len(self.entries) >= self.limits.max_entries:
                        raise Refused(f"more than {self.limits.max_entries} entries")
                    self.entries[g] = Entry(g, None if self.phoneme else self.alias, self.phoneme)
        self.text = []

    def data(self, text: str) -> None:
        if self.stack and self.stack[-1] in ("grapheme", "alias", "phoneme"):
            self.text.append(text)


def parse_pls(document: str, key: str, *, limits: LexiconLimits | None = None) -> Lexicon:
    """A PLS document as a :class:`Lexicon` named ``key`` (``owner/name``). Raises :class:`LexiconError`."""
    limits = limits or LexiconLimits()
    size = len(document.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise LexiconError(f"lexicon {key}: the document has {size} bytes; the limit is {limits.max_bytes}")
    b = _PLSBuilder(limits)
    try:
        safe_parse(document, b.start, b.end, b.data)
    except InvalidSSML as e:
        raise LexiconError(f"lexicon {key}: {e.message}") from None
    if not b.root:
        raise LexiconError(f"lexicon {key}: no <lexicon> element")
    return build(key, version_of(document), b.alphabet, b.lang, b.entries)


def build(key: str, version: str, alphabet: str, lang: str | None, entries: dict[str, Entry]) -> Lexicon:
    """A :class:`Lexicon` with its matchers compiled (once per version, not per request)."""
    words: dict[tuple[str, ...], Entry] = {}
    cjk: list[str] = []
    for g, e in entries.items():
        if _CJK.search(g):
            cjk.append(g)
        else:
            toks = tuple(m.group(0) for m in _WORD.finditer(g))
            if toks:
                words.setdefault(toks, e)
    longest = max((len(t) for t in words), default=1)
    pattern = re.compile("|".join(re.escape(g) for g in sorted(cjk, key=len, reverse=True))) if cjk else None
    return Lexicon(key, version, alphabet, lang, entries, words, longest, pattern, f"{key}@{version}")


_Candidate = tuple[int, int, tuple[str, ...], "Lexicon", Entry]  # (lexicon rank, -words, words, lexicon, entry)
_MATCHERS: dict[tuple[str, ...], tuple[dict[str, list[_Candidate]], tuple[Lexicon, ...]]] = {}
_MATCHERS_MAX = 256


def _matcher(lexicons: tuple[Lexicon, ...]) -> dict[str, list[_Candidate]]:
    """The lexicons' word entries by first word, each list in the order a match is tried (lexicon
    order first, then the longest grapheme); built once per set of lexicon versions, then cached."""
    key = tuple(lex.ref for lex in lexicons)
    hit = _MATCHERS.get(key)
    if hit is not None:
        return hit[0]
    by_first: dict[str, list[_Candidate]] = {}
    for rank, lex in enumerate(lexicons):
        for toks, e in lex._words.items():
            by_first.setdefault(toks[0], []).append((rank, -len(toks), toks, lex, e))
    for cands in by_first.values():
        cands.sort(key=lambda c: (c[0], c[1]))
    if len(_MATCHERS) >= _MATCHERS_MAX:
        _MATCHERS.pop(next(iter(_MATCHERS)))
    _MATCHERS[key] = (by_first, lexicons)
    return by_first


def apply(span: Span, lexicons: tuple[Lexicon, ...] | list[Lexicon], used: set[str] | None = None) -> list[Span]:
    """A plain text span with the lexicons' entries applied (see the module's rules); ``used``
    collects the ``ref`` of every lexicon that matched."""
    return Applier(tuple(lexicons))(span, used)


class Applier:
    """:func:`apply` for one request's lexicons, their matcher looked up once."""

    __slots__ = ("by_first", "cjk", "lexicons")

    def __init__(self, lexicons: tuple[Lexicon, ...]) -> None:
        self.lexicons = lexicons
        self.by_first = _matcher(lexicons) if lexicons else {}
        self.cjk = [lex for lex in lexicons if lex._cjk is not None]

    def __call__(self, span: Span, used: set[str] | None = None,
                 hits: list[tuple[int, int, str]] | None = None) -> list[Span]:
        """``hits`` (when given) collects each match as ``(a, b, said)``: ``span.text[a:b]`` read as
        ``said`` (an alias's text, or the grapheme itself when a phoneme replaces its reading)."""
        return _apply(span, self, used, hits)


def _apply(span: Span, ap: Applier, used: set[str] | None, found: list[tuple[int, int, str]] | None = None
           ) -> list[Span]:
    text = span.text
    if not ap.lexicons or not text.strip():
        return [span]
    hits: list[tuple[int, int, Lexicon, Entry]] = []
    taken: bytearray | None = None
    for lex in ap.cjk:  # Han/kana graphemes: wherever they stand, first lexicon first
        assert lex._cjk is not None
        for m in lex._cjk.finditer(text):
            if taken is None:
                taken = bytearray(len(text))
            if not any(taken[m.start():m.end()]):
                hits.append((m.start(), m.end(), lex, lex.entries[m.group(0)]))
                taken[m.start():m.end()] = b"\1" * (m.end() - m.start())
    by_first = ap.by_first
    toks = _WORD.findall(text) if by_first else []
    if toks and not by_first.keys().isdisjoint(toks):  # (C speed: most runs match nothing)
        # where each word starts: the next one is the first occurrence after the previous word, since
        # nothing between two words can start one (a word starts at any letter or digit)
        starts: list[int] = []
        at = 0
        for t in toks:
            at = text.find(t, at)
            starts.append(at)
            at += len(t)
        after = 0  # words before this one are inside a match already
        for i in [k for k, t in enumerate(toks) if t in by_first]:  # (only the words some grapheme starts with)
            if i < after:
                continue
            for _, neg, gtoks, lex, e in by_first[toks[i]]:
                n = -neg  # one word: its first word is the word (the key); more: the next ones, spaced
                if n == 1 or (tuple(toks[i:i + n]) == gtoks and _spaced(text, toks, starts, i, n)):
                    a, b = starts[i], starts[i + n - 1] + len(toks[i + n - 1])
                    if taken is None or not any(taken[a:b]):
                        hits.append((a, b, lex, e))
                    after = i + n
                    break
    if not hits:
        return [span]
    if taken is not None:  # (word hits alone are found in order)
        hits.sort(key=lambda h: h[0])
    # aliases join the text around them: one plain span between two phoneme spans, as the SSML
    # builder would merge them (fewer spans to cut and hash)
    out: list[Span] = []
    plain: list[str] = []
    pos = 0
    for a, b, lex, e in hits:
        plain.append(text[pos:a])
        if e.phoneme is not None:
            if any(plain):
                out.append(Span(text="".join(plain), rate=span.rate, lang=span.lang))
            plain = []
            out.append(Span(text=text[a:b], ph=e.phoneme, alphabet=lex.alphabet,  # type: ignore[arg-type]
                            rate=span.rate, lang=span.lang))
        else:
            plain.append(e.alias or "")
        if used is not None:
            used.add(lex.ref)
        if found is not None:
            found.append((a, b, text[a:b] if e.phoneme is not None else e.alias or ""))
        pos = b
    plain.append(text[pos:])
    if any(plain):
        out.append(Span(text="".join(plain), rate=span.rate, lang=span.lang))
    return out


def _spaced(text: str, toks: list[str], starts: list[int], i: int, n: int) -> bool:
    """Words ``i..i+n-1`` separated by whitespace only (``New York``, not ``New-York``: that is one word)."""
    return all(not text[starts[j] + len(toks[j]):starts[j + 1]].strip() for j in range(i, i + n - 1))
