"""The audio check: silence and blips are refused, speech is not, and it is cheap."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from engine.quality import audio_stats, check_audio, spoken_chars
from engine.voices import voice_info

SR = 24_000
TEXT = "Please call me back as soon as you get this message."  # 41 letters


def speechlike(seconds: float, sr: int = SR, level: float = 0.2) -> np.ndarray:
    """A voiced tone with syllable-rate pauses: about 70% of frames voiced, like the voices."""
    t = np.arange(int(seconds * sr)) / sr
    env = np.clip(np.sin(2 * np.pi * 3.0 * t) + 0.5, 0.0, 1.0)
    return (level * env * np.sin(2 * np.pi * 160 * t)).astype(np.float32)


def test_spoken_chars_counts_letters_and_digits_in_any_script() -> None:
    assert spoken_chars(TEXT) == 41
    assert spoken_chars("Room 101, please.") == 13
    assert spoken_chars("Café 中文!") == 6
    assert spoken_chars("...!?") == 0


def test_speech_of_a_plausible_length_passes() -> None:
    assert check_audio(speechlike(3.0), SR, TEXT, max_chars_per_s=45.0) is None
    assert check_audio(speechlike(1.5), SR, TEXT, speed=2.0, max_chars_per_s=45.0) is None  # twice as fast
    assert check_audio(speechlike(0.4), SR, "Hi.", max_chars_per_s=45.0) is None
    assert check_audio(speechlike(0.5, level=0.03), SR, "Hi.", max_chars_per_s=45.0) is None  # quiet, -33 dBFS


@pytest.mark.parametrize("samples", [
    np.zeros(SR * 2, np.float32),
    (np.random.default_rng(0).standard_normal(SR * 2) * 0.001).astype(np.float32),  # -60 dBFS hiss
    speechlike(2.0, level=0.005),  # -49 dBFS peak frames
], ids=["zeros", "hiss", "whisper"])
def test_near_silent_audio_is_refused(samples: np.ndarray) -> None:
    r = check_audio(samples, SR, TEXT, max_chars_per_s=45.0)
    assert r is not None and r.reason == "silent" and "near-silent" in r.message and "dBFS" in r.message


def test_audio_far_shorter_than_its_text_is_refused() -> None:
    """The issue's case: a 25-character sentence answered with 0.3 s."""
    r = check_audio(speechlike(0.3), SR, "A" * 25 + " " + TEXT, max_chars_per_s=45.0)
    assert r is not None and r.reason == "too_short" and "far shorter" in r.message and "66 letters" in r.message
    # the same audio at speed 4 could be right: the bound scales with speed
    assert check_audio(speechlike(0.6), SR, TEXT, speed=4.0, max_chars_per_s=45.0) is None
    # a long silence holding one blip of speech is as short as the blip
    x = np.zeros(SR * 5, np.float32)
    x[:2400] = speechlike(0.1)
    r = check_audio(x, SR, TEXT, max_chars_per_s=45.0)
    assert r is not None and r.reason == "too_short"


def test_empty_audio_is_refused() -> None:
    r = check_audio(np.zeros(0, np.float32), SR, TEXT, max_chars_per_s=45.0)
    assert r is not None and r.reason == "empty"


def test_stats_look_at_a_bounded_sample_of_frames() -> None:
    dur, voiced, loud = audio_stats(speechlike(60.0), SR)
    assert dur == pytest.approx(60.0) and 0.5 * dur < voiced < dur and -20 < loud < -10


def test_the_check_costs_microseconds_per_part() -> None:
    limit = voice_info("heart").max_chars_per_s  # type: ignore[union-attr]
    parts = {s: speechlike(s) for s in (1.0, 5.0, 20.0)}
    out = {}
    for seconds, x in parts.items():
        check_audio(x, SR, TEXT, max_chars_per_s=limit)
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            check_audio(x, SR, TEXT, max_chars_per_s=limit)
        out[f"us_per_part_{seconds:g}s"] = round((time.perf_counter() - t0) / n * 1e6, 2)
    print(json.dumps(out))
    assert max(out.values()) < 500  # loose for a loaded CI machine; typically ~10 us (engine/quality.py)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hibari", "piper"])
def test_no_false_refusal_on_the_held_out_english_corpus(backend: str) -> None:
    """Every sentence of the tests' English corpus, synthesized by each shipped voice, passes."""
    pytest.importorskip(backend)
    from engine import Audio, SynthItem, load_engine
    from tests.support.asr import SENTENCES

    engine = load_engine(backend, threads=2)
    try:
        voice = engine.default_voice
        info = voice_info(voice)
        assert info is not None and info.backend == backend and info.sample_rate == engine.sample_rate
        outs = engine.synthesize([SynthItem(t, voice) for t in SENTENCES])
        refused = []
        for text, a in zip(SENTENCES, outs, strict=True):
            assert isinstance(a, Audio), a
            r = check_audio(a.samples, a.sample_rate, text, max_chars_per_s=info.max_chars_per_s)
            if r is not None:
                refused.append((text, r.message))
        print(json.dumps({"backend": backend, "parts": len(SENTENCES), "refused": len(refused)}))
        assert refused == []
    finally:
        engine.close()
