# ruff: noqa: RUF001, RUF002 - full-width forms and Chinese punctuation are the subject here
"""Chinese text normalization before G2P: digits and symbols to the words a Mandarin
speaker says. Pure; table-driven tests in ``tests/unit/test_zh_text.py``.

``normalize_zh(text)`` rewrites, in this order (earlier rules win over later ones):

1. full-width digits, Latin letters and ``％＋－．：／￥＄`` to their ASCII forms (the
   stage's NFKC does the same; the engine is also called directly);
2. numbers to read digit by digit: mobile numbers (``1[3-9]`` + 9 digits, with or
   without separators, the known failure of reading ``13812345678`` as a quantity),
   landlines and service numbers (``010-12345678``, ``400-820-8820``), anything after
   a code word (验证码, 编号, 订单号, 尾号, 工号, 电话 ...), and digit strings with a
   leading zero (``007``);
3. dates (``2024年3月15日``, ``2024-03-15``, ``2024/3/15``: the year digit by digit) and
   times (``10:30`` -> 十点三十分, ``8:05`` -> 八点零五分, ``2:00`` -> 两点);
4. money (``¥1,299.00`` -> 一千二百九十九元, ``$20`` -> 二十美元, ``€`` 欧元, ``£`` 英镑),
   percentages (``45.5%`` -> 百分之四十五点五), temperatures (``-5℃`` -> 零下五摄氏度),
   ranges (``3-5天`` -> 三到五天, ``3~5``), negative numbers (``-7`` -> 负七) and
   common units after a number (``km`` 公里, ``kg`` 公斤, ``m²`` 平方米 ...);
5. every other number as a quantity (cn2an's ``an2cn``: ``500`` -> 五百, ``100倍`` ->
   一百倍, decimals ``3.14`` -> 三点一四, thousands separators dropped), with ``2``
   before a measure word read 两 (两个, 两天).

What is ours and what is cn2an's: cn2an (MIT) turns one Arabic number into Chinese
numerals; the rules above, which number is a quantity and which is a string of digits,
are written here, because cn2an's own ``transform`` reads phone numbers and codes as
quantities (十三亿...), years as quantities in ISO dates, and ``10:30`` as 十:三十.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["digits", "normalize_zh", "number"]

_DIGIT = "零一二三四五六七八九"
_FULLWIDTH = {**{chr(0xFF10 + i): str(i) for i in range(10)},
              **{chr(0xFF21 + i): chr(0x41 + i) for i in range(26)},
              **{chr(0xFF41 + i): chr(0x61 + i) for i in range(26)},
              "％": "%", "＋": "+", "－": "-", "．": ".", "／": "/", "￥": "¥", "＄": "$",
              "～": "~", "﹣": "-", "−": "-", "–": "-"}
_FW = str.maketrans(_FULLWIDTH)

# words after which a number is a code, read digit by digit
_CODE_WORDS = ("验证码", "校验码", "动态码", "取件码", "提货码", "编号", "编码", "单号", "订单号", "运单号", "快递单号",
               "尾号", "工号", "账号", "帐号", "卡号", "密码", "学号", "房间号", "房号", "车牌号", "航班号", "车次",
               "邮编", "代码", "序列号", "批次号", "电话", "手机", "手机号", "号码", "热线", "拨打", "致电", "分机")
_MEASURE = "个位次天件本只条张种台辆家岁斤周名份杯瓶块双套项款层门道颗粒节段"
_UNITS: tuple[tuple[str, str], ...] = (  # longest first; only right after a number
    ("km/h", "公里每小时"), ("m/s", "米每秒"), ("km²", "平方公里"), ("m²", "平方米"), ("㎡", "平方米"),
    ("m³", "立方米"), ("km", "公里"), ("kg", "公斤"), ("cm", "厘米"), ("mm", "毫米"), ("ml", "毫升"), ("mL", "毫升"),
    ("mg", "毫克"), ("kW", "千瓦"), ("kWh", "千瓦时"), ("GB", "G"), ("MB", "兆"), ("TB", "T"), ("Hz", "赫兹"),
    ("ms", "毫秒"), ("min", "分钟"), ("h", "小时"), ("s", "秒"), ("g", "克"), ("m", "米"), ("L", "升"), ("t", "吨"),
)
_UNIT_RE = "|".join(re.escape(u) for u, _ in sorted(_UNITS, key=lambda x: -len(x[0])))
_UNIT_WORD = dict(_UNITS)

# a thousands-grouped number only when every group is whole (0,1000 is two numbers, not 0,100 and a 0)
_NUM = r"(?:[1-9]\d{0,2}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
_SEP = r"[-\s]?"


def digits(s: str) -> str:
    """Each digit as its own word (``0`` is 零); other characters are kept."""
    return "".join(_DIGIT[int(c)] if c.isdigit() else c for c in s)


def number(s: str) -> str:
    """One number (``1,299.50``, ``-7``, ``0.5``) as a quantity: 一千二百九十九点五."""
    import cn2an

    s = s.replace(",", "")
    neg = s.startswith("-")
    s = s.lstrip("+-")
    whole, _, frac = s.partition(".")
    out = str(cn2an.an2cn(whole or "0")) if len(whole) <= 16 else digits(whole)
    if frac:
        out += "点" + digits(frac)
    return ("负" + out) if neg else out


def _money(amount: str, word: str) -> str:
    a = amount.replace(",", "")
    if "." in a:
        a = a.rstrip("0").rstrip(".")
    return number(a) + word


def _time(h: str, m: str, s: str | None) -> str:
    hh = "两" if int(h) == 2 else number(h)
    out = hh + "点"
    if int(m):
        out += ("零" + _DIGIT[int(m)] if m.startswith("0") else number(m)) + "分"
    if s is not None and int(s):
        out += ("零" + _DIGIT[int(s)] if s.startswith("0") else number(s)) + "秒"
    return out


def _date(y: str, mo: str, d: str | None) -> str:
    out = digits(y) + "年" + number(str(int(mo))) + "月"
    return out + (number(str(int(d))) + "日" if d else "")


def _quantity(m: re.Match[str]) -> str:
    s, after = m.group(1), m.group(2) or ""
    if s == "2" and after and after[0] in _MEASURE:
        return "两" + after
    return number(s) + after


_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]
_CODE_RE = "|".join(sorted(_CODE_WORDS, key=len, reverse=True))

_RULES: tuple[_Rule, ...] = (
    # -- 2. digit strings -------------------------------------------------------------------
    (re.compile(rf"((?:{_CODE_RE})(?:是|为|:|：|\s)*)((?:\+?86[-\s]?)?[A-Za-z0-9][A-Za-z0-9-]*)"),
     lambda m: m.group(1) + digits(m.group(2).replace("-", " ").replace("+", "加"))),
    (re.compile(rf"(?<![\d.])(?:\+?86{_SEP})?1[3-9]\d{_SEP}\d{{4}}{_SEP}\d{{4}}(?![\d.])"),
     lambda m: digits(re.sub(r"[-\s]", "", m.group(0)).replace("+", "加"))),
    (re.compile(r"(?<![\d.])(?:0\d{2,3}-\d{7,8}|[48]00-?\d{3}-?\d{4}|9\d{4})(?![\d.%])"),
     lambda m: digits(m.group(0).replace("-", ""))),
    # -- 3. dates and times -----------------------------------------------------------------
    (re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?![\d])"),
     lambda m: _date(m.group(1), m.group(2), m.group(3))),
    (re.compile(r"(?<!\d)(\d{4})年"), lambda m: digits(m.group(1)) + "年"),
    (re.compile(r"(?<![\d.])([01]?\d|2[0-4])[:：]([0-5]\d)(?:[:：]([0-5]\d))?(?![\d])"),
     lambda m: _time(m.group(1), m.group(2), m.group(3))),
    # -- 4. money, percent, temperature, ranges, negatives, units ---------------------------
    (re.compile(rf"[¥￥]\s?({_NUM})(?:元)?"), lambda m: _money(m.group(1), "元")),
    (re.compile(rf"(?:US)?\$\s?({_NUM})(?:美元)?"), lambda m: _money(m.group(1), "美元")),
    (re.compile(rf"€\s?({_NUM})"), lambda m: _money(m.group(1), "欧元")),
    (re.compile(rf"£\s?({_NUM})"), lambda m: _money(m.group(1), "英镑")),
    (re.compile(rf"(?<![\d.])({_NUM})\s?(?:RMB|CNY)"), lambda m: _money(m.group(1), "元")),
    (re.compile(rf"(-?{_NUM})%\s?[-~]\s?(-?{_NUM})%"),
     lambda m: "百分之" + number(m.group(1)) + "到百分之" + number(m.group(2))),
    (re.compile(rf"(-?{_NUM})%"),
     lambda m: ("负" if m.group(1).startswith("-") else "") + "百分之" + number(m.group(1).lstrip("-"))),
    (re.compile(rf"(?<![\d.])-({_NUM})\s?(?:℃|°C|摄氏度)"), lambda m: "零下" + number(m.group(1)) + "摄氏度"),
    (re.compile(rf"(?<![\d.])({_NUM})\s?(?:℃|°C)"), lambda m: number(m.group(1)) + "摄氏度"),
    (re.compile(rf"(?<![\d.])-({_NUM})\s?度"), lambda m: "零下" + number(m.group(1)) + "度"),
    (re.compile(rf"(?<![\d.])({_NUM})\s?°"), lambda m: number(m.group(1)) + "度"),
    (re.compile(rf"(?<![\d.A-Za-z])({_NUM})\s?(-|~|到|至)\s?({_NUM})(?![\d.])"),
     lambda m: number(m.group(1)) + ("到" if m.group(2) in "-~" else m.group(2)) + number(m.group(3))),
    (re.compile(rf"(?<![\d.A-Za-z])-({_NUM})"), lambda m: number("-" + m.group(1))),
    (re.compile(rf"(?<![\d.])({_NUM})\s?({_UNIT_RE})(?![A-Za-z])"),
     lambda m: number(m.group(1)) + _UNIT_WORD[m.group(2)]),
    # digits read one by one (a leading zero), except a whole thousands group (1,000 is a quantity)
    (re.compile(r"(?<![\d.])(?!(?<=\d,)\d{3}(?![\d.]))(0\d+)(?![\d.])"), lambda m: digits(m.group(1))),
    (re.compile(rf"第({_NUM})"), lambda m: "第" + number(m.group(1))),
    # -- 5. the rest: quantities ------------------------------------------------------------
    (re.compile(rf"({_NUM})([^\s\d]?)"), _quantity),
)


def normalize_zh(text: str) -> str:
    """``text`` with every digit and number symbol spelled out as Mandarin words."""
    text = text.translate(_FW)
    if not any(c.isdigit() for c in text):
        return text
    for pattern, fn in _RULES:
        text = pattern.sub(fn, text)
    return text
