"""``ttsflow synth``: a person's first try of a voice, and one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import decode
from streams.cli.synth import main


@pytest.mark.parametrize(("argv", "needle"), [
    (["", "-o", "x.wav"], "empty"),
    (["hello", "-o", "x.wav", "--backend", "nope"], "unknown backend 'nope'"),
    (["hello", "-o", "x.mp3"], "unknown format 'mp3'"),
    (["hello", "-o", "x.wav", "--voice", "emma"], "unknown voice 'emma'"),
    (["hello", "-o", "x.wav", "--precision", "fp16"], "ships only int8"),
    (["hello", "-o", "x.wav", "--speed", "9"], "speed"),
    (["hello"], "required"),
])
def test_bad_input_is_one_line_and_non_zero(argv: list[str], needle: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and err.startswith("ttsflow synth: ")
    assert not (tmp_path / "x.wav").exists()


def test_text_over_the_limit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTS_MAX_TEXT_CHARS", "10")
    assert main(["eleven chars", "-o", str(tmp_path / "x.wav")]) == 2
    assert "over the limit of 10" in capsys.readouterr().err


def test_long_text_is_split_spoken_and_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "speech.flac"
    assert main(["Hello there. This is the second sentence! And a third?", "-o", str(out),
                 "--sample-rate", "16000"]) == 0
    samples, sr = decode(out.read_bytes())
    assert sr == 16000 and 3.0 < len(samples) / sr < 12.0
    assert "3 segment(s)" in capsys.readouterr().err
