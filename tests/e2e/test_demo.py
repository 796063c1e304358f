"""``ttsflow demo`` end to end: every demo request answered as it must be, audio on disk, intelligible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from streams.bench.corpus import LONG_TEXT, demo_corpus
from streams.settings import Settings
from tests.e2e.helpers import run_json

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def demo(stack_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("demo")
    code, report = run_json(["demo", "--json", "--no-stack-up", "--out", str(out)], timeout=300,
                            log=out / "demo.stderr")
    report["exit_code"] = code
    return report


def test_demo_answers_every_request_as_expected(demo: dict[str, Any]) -> None:
    items = demo_corpus("x")
    assert demo["problems"] == [] and demo["ok"] and demo["exit_code"] == 0
    assert demo["requests_ok"] == sum(1 for i in items if i.expect == "ok")
    assert demo["requests_failed"] == 1 and demo["failed_codes"] == {"blank": "empty_text"}
    assert demo["dlq_records"] == 1
    assert demo["duplicate_completions"] == 0
    assert demo["cache_hit_requests"] >= 1  # the repeated text at least
    assert demo["e2e_p50_ms"] > 0 and demo["e2e_p99_ms"] >= demo["e2e_p50_ms"]
    assert demo["timings"]["total_s"] < 180


def test_demo_writes_one_playable_file_per_ok_request(demo: dict[str, Any]) -> None:
    files = demo["files"]
    assert len(files) == demo["requests_ok"]
    for label, path in files.items():
        p = Path(path)
        assert p.parent == Path(demo["out_dir"]) and p.stem.startswith(f"demo-{demo['run_id']}-")
        samples, sr = sf.read(p, dtype="float32")
        assert sr >= 8000 and len(samples) / sr > 1.0, label
        assert float(np.sqrt(np.mean(samples**2))) > 1e-3, f"{label} is silent"
    long_s = sf.info(files["long"]).duration
    assert long_s > 60, f"a {len(LONG_TEXT)}-character text gave only {long_s:.1f}s of audio"
    # the repeat of a text is the same audio
    assert Path(files["hello"]).read_bytes() == Path(files["hello-repeat"]).read_bytes()


def test_long_text_comes_back_as_one_audio_with_its_words_in_order(demo: dict[str, Any]) -> None:
    """Every segment of the long text, joined in order: the recognizer's words align with the text."""
    import jiwer

    from tests.support.asr import normalize_text, recognize

    samples, sr = sf.read(demo["files"]["long"], dtype="float32")
    ref = normalize_text(LONG_TEXT)
    hyp = normalize_text(recognize(samples, sr))
    out = jiwer.process_words(ref, hyp)
    n_ref = len(ref.split())
    # An order-keeping alignment: segments joined out of order lose most of their hits.
    assert out.hits / n_ref > 0.7, f"only {out.hits}/{n_ref} words recognized in order (wer {out.wer:.2f})"
    # And both halves are there in order: the first words heard belong to the first sentences.
    first = set(normalize_text(LONG_TEXT[:300]).split())
    last = set(normalize_text(LONG_TEXT[-300:]).split())
    head, tail = hyp.split()[:40], hyp.split()[-40:]
    assert sum(w in first for w in head) > sum(w in last - first for w in head)
    assert sum(w in last for w in tail) > sum(w in first - last for w in tail)
