# ruff: noqa: RUF001 - Chinese numerals and punctuation are the subject here
"""SSML ``say-as``: how a number, date, code or name is read, in English and in Mandarin. Pure.

:func:`expand` returns the words a voice's front end then reads as ordinary text (``"4155550123"``
as telephone -> ``"four one five, five five five, ..."``; ``"重庆"`` is not touched). What each
``interpret-as`` does:

=====================  ==================================================  ===============================
interpret-as           English                                             Mandarin
=====================  ==================================================  ===============================
characters, spell-out  letter by letter, digit by digit (``A B C`` names)  digits 零..九, letters by name
cardinal, number       ``1,234`` -> one thousand two hundred thirty-four    一千二百三十四
ordinal                ``3`` or ``3rd`` -> third                            第三
digits                 digit by digit                                      digit by digit
telephone              digit groups, ``+`` plus                            digit groups, 1 read 幺
date (format mdy...)   March fifteenth, twenty twenty-four                 二零二四年三月十五日
time                   ten thirty pee em; ten o'clock                         十点三十分
currency               twelve dollars and fifty cents                      十二点五元
=====================  ==================================================  ===============================

An ``interpret-as`` not in the table, or a value it cannot read (``cardinal`` of ``"abc"``), is
returned unchanged: the text is kept, never lost.
"""

from __future__ import annotations

import re

__all__ = ["INTERPRETATIONS", "expand", "ordinal_words", "words"]

INTERPRETATIONS = ("characters", "spell-out", "cardinal", "number", "ordinal", "digits", "telephone", "date",
                   "time", "currency")

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORD_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}
_LETTERS = dict(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", (
    "eigh", "bee", "see", "dee", "ee", "eff", "gee", "aitch", "eye", "jay", "kay", "el", "em", "en", "oh", "pee",
    "cue", "ar", "ess", "tee", "you", "vee", "double you", "ex", "why", "zee"), strict=True))
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_ZH_DIGIT = "零一二三四五六七八九"
_CURRENCY_EN = {"$": ("dollar", "dollars", "cent", "cents"), "USD": ("dollar", "dollars", "cent", "cents"),
                "€": ("euro", "euros", "cent", "cents"), "EUR": ("euro", "euros", "cent", "cents"),
                "£": ("pound", "pounds", "penny", "pence"), "GBP": ("pound", "pounds", "penny", "pence"),
                "¥": ("yuan", "yuan", "fen", "fen"), "CNY": ("yuan", "yuan", "fen", "fen"),
                "RMB": ("yuan", "yuan", "fen", "fen"), "JPY": ("yen", "yen", "sen", "sen")}
_CURRENCY_ZH = {"$": "美元", "USD": "美元", "€": "欧元", "EUR": "欧元", "£": "英镑", "GBP": "英镑", "¥": "元",
                "￥": "元", "CNY": "元", "RMB": "元", "JPY": "日元"}
_NUM = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
_MAX_NUMBER = 10**15


def _below_1000(n: int) -> str:
    out: list[str] = []
    if n >= 100:
        out.append(f"{_ONES[n // 100]} hundred")
        n %= 100
    if n >= 20:
        out.append(_TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else ""))
    elif n or not out:
        out.append(_ONES[n])
    return " ".join(out)


def words(n: int) -> str:
    """An integer in English words (``-1234`` -> minus one thousand two hundred thirty-four)."""
    if n < 0:
        return "minus " + words(-n)
    if n < 1000:
        return _below_1000(n)
    out: list[str] = []
    for scale, name in _SCALES:
        if n >= scale:
            out.append(f"{words(n // scale)} {name}")
            n %= scale
    if n:
        out.append(_below_1000(n))
    return " ".join(out)


def ordinal_words(n: int) -> str:
    """An integer as an English ordinal (``21`` -> twenty-first)."""
    w = words(n)
    head, sep, last = w.rpartition("-" if "-" in w.split(" ")[-1] else " ")
    if last in _ORD_IRREGULAR:
        last = _ORD_IRREGULAR[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return f"{head}{sep}{last}"


def _number_en(s: str) -> str | None:
    s = s.strip()
    if not _NUM.match(s):
        return None
    neg = s.startswith("-")
    whole, _, frac = s.lstrip("+-").replace(",", "").partition(".")
    if int(whole) >= _MAX_NUMBER:
        return None
    out = words(int(whole))
    if frac:
        out += " point " + " ".join(_ONES[int(c)] for c in frac)
    return ("minus " + out) if neg else out


def _number_zh(s: str) -> str | None:
    from engine.zh_text import number

    s = s.strip()
    if not _NUM.match(s):
        return None
    return number(s)


def _characters(s: str, lang: str) -> str:
    out: list[str] = []
    for ch in s:
        if ch.isdigit() and ch.isascii():
            out.append(_ZH_DIGIT[int(ch)] if lang == "zh" else _ONES[int(ch)])
        elif ch.isascii() and ch.isalpha():
            out.append(_LETTERS[ch.upper()])
        elif not ch.isspace() and (ch.isalnum() or lang == "zh"):
            out.append(ch)
    return _join_zh(out) if lang == "zh" else " ".join(out)


def _join_zh(parts: list[str]) -> str:
    """Han and digit readings run together; a letter name keeps spaces around it."""
    out = ""
    for p in parts:
        if out and (p.isascii() or out[-1].isascii()):
            out += " "
        out += p
    return out


def _digits(s: str, lang: str, *, phone: bool = False) -> str | None:
    groups = re.findall(r"\+|\d+", s)
    if not any(g.isdigit() for g in groups):
        return None
    if lang == "zh":
        zh = [("加" if g == "+" else "".join(("幺" if phone and c == "1" else _ZH_DIGIT[int(c)]) for c in g))
              for g in groups]
        return "，".join(zh)
    en = ["plus" if g == "+" else " ".join(_ONES[int(c)] for c in g) for g in groups]
    return ", ".join(en)


def _year_en(y: int) -> str:
    if 2000 <= y <= 2009:
        return "two thousand" + (f" {_ONES[y % 10]}" if y % 10 else "")
    if 1100 <= y <= 2099 and y % 100:
        hi, lo = divmod(y, 100)
        return f"{words(hi)} {'oh ' + _ONES[lo] if lo < 10 else words(lo)}"
    if 1100 <= y <= 2099:
        return f"{words(y // 100)} hundred"
    return words(y)


def _date(s: str, fmt: str, lang: str) -> str | None:
    fmt = (fmt or "ymd" if re.match(r"^\d{4}", s.strip()) else fmt or "mdy").lower()
    nums = re.findall(r"\d+", s)
    if not fmt or len(nums) != len(fmt) or set(fmt) - set("ymd"):
        return None
    f = dict(zip(fmt, (int(n) for n in nums), strict=True))
    raw = dict(zip(fmt, nums, strict=True))
    if ("m" in f and not 1 <= f["m"] <= 12) or ("d" in f and not 1 <= f["d"] <= 31):
        return None
    if lang == "zh":
        from engine.zh_text import digits, number

        out = ""
        if "y" in f:
            out += digits(raw["y"]) + "年"
        if "m" in f:
            out += number(str(f["m"])) + "月"
        if "d" in f:
            out += number(str(f["d"])) + "日"
        return out
    if "m" in f and "d" in f:
        month, day = _MONTHS[f["m"] - 1], ordinal_words(f["d"])
        head = f"the {day} of {month}" if fmt.index("d") < fmt.index("m") else f"{month} {day}"
    elif "m" in f:
        head = _MONTHS[f["m"] - 1]
    elif "d" in f:
        head = "the " + ordinal_words(f["d"])
    else:
        head = ""
    if "y" in f:
        year = _year_en(f["y"])
        return f"{head}, {year}" if head else year
    return head


def _time(s: str, lang: str) -> str | None:
    m = re.match(r"^\s*(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?\s*([AaPp])?\.?\s*[Mm]?\.?\s*$", s)
    if m is None:
        return None
    h, mi, sec = int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)
    if h > 24 or mi > 59 or sec > 59:
        return None
    ampm = (m.group(4) or "").lower()
    if lang == "zh":
        from engine.zh_text import number

        head = {"a": "上午", "p": "下午"}.get(ampm, "")
        out = head + ("两" if h == 2 else number(str(h))) + "点"
        if mi:
            out += ("零" + _ZH_DIGIT[mi] if mi < 10 else number(str(mi))) + "分"
        if sec:
            out += ("零" + _ZH_DIGIT[sec] if sec < 10 else number(str(sec))) + "秒"
        return out
    out = words(h)
    if mi == 0:
        out += "" if ampm else " o'clock"
    else:
        out += f" oh {_ONES[mi]}" if mi < 10 else f" {words(mi)}"
    if sec:
        out += f" and {words(sec)} seconds"
    if ampm:
        out += f" {_LETTERS[ampm.upper()]} {_LETTERS['M']}"
    return out


def _currency(s: str, lang: str) -> str | None:
    m = re.match(r"^\s*([$€£¥￥]|[A-Z]{3})?\s*([+-]?[\d,]+(?:\.\d+)?)\s*([A-Z]{3})?\s*$", s)
    if m is None or not _NUM.match(m.group(2)):
        return None
    unit = m.group(1) or m.group(3) or ("¥" if lang == "zh" else "$")
    amount = m.group(2)
    if lang == "zh":
        from engine.zh_text import number

        a = amount.replace(",", "")
        if "." in a:
            a = a.rstrip("0").rstrip(".")
        return number(a) + _CURRENCY_ZH.get(unit, unit)
    names = _CURRENCY_EN.get(unit)
    whole, _, frac = amount.replace(",", "").lstrip("+").partition(".")
    if names is None or int(whole.lstrip("-") or 0) >= _MAX_NUMBER:
        return None
    w = int(whole)
    cents = int((frac + "00")[:2]) if frac else 0
    out = f"{words(w)} {names[0] if abs(w) == 1 else names[1]}"
    if cents:
        out += f" and {words(cents)} {names[2] if cents == 1 else names[3]}"
    return out


def expand(text: str, interpret_as: str, *, format: str = "", lang: str = "en") -> str:
    """What a voice should read for ``text`` said as ``interpret_as`` in ``lang`` (``en``/``zh``;
    any other reads as English). Unknown kinds and unreadable values return ``text`` unchanged."""
    kind = interpret_as.strip().lower()
    lang = "zh" if lang.lower().startswith(("zh", "cmn")) else "en"
    out: str | None
    if kind in ("characters", "spell-out", "letters", "verbatim"):
        out = _characters(text, lang)
    elif kind in ("cardinal", "number"):
        out = _number_zh(text) if lang == "zh" else _number_en(text)
    elif kind == "ordinal":
        m = re.match(r"^\s*(\d{1,15})(?:st|nd|rd|th)?\s*$", text)
        from engine.zh_text import number

        out = None if m is None else ("第" + number(m.group(1)) if lang == "zh" else ordinal_words(int(m.group(1))))
    elif kind == "digits":
        out = _digits(text, lang)
    elif kind == "telephone":
        out = _digits(text, lang, phone=True)
    elif kind == "date":
        out = _date(text, format, lang)
    elif kind == "time":
        out = _time(text, lang)
    elif kind == "currency":
        out = _currency(text, lang)
    else:
        out = None
    return text if out is None or not out.strip() else out
