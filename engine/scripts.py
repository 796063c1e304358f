"""Which writing system each piece of a text is in, from ``unicodedata`` alone. Pure.

Used by the stage to check a request against its voice (a voice declares the scripts it
speaks, :mod:`engine.voices`) and, later, by a front end that sends each script run to its
own G2P. Script names are Unicode's long Script property values (``Latin``, ``Han``,
``Hiragana``, ``Katakana``, ``Hangul``, ``Cyrillic``, ``Arabic``, ``Greek``, ...), plus
``Emoji`` for pictographs. Python's ``unicodedata`` has no Script property, so a letter's
script is the leading word(s) of its character name (``CYRILLIC SMALL LETTER A``), which
Unicode keeps stable.

Guarantees:

* Only letters (category L*), their combining marks and emoji have a script. Digits,
  punctuation, spaces and other symbols (``°``, ``%``, ``€``) are script-neutral: every
  voice reads or skips them, so they never count for or against one.
* :func:`census` weighs each script by *spoken units*, roughly syllables, so that scripts
  of very different density compare fairly: a Han character, a kana, a Hangul syllable
  block and an emoji are one unit each; a word in an alphabetic script (a maximal run of
  its letters) counts one unit per three letters, at least one ("iPhone" is 2, "I" is 1).
* :func:`strip` removes every letter (with its marks) of a script not in ``keep`` and every
  emoji sequence (ZWJ joiners, variation selectors and skin tones included), leaving a
  space where something was cut between two kept characters, and the punctuation a cut
  word leaves standing alone between spaces (``"Hi. 你好。"`` -> ``"Hi."``); whitespace is
  folded.
* Cost: one ``unicodedata.name`` per distinct character (cached), then about 0.3 us per
  character; text in Latin letters and neutral characters only (:func:`latin_only`, one
  regular expression) takes a fast path.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator

__all__ = ["EMOJI", "SYLLABIC", "census", "latin_only", "runs", "script_of", "strip"]

EMOJI = "Emoji"
# One character is one spoken unit (syllable, mora or word) in these scripts.
SYLLABIC = frozenset({"Han", "Hiragana", "Katakana", "Hangul", "Yi", EMOJI})
_LETTERS_PER_UNIT = 3  # alphabetic scripts: about three letters to a syllable

# name prefix -> script, longest first where one prefix starts another
_NAME_PREFIXES: tuple[tuple[str, str], ...] = (
    ("CJK UNIFIED IDEOGRAPH", "Han"),
    ("CJK COMPATIBILITY IDEOGRAPH", "Han"),
    ("KATAKANA-HIRAGANA", "Katakana"),  # the prolonged sound mark; Japanese either way
    ("HALFWIDTH KATAKANA", "Katakana"),
    ("HALFWIDTH HANGUL", "Hangul"),
    ("FULLWIDTH LATIN", "Latin"),
    ("HIRAGANA", "Hiragana"),
    ("KATAKANA", "Katakana"),
    ("HANGUL", "Hangul"),
    ("LATIN", "Latin"),
    ("CYRILLIC", "Cyrillic"),
    ("GREEK", "Greek"),
    ("COPTIC", "Coptic"),
    ("ARABIC", "Arabic"),
    ("HEBREW", "Hebrew"),
    ("DEVANAGARI", "Devanagari"),
    ("BENGALI", "Bengali"),
    ("TAMIL", "Tamil"),
    ("THAI", "Thai"),
    ("ARMENIAN", "Armenian"),
    ("GEORGIAN", "Georgian"),
    ("ETHIOPIC", "Ethiopic"),
    ("BOPOMOFO", "Bopomofo"),
    ("YI ", "Yi"),
)
# pictographic blocks; a symbol (So) elsewhere (degree sign, copyright) is neutral
_EMOJI_RANGES: tuple[tuple[int, int], ...] = (
    (0x1F000, 0x1FAFF),  # mahjong .. symbols and pictographs extended-A
    (0x2600, 0x27BF),    # miscellaneous symbols, dingbats
    (0x2B00, 0x2BFF),    # arrows and stars used as emoji (⭐)
    (0x1F1E6, 0x1F1FF),  # regional indicators (flags)
)
# glue inside an emoji sequence: no script of its own, cut with the emoji it joins
_EMOJI_GLUE = frozenset({0x200D, 0xFE0F, 0xFE0E, 0x20E3}) | frozenset(range(0x1F3FB, 0x1F400)) \
    | frozenset(range(0xE0020, 0xE0080))

_MARK = "M"  # combining mark: takes the script of the letter it sits on
_OTHER_SCRIPT = re.compile(r"(.+?) (?:CAPITAL |SMALL )?(?:LETTER|SYLLABLE|IDEOGRAPH|CHARACTER)\b")
# Basic Latin to Latin Extended-B, combining diacriticals, Latin Extended Additional, general
# punctuation, super/subscripts, currency: only Latin letters and neutral characters
_LATIN_ONLY = re.compile("[\x00-\u024f\u0300-\u036f\u1e00-\u1eff\u2000-\u206f\u2070-\u209f\u20a0-\u20cf]*")
_CUT = "\x00"  # where strip() cut a run (normalized text has no NUL)
_ORPHAN = re.compile(r"(^|\s)(?:\x00[^\w\s]*)+(?=\s|$)")
_BEFORE_PUNCT = re.compile(r"\x00+(?=[^\w\s\x00])")


@functools.lru_cache(maxsize=8192)
def script_of(ch: str) -> str | None:
    """The script of one character: a letter's (or emoji's) script, ``"M"`` for a combining
    mark or emoji glue (it belongs to what precedes it), None for a neutral character."""
    o = ord(ch)
    if o in _EMOJI_GLUE:
        return _MARK
    cat = unicodedata.category(ch)
    if cat[0] == "M":
        return _MARK
    if cat == "So":
        if any(lo <= o <= hi for lo, hi in _EMOJI_RANGES):
            return EMOJI
        return None
    if cat[0] != "L":
        return None
    name = unicodedata.name(ch, "")
    for prefix, script in _NAME_PREFIXES:
        if name.startswith(prefix):
            return script
    if o >= 0x3400 and "IDEOGRAPH" in name:
        return "Han"  # extension blocks
    m = _OTHER_SCRIPT.match(name)
    if m is None or m.group(1) == "MODIFIER":
        return None  # signs that are letters (µ, ª), spacing modifiers, unnamed: neutral
    return m.group(1).title()  # another script: its own name ("TIFINAGH LETTER YA" -> "Tifinagh")


def latin_only(text: str) -> bool:
    """True when ``text`` holds no letter outside the Latin script and no emoji (a fast,
    conservative test: False may still be Latin only)."""
    return text.isascii() or _LATIN_ONLY.fullmatch(text) is not None


def runs(text: str) -> Iterator[tuple[str | None, str]]:
    """Maximal runs of ``text`` in one script, in order, as ``(script, run)``; neutral
    characters form runs of script None. Marks and emoji glue join the run before them."""
    cur: str | None = None
    start = 0
    for i, ch in enumerate(text):
        sc = script_of(ch)
        if sc == _MARK:
            continue
        if i > 0 and sc != cur:
            yield cur, text[start:i]
            start = i
        cur = sc
    if text:
        yield cur, text[start:]


def _units(script: str, run: str) -> int:
    if script == EMOJI:  # a ZWJ sequence (family, profession) is one emoji
        return sum(1 for i, ch in enumerate(run) if script_of(ch) == EMOJI and (i == 0 or run[i - 1] != "\u200d"))
    if script in SYLLABIC:
        return sum(1 for ch in run if script_of(ch) != _MARK)
    letters = sum(1 for ch in run if script_of(ch) != _MARK)
    return max(1, round(letters / _LETTERS_PER_UNIT))


def census(text: str) -> Counter[str]:
    """Spoken units per script in ``text`` (neutral characters are not counted)."""
    out: Counter[str] = Counter()
    if text.isascii():  # Latin letters and neutral characters only
        for word in "".join(ch if ch.isalpha() else " " for ch in text).split():
            out["Latin"] += max(1, round(len(word) / _LETTERS_PER_UNIT))
        return out
    for script, run in runs(text):
        if script is not None:
            out[script] += _units(script, run)
    return out


def strip(text: str, keep: Iterable[str]) -> tuple[str, Counter[str]]:
    """``text`` without the letters of scripts not in ``keep`` and without emoji, and the
    spoken units cut per script."""
    kept = set(keep)
    if "Latin" in kept and latin_only(text):
        return text, Counter()
    cut: Counter[str] = Counter()
    pieces: list[str] = []
    for script, run in runs(text):
        if script is None or script in kept:
            pieces.append(run)
        else:
            cut[script] += _units(script, run)
            pieces.append(_CUT)
    if not cut:
        return text, cut
    # punctuation a cut word leaves alone ("Hello. 你好。" -> "Hello." not "Hello. 。") goes with it
    out = _ORPHAN.sub(r"\1", "".join(pieces))
    out = _BEFORE_PUNCT.sub("", out).replace(_CUT, " ")  # "iPhone你好." -> "iPhone."
    return " ".join(out.split()), cut
