# ruff: noqa: RUF001, RUF003 - CJK characters and punctuation are the subject here
"""Which language reads each part of a text: Mandarin (``zh``), Japanese (``ja``) or English (``en``). Pure.

Kokoro's front end (:mod:`engine.kokoro`) reads each clause with its language's G2P, and the
stage cuts a request with a per-language voice map at the same places
(:mod:`streams.stage.voicemap`), so both use these functions. Guarantees:

- :func:`clause_languages` and :func:`language_runs` lose nothing and reorder nothing: their
  pieces joined are the text;
- neighbouring pieces have different languages (runs of one language are one piece);
- the same text and ``primary`` always give the same pieces (no state, no model).
"""

from __future__ import annotations

import re

__all__ = ["LANGUAGES", "clause_languages", "has_cjk", "language_runs", "primary_language"]

# the languages a text is cut into, the one a text without Han or kana is read in last
LANGUAGES: tuple[str, ...] = ("zh", "ja", "en")
_CJK = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")
_KANA = re.compile(r"[\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f]")

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Characters of everyday Mandarin that Japanese does not write: simplified forms (记, 门, 车 ...;
# Japanese writes 記, 門, 車) and particles; none of them is also a Japanese shinjitai form
_ZH_ONLY = re.compile(
    "[们这说么吗呢个对时为过让从见请问谢样给长门间发现题经务业东车马鱼鸟书买卖语话认识应该气电开关单货预计处码钟效录质报总线种"
    "运动员赛举价润增联团队确收园读实论您你很哪吧啊欢记证带钱银铁错阅闻闭讲设许词试诉译议订讨训饭馆红约级终结绍细网页顺领风飞"
    "观视规亲贵费资赶边还进远连选适闪阶际陆陈随难鸡头农华历厅县变听响图块坚备复够岁币师帮广庆库张归态怀战户扑执扩扫扬护拥择换"
    "显晓晚暂杂权杨极构标树桥检毕汇汉沟泽洁测济浏涨热爱爷牵猎环畅疗监盖盘矿离积穷签简类粮紧纪纸练组绑绕继续绿维综缓缩罢职肃胜脑腊艺节药营萝虑补]")
# everyday Mandarin words written with characters Japanese also writes
_ZH_WORDS = re.compile("今天|明天|昨天|后天|可以|已经|因为|所以|但是|就是|知道|怎么|不是|一下|一个|有点")
# Japanese-only kanji and the iteration mark
_JA_ONLY = re.compile("[々〆込働畑峠匂枠栃]")
# a clause ends after 。！？!?；;：: a newline, or a comma that is not inside a number
_CLAUSE = re.compile(r"(?<=[。．！？!?；;：\n、，])|(?<=[,.:])(?!\d)")


def primary_language(voice: str) -> str:
    """``ja`` for Kokoro's Japanese styles (``jf_``/``jm_``, or a mix led by one), else ``zh``: the
    language a clause of Han characters alone is read in when no neighbour tells."""
    return "ja" if voice[:1] == "j" else "zh"


def clause_languages(text: str, primary: str = "zh") -> list[tuple[str, str]]:
    """``text`` cut into clauses (after sentence punctuation, and after commas and colons that
    are not inside a number), each with the language that reads it, neighbours of one language
    merged. A clause is:

    - ``ja`` if it has kana (hiragana, katakana) or a Japanese-only kanji (``々``, ``込``...);
    - ``zh`` if it has a character of everyday Mandarin that Japanese does not write
      (simplified forms and particles: ``们``, ``这``, ``吗``, ``东``, ``说``...) or an everyday
      Mandarin word (``今天``, ``可以``, ``已经``...);
    - ``en`` if it has Latin letters and no Han or kana;
    - Han characters and none of the above (``東京都庁。``, ``上午十点。``): the language of the
      nearest CJK clause before it, else after it, else ``primary`` (the voice's own language);
    - no letters at all (digits, symbols): joins the clause before it.

    Pure; the cost of a switch is this and another G2P, never another model.
    """
    pieces = [c for c in _CLAUSE.split(text) if c]
    langs: list[str | None] = []
    for clause in pieces:
        if _KANA.search(clause) or _JA_ONLY.search(clause):
            langs.append("ja")
        elif _ZH_ONLY.search(clause) or _ZH_WORDS.search(clause):
            langs.append("zh")
        elif _HAN.search(clause):
            langs.append(None)
        elif re.search(r"[A-Za-z]", clause):
            langs.append("en")
        else:
            langs.append("")
    cjk = [i for i, lang in enumerate(langs) if lang in ("ja", "zh")]
    out: list[tuple[str, str]] = []
    for i, (clause, lang) in enumerate(zip(pieces, langs, strict=True)):
        if lang is None:
            before = [j for j in cjk if j < i]
            after = [j for j in cjk if j > i]
            near = before[-1] if before else (after[0] if after else None)
            lang = langs[near] if near is not None else primary
        elif lang == "":
            lang = out[-1][1] if out else primary
        assert lang is not None
        if out and out[-1][1] == lang:
            out[-1] = (out[-1][0] + clause, lang)
        else:
            out.append((clause, lang))
    return out


def has_cjk(text: str) -> bool:
    """Whether ``text`` has Han or kana (text without them is English to the kokoro front end)."""
    return _CJK.search(text) is not None


def language_runs(text: str, primary: str = "zh") -> list[tuple[str, str]]:
    """``text`` as runs of one language each: one English run for text without Han or kana
    (however many clauses), else :func:`clause_languages`."""
    if not has_cjk(text):
        return [(text, "en")] if text else []
    return clause_languages(text, primary)
