"""English text as a recognizer writes it: lower case, digits as words, no punctuation.

Shared by the intelligibility tests (``tests/support/asr.py``) and the word-timing
benchmark (:mod:`streams.bench.align`), so both compare words the same way.
"""

from __future__ import annotations

import re

__all__ = ["normalize_text"]

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _number_words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + _number_words(rest))
    if n < 1_000_000:
        rest = n % 1000
        return _number_words(n // 1000) + " thousand" + ("" if rest == 0 else " " + _number_words(rest))
    return " ".join(_ONES[int(d)] for d in str(n))


def normalize_text(text: str) -> str:
    """Lower case, digits as words, apostrophes kept inside words, other punctuation gone."""
    t = text.lower().replace("\u2019", "'")
    t = re.sub(r"\d+", lambda m: f" {_number_words(int(m.group()))} ", t.replace(",", " "))
    t = re.sub(r"[^a-z' ]+", " ", t)
    t = re.sub(r"(?<![a-z])'|'(?![a-z])", " ", t)
    return " ".join(t.split())
