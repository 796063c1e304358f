"""SSML (``text_type: ssml``) to a flat list of spans: parsed safely, pure, no I/O.

The parser is the standard library's expat (``xml.parsers.expat``) behind a hand-rolled guard
(no defusedxml dependency), which refuses before anything is expanded or fetched:

- a DOCTYPE (so no DTD, no internal entity declarations: no "billion laughs"), any entity or
  notation declaration, any external entity reference (never resolved: nothing reads a file
  or the network), and every entity but XML's five predefined ones and character references;
- a document over ``max_chars`` characters (checked before parsing), nesting deeper than
  ``max_depth``, more than ``max_elements`` elements, or an attribute value over
  ``max_attr_chars`` (checked as each element opens, so the cost is linear in the input).

Every refusal and every malformed document raises :class:`schemas.errors.InvalidSSML` whose
message starts ``line L, column C:`` (1-based) and gives the reason.

What each element becomes (a :class:`schemas.Span` list; :data:`BOUNDARY` marks a sentence or
paragraph edge):

- ``speak`` (the root, required), ``p``, ``s``: their text; ``p`` and ``s`` edges are boundaries.
- ``break time="1500ms|1.5s"`` / ``strength``: a span with ``break_ms`` (at most 10 s).
- ``sub alias``: the alias replaces the content. ``say-as``: the content read as
  :func:`engine.sayas.expand` says, in the language in scope. ``phoneme alphabet="ipa|x-pinyin"
  ph``: a span whose ``ph`` replaces the reading of its text. These three hold text only.
- ``prosody rate``: the runs inside get ``rate`` (multiplied when nested; ``pitch`` and
  ``volume`` are dropped). ``lang xml:lang`` (and ``xml:lang`` on ``speak``, ``p``, ``s``,
  ``voice``): the runs inside get ``lang``. ``mark name``: a span with ``mark`` (a name of at
  most 256 characters, at most ``max_marks`` marks: their times travel inline in the completion).
- Any other element (``emphasis``, ``voice``, ``audio``, ``w``, vendor tags ...): its text is
  kept, the tag dropped. Comments and processing instructions are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from xml.parsers import expat

from engine.sayas import expand
from engine.spoken import Spoken
from schemas.errors import InvalidSSML, TtsflowError
from schemas.events import Span

__all__ = ["BOUNDARY", "Limits", "Refused", "parse", "parse_traced", "plain_text", "safe_parse"]

BOUNDARY = Span(mark="\x00")  # a sentence or paragraph edge (never on the wire: the stage cuts there)
MAX_BREAK_MS = 10_000
_STRENGTH_MS = {"none": 0, "x-weak": 100, "weak": 250, "medium": 500, "strong": 750, "x-strong": 1000}
_RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
_PINYIN = re.compile(r"^(?:[a-zü:v]{1,7}[1-5])(?:[\s'-]+[a-zü:v]{1,7}[1-5])*$")
_LANG = re.compile(r"^[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*$")
_TEXT_ONLY = frozenset({"sub", "say-as", "phoneme"})
_BLOCKS = frozenset({"p", "s", "paragraph", "sentence"})
ALPHABETS = ("ipa", "x-pinyin", "x-voice")  # x-voice: the voice's own phonemes, as /dev/phonemize prints them


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one document (the stage's settings: ``TTS_SSML_MAX_*``)."""

    max_chars: int = 100_000
    max_depth: int = 32
    max_elements: int = 10_000
    max_attr_chars: int = 2_048
    max_marks: int = 1_000  # each is reported inline in the completion: bounded to fit a Kafka record


class _Refused(TtsflowError):
    """Raised inside an expat handler; the parser's position is read there (``_Guard``)."""


@dataclass(slots=True)
class _Scope:
    tag: str
    rate: float | None
    lang: str | None
    collect: list[str] | None = None  # text of a sub / say-as / phoneme
    attrs: dict[str, str] | None = None
    at: int = 0  # where its content starts, in characters of the document's character data


class _Builder:
    def __init__(self, lang: str, limits: Limits, rewrite: Callable[[Span], list[Span]] | None = None) -> None:
        self.limits = limits
        self.rewrite = rewrite
        self.default_lang = lang
        self.out: list[Span] = []
        self.buf: list[str] = []
        self.stack: list[_Scope] = []
        self.elements = 0
        self.marks = 0
        self.root_seen = False
        # traced (parse_traced): the text as read, in offsets of the document's character data
        self.trace: Spoken | None = None
        self.at = 0  # character data seen so far
        self.buf_at = 0  # where the buffered run starts

    # -- state ----------------------------------------------------------------------
    @property
    def _top(self) -> _Scope:
        return self.stack[-1]

    def _flush(self) -> None:
        if not self.buf:
            return
        text = "".join(self.buf)
        self.buf = []
        top = self.stack[-1]
        span = Span(text=text, rate=top.rate, lang=top.lang if top.lang != self.default_lang else None)
        if self.rewrite is None:
            self.out.append(span)
        elif self.trace is None:
            self.out.extend(self.rewrite(span))
        else:
            hits: list[tuple[int, int, str]] = []
            self.out.extend(self.rewrite(span, hits=hits))  # type: ignore[call-arg]
            _trace_run(self.trace, text, self.buf_at, hits)
            return
        if self.trace is not None:
            self.trace.verbatim(text, range(self.buf_at, self.buf_at + len(text)))

    def _emit(self, span: Span) -> None:
        self.out.append(span)

    # -- expat handlers -----------------------------------------------------------------
    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self.elements += 1
        if self.elements > self.limits.max_elements:
            raise _Refused(f"more than {self.limits.max_elements} elements")
        if len(self.stack) >= self.limits.max_depth:
            raise _Refused(f"elements nested deeper than {self.limits.max_depth}")
        for k, v in attrs.items():
            if len(v) > self.limits.max_attr_chars:
                raise _Refused(f"attribute {k!r} of <{tag}> has {len(v)} characters; the limit is "
                               f"{self.limits.max_attr_chars}")
        if not self.stack:
            if tag != "speak":
                raise _Refused(f"the root element is <{tag}>; an SSML document is <speak>...</speak>")
            self.root_seen = True
        elif self._top.collect is not None:
            raise _Refused(f"<{self._top.tag}> holds text only, not <{tag}>")
        else:
            self._flush()
        parent_rate = self.stack[-1].rate if self.stack else None
        parent_lang = self.stack[-1].lang if self.stack else self.default_lang
        lang = attrs.get("xml:lang")
        if lang is not None:
            if not _LANG.match(lang):
                raise _Refused(f"xml:lang {lang!r} is not a language tag")
            lang = lang.lower()
        elif tag == "lang":
            raise _Refused("<lang> needs xml:lang")
        scope = _Scope(tag, parent_rate, lang or parent_lang)
        if tag in _BLOCKS:
            self._emit(BOUNDARY)
        elif tag == "break":
            self._emit(Span(break_ms=_break_ms(attrs)))
        elif tag == "mark":
            name = attrs.get("name")
            if not name:
                raise _Refused("<mark> needs a name")
            if len(name) > 256:
                raise _Refused(f"a mark name has {len(name)} characters; the limit is 256")
            self.marks += 1
            if self.marks > self.limits.max_marks:
                raise _Refused(f"more than {self.limits.max_marks} marks")
            self._emit(Span(mark=name))
        elif tag == "prosody":
            if "rate" in attrs:
                r = _rate(attrs["rate"])
                scope.rate = round(r * (parent_rate or 1.0), 4)
                if not 0.1 <= scope.rate <= 10:
                    raise _Refused(f"prosody rate {attrs['rate']!r} makes a rate of {scope.rate:g}; "
                                   "the effective rate must be within 0.1 to 10")
                if scope.rate == 1.0:
                    scope.rate = None
        elif tag == "sub":
            if "alias" not in attrs:
                raise _Refused("<sub> needs an alias")
            scope.collect, scope.attrs = [], attrs
        elif tag == "say-as":
            if not attrs.get("interpret-as"):
                raise _Refused("<say-as> needs interpret-as")
            scope.collect, scope.attrs = [], attrs
        elif tag == "phoneme":
            alphabet = attrs.get("alphabet", "ipa").strip().lower()
            ph = attrs.get("ph", "").strip()
            if alphabet not in ALPHABETS:
                raise _Refused(f"phoneme alphabet {alphabet!r} is not supported; use one of {', '.join(ALPHABETS)}")
            if not ph:
                raise _Refused("<phoneme> needs ph")
            if alphabet == "x-pinyin" and not _PINYIN.match(ph.lower()):
                raise _Refused(f"ph {ph!r} is not tone-numbered pinyin (syllables like chong2 qing4)")
            scope.collect, scope.attrs = [], {"alphabet": alphabet, "ph": ph}
        scope.at = self.at
        self.stack.append(scope)

    def end(self, tag: str) -> None:
        if self._top.collect is None:
            self._flush()
        scope = self.stack.pop()
        if scope.collect is not None:
            text = "".join(scope.collect)
            a = scope.attrs or {}
            lang = scope.lang if scope.lang != self.default_lang else None
            if tag == "sub":
                said = a["alias"]
                self._emit(Span(text=said, rate=scope.rate, lang=lang))
            elif tag == "say-as":
                said = expand(text, a["interpret-as"], format=a.get("format", ""), lang=scope.lang or "en")
                self._emit(Span(text=said, rate=scope.rate, lang=lang))
            else:
                said = text or " "
                self._emit(Span(text=said, ph=a["ph"], alphabet=a["alphabet"],  # type: ignore[arg-type]
                                rate=scope.rate, lang=lang))
            if self.trace is not None:  # one caption, written as the element's content
                self.trace.replaced(said, scope.at, self.at, " ".join(text.split()) or said.strip())
            return
        if tag in _BLOCKS:
            self._emit(BOUNDARY)

    def data(self, text: str) -> None:
        if not self.stack:
            return
        if self._top.collect is not None:
            self._top.collect.append(text)
        else:
            if not self.buf:
                self.buf_at = self.at
            self.buf.append(text)
        self.at += len(text)


def _break_ms(attrs: dict[str, str]) -> int:
    if "time" in attrs:
        m = _TIME.match(attrs["time"])
        if m is None:
            raise _Refused(f"break time {attrs['time']!r} is not like 500ms or 1.5s")
        ms = float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
        if ms > MAX_BREAK_MS:
            raise _Refused(f"break time {attrs['time']!r} is over {MAX_BREAK_MS // 1000} s")
        return round(ms)
    strength = attrs.get("strength", "medium").strip().lower()
    if strength not in _STRENGTH_MS:
        raise _Refused(f"break strength {strength!r} is not one of {', '.join(_STRENGTH_MS)}")
    return _STRENGTH_MS[strength]


def _rate(value: str) -> float:
    v = value.strip().lower()
    if v in _RATES:
        return _RATES[v]
    m = re.match(r"^([+-]?)(\d+(?:\.\d+)?)(%?)$", v)
    if m is None:
        raise _Refused(f"prosody rate {value!r} is not x-slow..x-fast, a percentage or a number")
    n = float(m.group(2))
    if m.group(3) and m.group(1):  # +20% / -20%: relative change
        return 1 + (n if m.group(1) == "+" else -n) / 100
    if m.group(3):
        return n / 100
    return -n if m.group(1) == "-" else n


def _refuse(*_: Any) -> None:
    raise _Refused("DTDs, entity declarations and external references are not allowed")


def safe_parse(document: str, start: Callable[[str, dict[str, str]], None], end: Callable[[str], None],
               data: Callable[[str], None]) -> None:
    """Run expat over ``document`` with the guard (no DTD, no entity declarations, no external
    references; a handler's :class:`_Refused` and every parse error become :class:`InvalidSSML`
    at the handler's line and column). Shared by SSML and PLS lexicons."""
    try:
        raw = document.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidSSML(f"not encodable as UTF-8 ({e.reason})", line=1, column=1) from None
    p = expat.ParserCreate(encoding="utf-8")
    where: list[tuple[int, int]] = []  # the position of the handler that refused

    def guarded(fn: Any) -> Any:
        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except _Refused:
                where.append((p.CurrentLineNumber, p.CurrentColumnNumber + 1))
                raise
        return call

    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    p.StartDoctypeDeclHandler = guarded(_refuse)
    p.EntityDeclHandler = guarded(_refuse)
    p.UnparsedEntityDeclHandler = guarded(_refuse)
    p.NotationDeclHandler = guarded(_refuse)
    p.ExternalEntityRefHandler = guarded(_refuse)
    p.SkippedEntityHandler = guarded(lambda name, is_param: _raise(f"entity &{name}; is not allowed"))
    p.StartElementHandler = guarded(start)
    p.EndElementHandler = guarded(end)
    p.CharacterDataHandler = data
    p.buffer_text = True
    try:
        p.Parse(raw, True)
    except _Refused as e:
        line, column = where[-1] if where else (p.CurrentLineNumber, p.CurrentColumnNumber + 1)
        raise InvalidSSML(str(e), line=line, column=column) from None
    except expat.ExpatError as e:
        raise InvalidSSML(expat.ErrorString(e.code), line=e.lineno, column=e.offset + 1) from None
    except RecursionError:  # not expected (expat and the builders are iterative); a bound, not a crash
        raise InvalidSSML("nested too deeply", line=p.CurrentLineNumber, column=p.CurrentColumnNumber + 1) from None


def parse(document: str, *, lang: str = "en", limits: Limits = Limits(),
          rewrite: Callable[[Span], list[Span]] | None = None) -> list[Span]:
    """``document`` as spans in order (text runs, breaks, marks, :data:`BOUNDARY`); ``lang`` is
    the voice's language (what ``say-as`` reads in outside any ``xml:lang``); ``rewrite`` (lexicons)
    is applied to each plain text run, never to ``sub``, ``say-as`` or ``phoneme`` content. Raises
    :class:`InvalidSSML` with line, column and reason."""
    if len(document) > limits.max_chars:
        raise InvalidSSML(f"the document has {len(document)} characters; the limit is {limits.max_chars}",
                          line=1, column=1)
    b = _Builder(lang.lower(), limits, rewrite)
    safe_parse(document, b.start, b.end, b.data)
    if not b.root_seen:
        raise InvalidSSML("no <speak> element", line=1, column=1)
    return _merge(b.out)


def parse_traced(document: str, *, lang: str = "en", limits: Limits = Limits(),
                 rewrite: Callable[..., list[Span]] | None = None) -> tuple[list[Span], Spoken | None]:
    """:func:`parse`, and where what is read was written (:class:`engine.spoken.Spoken`, offsets
    into ``document``): plain runs verbatim, ``sub``/``say-as``/``phoneme`` and lexicon matches as
    groups written as their content. ``rewrite`` takes ``hits=`` (:class:`engine.lexicon.Applier`).
    The trace is None where the document's character data could not be located (never expected:
    then words are not offered rather than misplaced)."""
    if len(document) > limits.max_chars:
        raise InvalidSSML(f"the document has {len(document)} characters; the limit is {limits.max_chars}",
                          line=1, column=1)
    b = _Builder(lang.lower(), limits, rewrite)
    b.trace = Spoken()
    safe_parse(document, b.start, b.end, b.data)
    if not b.root_seen:
        raise InvalidSSML("no <speak> element", line=1, column=1)
    return _merge(b.out), _located(document, b.trace, b.at)


def _trace_run(trace: Spoken, text: str, at: int, hits: list[tuple[int, int, str]]) -> None:
    """A plain run starting at character data offset ``at``, with a lexicon's matches ``hits``
    (``(a, b, said)`` in the run) read as groups."""
    pos = 0
    for a, b, said in sorted(hits):
        if a > pos:
            trace.verbatim(text[pos:a], range(at + pos, at + a))
        trace.replaced(said, at + a, at + b, text[a:b])
        pos = max(pos, b)
    if pos < len(text):
        trace.verbatim(text[pos:], range(at + pos, at + len(text)))


def _data_units(document: str) -> tuple[list[int], list[int]]:
    """Where each character of the document's character data (as expat reports it, inside the root
    element) stands in ``document``: its first and one-past-last offset (an entity or character
    reference is one character; CR LF is one LF). Markup, comments and processing instructions are
    skipped; CDATA content counts."""
    starts: list[int] = []
    ends: list[int] = []
    n, i, depth = len(document), 0, 0
    while i < n:
        c = document[i]
        if c == "<":
            if document.startswith("<!--", i):
                j = document.find("-->", i + 4)
                i = n if j < 0 else j + 3
            elif document.startswith("<![CDATA[", i):
                j = document.find("]]>", i + 9)
                j = n if j < 0 else j
                k = i + 9
                while k < j:
                    w = 2 if document.startswith("\r\n", k) else 1
                    starts.append(k)
                    ends.append(k + w)
                    k += w
                i = j + 3
            elif document.startswith("<?", i) or document.startswith("<!", i):
                j = document.find(">", i)
                i = n if j < 0 else j + 1
            else:
                closing = document.startswith("</", i)
                quote = ""
                k = i + 1
                while k < n:
                    ch = document[k]
                    if quote:
                        quote = "" if ch == quote else quote
                    elif ch in "\"'":
                        quote = ch
                    elif ch == ">":
                        break
                    k += 1
                selfclosing = document[k - 1] == "/" if k < n else False
                depth += -1 if closing else (0 if selfclosing else 1)
                i = k + 1
            continue
        w = 1
        if c == "&":
            j = document.find(";", i)
            w = (j + 1 - i) if j >= 0 else 1
        elif document.startswith("\r\n", i):
            w = 2
        if depth > 0:
            starts.append(i)
            ends.append(i + w)
        i += w
    return starts, ends


def _located(document: str, trace: Spoken, data_chars: int) -> Spoken | None:
    """``trace`` (in offsets of the character data) in offsets of ``document``."""
    starts, ends = _data_units(document)
    if len(starts) != data_chars:
        return None
    n = len(document)
    starts.append(n)
    ends.append(n)
    out = Spoken()
    out.text, out.size = trace.text, trace.size
    out.offsets = [starts[k] for k in trace.offsets]
    out.groups = [g.__class__(g.i, g.j, starts[g.start], ends[g.end - 1] if g.end > g.start else starts[g.start],
                              g.text) for g in trace.groups]
    return out


def _raise(reason: str) -> None:
    raise _Refused(reason)


Refused = _Refused  # what a builder raises to refuse a document (its reason; safe_parse adds the position)


def _merge(spans: list[Span]) -> list[Span]:
    """Adjacent plain runs of the same rate and language joined; repeated boundaries folded."""
    out: list[Span] = []
    for s in spans:
        if out and s is BOUNDARY and out[-1] is BOUNDARY:
            continue
        prev = out[-1] if out else None
        if (prev is not None and prev is not BOUNDARY and _plain(prev) and _plain(s)
                and (prev.rate, prev.lang) == (s.rate, s.lang)):
            out[-1] = Span(text=prev.text + s.text, rate=s.rate, lang=s.lang)
            continue
        out.append(s)
    return out


def _plain(s: Span) -> bool:
    return s is not BOUNDARY and s.ph is None and s.break_ms is None and s.mark is None


def plain_text(spans: list[Span]) -> str:
    """What the spans say, as one string (boundaries as spaces)."""
    return "".join(" " if s is BOUNDARY else s.text for s in spans)
