"""hibari through the engine facade: intelligible, deterministic, per-item failures."""

from __future__ import annotations

import numpy as np
import pytest

from engine import Audio, Engine, Failure, SynthItem, load_engine
from engine.errors import ItemError, UnknownVoice
from tests.support.asr import SENTENCES, word_error_many


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = load_engine("hibari", threads=2)
    yield e
    e.close()


def _audio(r: Audio | Failure) -> Audio:
    assert isinstance(r, Audio), r
    return r


def test_loaded_model_reports_what_really_runs(engine: Engine) -> None:
    assert engine.info.name == "hibari"
    assert engine.info.precision == "int8"
    assert engine.info.provider == "CPUExecutionProvider"
    assert engine.voices == ("heart",) and engine.default_voice == "heart"
    assert engine.sample_rate == 24000
    assert not engine.native_batching
    assert engine.cold_start_s is not None and 0 < engine.cold_start_s < 60


@pytest.mark.slow
def test_hibari_is_intelligible_on_varied_sentences(engine: Engine) -> None:
    assert len(SENTENCES) >= 20
    results = [_audio(r) for r in engine.synthesize([SynthItem(s, "heart") for s in SENTENCES])]
    wer = word_error_many([r.samples for r in results], engine.sample_rate, SENTENCES)
    print(f"hibari int8 word error on {len(SENTENCES)} sentences: {wer:.3f}")
    assert wer <= 0.10


def test_a_bad_item_fails_alone_and_its_neighbours_are_unchanged(engine: Engine) -> None:
    good = [SynthItem("The first sentence is fine.", "heart"), SynthItem("So is the last one.", "heart")]
    mixed = engine.synthesize([good[0], SynthItem("   ", "heart"), SynthItem("Hello.", "emma"), good[1]])
    assert [type(r).__name__ for r in mixed] == ["Audio", "Failure", "Failure", "Audio"]
    assert mixed[1].code == "synthesis_failed"
    assert mixed[2].code == "unknown_voice" and "heart" in mixed[2].message
    alone = engine.synthesize(good)
    for a, b in zip([mixed[0], mixed[3]], alone, strict=True):
        assert np.array_equal(_audio(a).samples, _audio(b).samples)


def test_output_is_deterministic_finite_and_in_range(engine: Engine) -> None:
    item = SynthItem("Numbers like 42 and dates like May 5th are read aloud.", "heart")
    a, b = (_audio(engine.synthesize([item])[0]) for _ in range(2))
    assert np.array_equal(a.samples, b.samples)
    assert a.samples.dtype == np.float32 and np.all(np.isfinite(a.samples))
    assert np.max(np.abs(a.samples)) <= 1.0 and np.sqrt(np.mean(a.samples ** 2)) > 0.01
    assert 2.0 < a.duration_s < 8.0


def test_speed_changes_duration(engine: Engine) -> None:
    text = "Speaking faster makes the audio shorter."
    slow, normal, fast = (_audio(r).duration_s for r in engine.synthesize(
        [SynthItem(text, "heart", 0.75), SynthItem(text, "heart"), SynthItem(text, "heart", 1.5)]))
    assert slow > normal * 1.15 and fast < normal * 0.8


def test_empty_voice_means_default_and_prepare_raises_item_errors(engine: Engine) -> None:
    assert isinstance(engine.synthesize([SynthItem("Default voice.", "")])[0], Audio)
    with pytest.raises(UnknownVoice):
        engine.backend.prepare(SynthItem("Hi.", "fenrir"))
    with pytest.raises(ItemError):
        engine.backend.prepare(SynthItem("", "heart"))


def test_split_phases_match_synthesize(engine: Engine) -> None:
    items = [SynthItem(f"Sentence number {n} of the split test.", "heart") for n in range(3)]
    prepared = engine.prepare_many(items)
    assert not any(isinstance(p, Failure) for p in prepared)
    out: list[Audio | Failure] = [Failure("x", "x")] * 3
    for group in engine.plan(prepared):  # type: ignore[arg-type]
        batch = [prepared[i] for i in group]
        for i, r in zip(group, engine.postprocess_many(engine.infer_batch(batch), batch), strict=True):  # type: ignore[arg-type]
            out[i] = r
    for a, b in zip(out, engine.synthesize(items), strict=True):
        assert np.array_equal(_audio(a).samples, _audio(b).samples)


def test_punctuation_alone_is_a_short_pause_and_unspeakable_text_fails(engine: Engine) -> None:
    pause, chinese = engine.synthesize([SynthItem("...", "heart"), SynthItem("你好世界", "heart")])
    assert _audio(pause).duration_s < 0.6
    assert isinstance(chinese, Failure) and "nothing speakable" in chinese.message
