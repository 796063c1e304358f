# ruff: noqa: RUF001 - full-width letters are the subject here
"""``ttsflow synth --captions/--words``: a request's words placed across its segments, pauses and normalization."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine import decode
from engine.timing import words_of
from streams.bench.align import english_alignment, voiced_end_s
from streams.bench.asr_text import normalize_text
from streams.bench.corpus import ASR_SENTENCES
from streams.cli.synth import main

pytestmark = pytest.mark.slow


def _sentences(chars: int) -> list[str]:
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < chars:
        out.append(ASR_SENTENCES[len(out) % len(ASR_SENTENCES)])
    return out


def test_a_3000_character_request_is_timed_to_its_end(tmp_path: Path) -> None:
    sentences = _sentences(3000)
    text, last = " ".join(sentences), sentences[-1]
    wav, words_json, vtt = tmp_path / "a.wav", tmp_path / "a.json", tmp_path / "a.vtt"
    assert main([text, "-o", str(wav), "--words", str(words_json), "--captions", str(vtt), "--threads", "1"]) == 0
    words = json.loads(words_json.read_text(encoding="utf-8"))
    samples, sr = decode(wav.read_bytes())
    # every written word, in order, pointing at the text as given
    assert [(w["start"], w["end"]) for w in words] == words_of(text)
    assert all(text[w["start"]:w["end"]] == w["word"] for w in words)
    starts = [w["start_s"] for w in words]
    assert starts == sorted(starts) and words[-1]["end_s"] <= len(samples) / sr
    # the last word ends where the voice stops (the pauses between ~30 segments are counted)
    assert abs(words[-1]["end_s"] - voiced_end_s(samples, sr)) < 0.1
    # the last sentence, aligned on its own by pocketsphinx, starts its words where we say
    tail = [w for w in words if w["start"] >= len(text) - len(last)]
    t0 = max(0.0, tail[0]["start_s"] - 0.3)
    spoken = [x for w in tail for x in normalize_text(w["word"]).split()]
    ref = english_alignment(samples[int(t0 * sr):], sr, spoken)
    assert [r[0] for r in ref] == spoken
    errs, k = [], 0
    for w in tail:
        n = len(normalize_text(w["word"]).split())
        errs.append(abs(w["start_s"] - (t0 + ref[k][1])))
        k += n
    assert float(np.median(errs)) < 0.06, errs
    cues = vtt.read_text(encoding="utf-8")
    assert cues.startswith("WEBVTT\n\n") and cues.count(" --> ") >= 30


def test_offsets_point_into_the_text_as_sent_even_after_normalization(tmp_path: Path) -> None:
    text = "Ｈｅｌｌｏ   there,\n\nfriend… The\u200b answer is 42."  # full-width, spaces, a newline, a zero-width space
    words_json = tmp_path / "w.json"
    assert main([text, "-o", str(tmp_path / "w.wav"), "--words", str(words_json), "--threads", "1"]) == 0
    words = json.loads(words_json.read_text(encoding="utf-8"))
    assert [w["word"] for w in words] == ["Ｈｅｌｌｏ", "there", "friend", "The", "answer", "is", "42"]
    assert all(text[w["start"]:w["end"]] == w["word"] for w in words)


def test_captions_need_a_vtt_or_srt_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hello", "-o", str(tmp_path / "x.wav"), "--captions", str(tmp_path / "x.txt")]) == 2
    assert "captions go to a .vtt or .srt file" in capsys.readouterr().err
