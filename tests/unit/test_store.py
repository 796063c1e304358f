"""The versioned model store: versions appear whole, ``current`` moves atomically, files are verified."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engine.store import ModelStore, StoreError


def test_shipped_hibari_is_installed_on_first_use(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    mv = store.current("hibari")
    assert mv.version.endswith("-int8") and mv.precision == "int8"
    assert store.current_name("hibari") == mv.version
    manifest = json.loads((mv.dir / "manifest.json").read_text())
    assert {"model", "version", "precision", "sha256", "source", "created_at"} <= set(manifest)
    assert manifest["model"] == "hibari" and len(manifest["sha256"]) == 64
    store.verify(mv)
    # Idempotent: a second call neither duplicates nor moves anything.
    assert store.install_shipped("hibari").dir == mv.dir
    assert [v.version for v in store.versions("hibari")] == [mv.version]


def test_use_moves_current_and_refuses_unknown_versions(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    shipped = store.install_shipped("hibari")
    other = store.add("hibari", "9.9-test", write=lambda p, _c: p.write_bytes(shipped.onnx_path.read_bytes()) and None,
                      precision="int8", source="test")
    store.use("hibari", other.version)
    assert store.current("hibari").version == "9.9-test"
    assert store.current_name("hibari") == "9.9-test" and store.current_pinned("hibari")
    with pytest.raises(StoreError, match="no version hibari/nope"):
        store.use("hibari", "nope")
    assert store.current_name("hibari") == "9.9-test"          # a refused use changes nothing
    assert not [p for p in (tmp_path / "hibari").iterdir() if p.name.startswith(".current")]


def _fake_old_shipped(store: ModelStore, version: str) -> None:
    """What an earlier ttsflow left: a shipped install (another version name) made current."""
    shipped = store.install_shipped("hibari")
    store.add("hibari", version, write=lambda p, _c: p.write_bytes(shipped.onnx_path.read_bytes()) and None,
              precision="int8", source="shipped: hibari-tts 0.0.1 (heart)")
    (store.root / "hibari" / "current").write_text(version + "\n")  # the one-line file of before


def test_an_upgrade_serves_the_new_shipped_model_unless_a_person_pinned_another(tmp_path: Path) -> None:
    """CI's store kept kokoro/0.1.0-int8 current from before the Mandarin styles shipped, and the
    demo's Mandarin requests failed with unknown_voice: an automatic choice follows the shipped model."""
    store = ModelStore(tmp_path)
    new = store.install_shipped("hibari").version
    _fake_old_shipped(store, "0.0.1-int8")
    assert store.current_name("hibari") == "0.0.1-int8" and not store.current_pinned("hibari")
    assert store.current("hibari").version == new                  # what a worker loads at start
    assert store.current_name("hibari") == new and not store.current_pinned("hibari")
    # A person's choice stays, through install_shipped and current() alike.
    store.use("hibari", "0.0.1-int8")
    assert store.install_shipped("hibari").version == new
    assert store.current("hibari").version == "0.0.1-int8" and store.current_pinned("hibari")
    # A one-line file naming a version that is not a shipped install was a person's choice too.
    conv = store.add("hibari", "9.9-fp32", write=lambda p, _c: p.write_bytes(b"x") and None,
                     precision="fp32", source="converted from hibari/" + new)
    (tmp_path / "hibari" / "current").write_text(conv.version + "\n")
    assert store.current_pinned("hibari") and store.current_name("hibari") == "9.9-fp32"
    store.install_shipped("hibari")
    assert store.current_name("hibari") == "9.9-fp32"


def test_reading_current_without_install_never_moves_it(tmp_path: Path) -> None:
    """A running worker's reload watcher reads ``current`` and must not rewrite it."""
    store = ModelStore(tmp_path)
    _fake_old_shipped(store, "0.0.1-int8")
    assert store.current("hibari", install=False).version == "0.0.1-int8"
    assert store.current_name("hibari") == "0.0.1-int8"


def test_a_version_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)

    def failing(path: Path, _config: Path | None) -> None:
        path.write_bytes(b"half a model")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        store.add("hibari", "1.0-broken", write=failing, precision="fp32", source="test")
    assert store.versions("hibari") == []
    assert not list((tmp_path / "hibari").iterdir())           # no temporary directory left behind
    store.add("hibari", "1.0", write=lambda p, _c: p.write_bytes(b"x") and None, precision="fp32", source="t")
    with pytest.raises(StoreError, match="exists already"):
        store.add("hibari", "1.0", write=lambda p, _c: p.write_bytes(b"y") and None, precision="fp32", source="t")
    for bad in ("../escape", "current", ".hidden", ""):
        with pytest.raises(StoreError, match="bad version name"):
            store.add("hibari", bad, write=lambda p, _c: None, precision="fp32", source="t")


def test_verify_catches_a_truncated_model(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    mv = store.install_shipped("hibari")
    data = mv.onnx_path.read_bytes()
    mv.onnx_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="does not match its manifest"):
        store.verify(mv)
    mv.onnx_path.unlink()
    with pytest.raises(StoreError, match="missing"):
        store.verify(mv)


def test_unknown_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unknown model 'vits'"):
        ModelStore(tmp_path).versions("vits")


def test_concurrent_first_use_installs_once(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    got: list[str] = []
    errors: list[BaseException] = []

    def install() -> None:
        try:
            got.append(store.install_shipped("hibari").version)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=install) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(got)) == 1
    assert len(store.versions("hibari")) == 1


def test_convert_writes_a_checked_new_version_without_moving_current(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    seen: list[Path] = []

    def check(path: Path, _config: Path | None) -> dict[str, object]:
        seen.append(path)
        assert path.is_file()                                   # the check sees the converted file
        return {"summary": {"envelope_corr_min": 1.0}}

    mv, report = store.convert("hibari", "fp32", check=check)
    assert mv.version.endswith("-fp32") and mv.precision == "fp32"
    assert report.fixes["matmuls_dequantized"] > 0
    assert mv.manifest.extra["check"]["summary"]["envelope_corr_min"] == 1.0
    assert mv.manifest.source.startswith("converted from hibari/")
    assert store.current_name("hibari").endswith("-int8")       # converting never changes current
    store.verify(mv)
    assert store.ensure("hibari", "fp32").dir == mv.dir          # found, not converted again
