# ruff: noqa: RUF001 - Chinese and Japanese text are the subject here
"""The per-language voice map of a request (``voices``): its schema, the stage's checks (stable
codes), the language split and which voice speaks each segment, the cache key, and the kokoro
front end reading a segment in the language the stage cut it as (pure; no model)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.languages import language_runs
from schemas import Rejection, Segment, decode_request, decode_segment, decode_segment_event
from schemas.errors import InvalidField
from streams.settings import Settings
from streams.stage import voicemap
from streams.stage.core import StageCore, served_voices
from streams.stage.text import normalize

S = Settings().replace(backends="hibari,kokoro", backend="kokoro", voice="")
ZH, JA, EN = "您的订单已经发货，预计明天下午送达。", "ご注文の商品は明日の午後に届く予定です。", "Thank you for your patience."


def _stage(**kw: Any) -> StageCore:
    s = S.replace(**kw) if kw else S
    return StageCore(s.stage, s.kafka, s.engine, voices=served_voices(s.engine), clock=lambda: 1.0)


def _handle(c: StageCore, text: str, **fields: Any) -> Any:
    raw = json.dumps({"request_id": "r-1", "user_id": "alice", "text": text, **fields}).encode()
    return c.handle(b"alice", raw, partition=0, offset=0, timestamp_ms=None, seen={})


def _segments(c: StageCore, text: str, **fields: Any) -> list[Segment]:
    out = _handle(c, text, **fields)
    assert out.kind == "segments", decode_segment_event(out.records[0].value)
    return [decode_segment(r.value) for r in out.records]


def _refused(c: StageCore, text: str, **fields: Any) -> Rejection:
    out = _handle(c, text, **fields)
    rej = decode_segment_event(out.records[0].value)
    assert out.kind == "failed" and isinstance(rej, Rejection), rej
    return rej


# -- the schema ---------------------------------------------------------------------------------

def test_a_request_without_a_map_decodes_as_before_and_a_map_is_kept() -> None:
    base = {"request_id": "r", "user_id": "u", "text": "hi"}
    assert decode_request(json.dumps(base)).voices is None
    req = decode_request(json.dumps({**base, "voices": {"ja": "jf_alpha", "en": "heart"}}))
    assert req.voices == {"ja": "jf_alpha", "en": "heart"}


@pytest.mark.parametrize("voices", [{"Japanese": "jf_alpha"}, {"ja": ""}, {"ja": 3}, ["jf_alpha"],
                                    {f"l{c}": "heart" for c in "abcdefghi"}])
def test_a_malformed_map_is_an_invalid_field_naming_voices(voices: Any) -> None:
    with pytest.raises(InvalidField) as e:
        decode_request(json.dumps({"request_id": "r", "user_id": "u", "text": "hi", "voices": voices}))
    assert e.value.field == "voices"


# -- the stage's checks: stable codes -------------------------------------------------------------

@pytest.mark.parametrize(("voices", "code", "named"), [
    ({"ko": "zf_xiaobei"}, "unsupported_language", "'ko'"),           # a language the stage does not cut by
    ({"ja": "nobody"}, "unknown_voice", "'nobody'"),                  # not a served voice
    ({"ja": "jf_alpha(2)+nobody"}, "unknown_voice", "'nobody'"),      # a mix with an unknown part
    ({"ja": "jf_alpha+heart"}, "unknown_voice", "'heart'"),           # a mix across backends
    ({"zh": "heart"}, "unsupported_language", "'heart' speaks en-US, not Mandarin"),  # wrong language
    ({"ja": "heart"}, "unsupported_language", "not Japanese"),
])
def test_a_bad_map_is_a_failed_request_with_a_stable_code(voices: dict[str, str], code: str, named: str) -> None:
    rej = _refused(_stage(), ZH + JA, voice="zf_xiaobei", voices=voices)
    assert rej.error.code == code and named in rej.error.message and "voices." in rej.error.message, rej.error


def test_a_voice_of_a_backend_not_served_is_unknown() -> None:
    rej = _refused(_stage(backends="kokoro"), EN, voices={"en": "heart"})
    assert rej.error.code == "unknown_voice" and "'heart'" in rej.error.message


def test_ssml_and_pieces_take_no_map() -> None:
    c = _stage()
    rej = _refused(c, "<speak>您好</speak>", text_type="ssml", voices={"zh": "zf_xiaobei"})
    assert rej.error.code == "invalid_field" and rej.error.message.startswith("voices:")
    raw = json.dumps({"request_id": "p-1", "user_id": "alice", "text": "您好", "seq": 0,
                      "voices": {"zh": "zf_xiaobei"}}).encode()
    out = c.handle(b"alice", raw, partition=0, offset=0, timestamp_ms=None, seen={}, opened=_NoOpen())
    assert out.code == "invalid_field", out


class _NoOpen:
    def get(self, request_id: str, /) -> None:
        return None

    def user_open(self) -> int:
        return 0

    def all_open(self) -> int:
        return 0


# -- the split and each segment's voice ------------------------------------------------------------

def test_each_language_run_is_spoken_by_its_mapped_voice_the_rest_by_the_requests() -> None:
    segs = _segments(_stage(), ZH + JA + EN, voice="zf_xiaobei", voices={"ja": "jf_alpha", "en": "heart"})
    assert [(s.text, s.voice, s.model, s.lang) for s in segs] == [
        (normalize(ZH), "zf_xiaobei", "kokoro", "zh"), (JA, "jf_alpha", "kokoro", "ja"), (EN, "heart", "hibari", "en")]
    assert segs[-1].parts == [s.hash for s in segs] and {s.total for s in segs} == {3}


def test_a_switch_inside_a_sentence_is_cut_there_and_runs_of_one_voice_stay_one_segment() -> None:
    c = _stage()
    text = "我们明天见，see you tomorrow。今日は晴れです。"
    split = _segments(c, text, voice="zf_xiaobei", voices={"en": "heart"})
    assert [(s.voice, s.lang) for s in split] == [("zf_xiaobei", "zh"), ("heart", "en"), ("zf_xiaobei", "ja")]
    # the map names the request's own voice for English: zh and en are one run again, its languages the voice's
    joined = _segments(c, text, voice="zf_xiaobei", voices={"en": "zf_xiaobei", "ja": "jf_alpha"})
    assert [(s.voice, s.lang) for s in joined] == [("zf_xiaobei", None), ("jf_alpha", "ja")]
    assert joined[0].text.replace(" ", "") == "我们明天见,seeyoutomorrow。"


def test_an_unmapped_japanese_run_of_a_request_naming_no_voice_goes_to_a_japanese_style() -> None:
    segs = _segments(_stage(), ZH + JA, voices={"zh": "zf_xiaoyi"})
    assert [(s.voice, s.lang) for s in segs] == [("zf_xiaoyi", "zh"), ("jf_alpha", "ja")]


def test_a_mapped_mix_is_spelled_one_way() -> None:
    segs = _segments(_stage(), ZH + JA, voice="zf_xiaobei", voices={"ja": "jf_alpha (2)+jm_kumo"})
    assert segs[1].voice == "jf_alpha(2)+jm_kumo(1)"


def test_the_map_changes_the_cache_key_and_no_map_keeps_todays_keys() -> None:
    c = _stage()
    plain = _segments(c, ZH, voice="zf_xiaobei")
    again = _segments(c, ZH, voice="zf_xiaobei", request_id="r-2")
    assert plain[0].hash == again[0].hash and plain[0].lang is None
    # the same text and voice read as a run of the map: its language is keyed (what is spoken is what is keyed)
    mapped = _segments(c, ZH, voice="zf_xiaobei", voices={"ja": "jf_alpha"})
    assert mapped[0].voice == "zf_xiaobei" and mapped[0].lang == "zh" and mapped[0].hash != plain[0].hash
    other = _segments(c, ZH + JA, voice="zf_xiaobei", voices={"ja": "jm_kumo"})
    assert other[1].hash != _segments(c, ZH + JA, voice="zf_xiaobei", voices={"ja": "jf_alpha"})[1].hash


def test_a_run_the_voice_cannot_speak_is_unsupported_a_few_foreign_words_dropped() -> None:
    c = _stage()
    rej = _refused(c, ZH + "Hello 안녕하세요 여러분 반갑습니다.", voice="zf_xiaobei", voices={"en": "heart"})
    assert rej.error.code == "unsupported_language" and "'heart'" in rej.error.message
    segs = _segments(c, ZH + "Thank you 여러분 very much.", voice="zf_xiaobei", voices={"en": "heart"})
    assert [(s.voice, s.text) for s in segs] == [("zf_xiaobei", normalize(ZH)), ("heart", "Thank you very much.")]


def test_timestamps_sources_point_into_the_text_as_sent() -> None:
    text = ZH + " " + EN
    segs = _segments(_stage(), text, voice="zf_xiaobei", voices={"en": "heart"}, timestamps=True)
    assert [s.voice for s in segs] == ["zf_xiaobei", "heart"]
    for s in segs:
        assert s.source is not None and text[s.source.start:].startswith(s.text[:5].replace(",", "，"))


@given(st.lists(st.sampled_from([ZH, JA, EN, "東京都庁。", "2024年。", " ", "OK, "]), min_size=1, max_size=8),
       st.sampled_from(["zh", "ja"]))
def test_runs_lose_nothing_and_join_keeps_order(parts: list[str], primary: str) -> None:
    text = "".join(parts)
    runs = voicemap.runs(text, {"ja": "jf_alpha"}, primary)
    assert "".join(r.text for r in runs) == text
    assert all(a.lang != b.lang for a, b in itertools.pairwise(runs))
    assert all(r.voice == ("jf_alpha" if r.lang == "ja" else None) for r in runs)
    joined = voicemap.join(runs)
    assert "".join(r.text for r in joined) == text
    assert all(a.voice != b.voice for a, b in itertools.pairwise(joined))
    assert [lang for _, lang in language_runs(text, primary)] == [r.lang for r in runs]


# -- the kokoro front end follows the stage's language --------------------------------------------

def test_kokoro_reads_a_segment_in_the_language_the_stage_cut_it_as() -> None:
    """A clause of Han characters alone is Japanese beside Japanese: the stage keys it ``ja`` and the
    front end must read it so even when a Mandarin style speaks it (no neighbour in its own segment)."""
    pytest.importorskip("pyopenjtalk")
    from engine.kokoro import KokoroBackend

    backend = KokoroBackend.__new__(KokoroBackend)  # the front end only: no model
    calls: list[tuple[str, str]] = []

    def read(clause: str, lang: str) -> str:
        calls.append((clause, lang))
        return lang

    backend._clause_phonemes = read  # type: ignore[method-assign]
    backend.default_voice = "zm_yunjian"
    assert backend.phonemize("東京都庁。", "zf_xiaobei", "ja") == "ja"
    assert backend.phonemize("東京都庁。", "zf_xiaobei") == "zh"  # without a language: the voice's own
    assert calls == [("東京都庁。", "ja"), ("東京都庁。", "zh")]
    segs = _segments(_stage(), "今日は晴れです。東京都庁。", voice="jf_alpha", voices={"ja": "zf_xiaobei"})
    assert [(s.voice, s.lang) for s in segs] == [("zf_xiaobei", "ja"), ("zf_xiaobei", "ja")]


# -- the CLI's --voices --------------------------------------------------------------------------

def test_say_voices_flag_parses_pairs_and_mixes() -> None:
    from streams.client.cli import parse_voice_map

    assert parse_voice_map([]) is None
    assert parse_voice_map(["ja=jf_alpha(2)+jm_kumo, en=heart", "zh=zf_xiaobei"]) == {
        "ja": "jf_alpha(2)+jm_kumo", "en": "heart", "zh": "zf_xiaobei"}
    for bad in (["ja"], ["ja="], ["ja=jf_alpha,ja=jm_kumo"]):
        with pytest.raises(ValueError, match="--voices"):
            parse_voice_map(bad)


# -- bench engine --mixed --switch-cost on a fake front end -------------------------------------

def test_switch_cost_charges_each_switch_its_front_end_work_and_compares_the_models_work() -> None:
    """A fake front end that spins 2 ms of CPU per language switch: the benchmark must find ~2 ms per
    switch against the grouped control (mixed: 5 switches, grouped: 2), and the same model work."""
    import time as _time
    from types import SimpleNamespace

    from engine.base import Prepared, SynthItem
    from streams.bench.mixed import switch_cost

    def spin(seconds: float) -> None:
        end = _time.thread_time() + seconds
        while _time.thread_time() < end:
            pass

    class Front:
        def phonemize(self, text: str, voice: str | None = None) -> str:
            runs = language_runs(text, "zh")
            spin(0.002 * (len(runs) - 1))
            return " ".join(t for t, _ in runs)

        def prepare(self, item: SynthItem) -> Prepared:
            return Prepared(item=item, payload=[item.text], length=len(item.text))

        def style(self, voice: str) -> object:
            return voice

    out = switch_cost(SimpleNamespace(backend=Front()), voice="zf_xiaobei", runs=3, log=lambda _: None, texts=2)
    assert out["samples"] == 6 and out["model_same_work"] is True and out["model_tokens_max_diff"] == 0
    assert 1.5 <= out["switch_cpu_ms_p50"] <= 4.0, out
    assert out["ok"] is True and out["voice_switch_style_us_p50"] >= 0
