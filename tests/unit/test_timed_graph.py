"""engine.timed_graph: a store version's duration-output graph is made once, then read without ``onnx``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.timed_graph import FACTS_NAME, GRAPH_NAME, timed_graph


def _shipped_hibari() -> Path:
    from hibari.voices import voice_path

    return Path(voice_path("heart", download_missing=False))


@pytest.fixture
def version_dir(tmp_path: Path) -> Path:
    """A store version's directory: its ONNX file beside a manifest."""
    d = tmp_path / "hibari" / "0.2.1-int8"
    d.mkdir(parents=True)
    shutil.copyfile(_shipped_hibari(), d / "model.onnx")
    (d / "manifest.json").write_text("{}", encoding="utf-8")
    return d


def test_the_first_load_keeps_the_graph_and_a_later_one_reads_it_without_importing_onnx(version_dir: Path) -> None:
    made = timed_graph(version_dir / "model.onnx", "int8")
    assert isinstance(made.model, bytes) and made.durations is not None
    assert (version_dir / GRAPH_NAME).read_bytes() == made.model
    facts = json.loads((version_dir / FACTS_NAME).read_text(encoding="utf-8"))
    assert facts["durations"] == made.durations and facts["precision"] == "int8"

    code = ("import sys; from pathlib import Path; from engine.timed_graph import timed_graph; "
            f"t = timed_graph(Path({str(version_dir / 'model.onnx')!r})); "
            "print(t.model, t.durations, t.precision, 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(version_dir / GRAPH_NAME), made.durations, "int8", "False"]


def test_a_replaced_model_file_is_operated_on_again(version_dir: Path) -> None:
    src = version_dir / "model.onnx"
    first = timed_graph(src, "int8")
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the same name, another file
    again = timed_graph(src, "int8")
    assert isinstance(again.model, bytes) and again.model == first.model
    assert json.loads((version_dir / FACTS_NAME).read_text(encoding="utf-8"))["key"]["mtime_ns"] == st.st_mtime_ns + 10**9


def test_a_model_outside_the_store_is_operated_on_at_every_load_and_nothing_is_written(tmp_path: Path) -> None:
    src = tmp_path / "loose.onnx"
    shutil.copyfile(_shipped_hibari(), src)
    a, b = timed_graph(src), timed_graph(src)
    assert isinstance(a.model, bytes) and isinstance(b.model, bytes) and a.durations == b.durations
    assert a.precision == "int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loose.onnx"]


def test_hibari_from_the_kept_graph_speaks_and_times_words_as_from_the_surgery(version_dir: Path) -> None:
    from engine.base import SynthItem
    from engine.engine import Engine
    from engine.hibari import HibariBackend

    text = "The kept graph times every word the same."
    item = SynthItem(text=text, voice="heart", timestamps=True)
    fresh = Engine(HibariBackend(version_dir / "model.onnx", threads=1), max_batch=1).synthesize([item])[0]
    assert (version_dir / FACTS_NAME).is_file()
    kept = Engine(HibariBackend(version_dir / "model.onnx", threads=1), max_batch=1).synthesize([item])[0]
    assert np.array_equal(fresh.samples, kept.samples)
    assert fresh.words and kept.words == fresh.words
