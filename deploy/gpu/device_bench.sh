#!/usr/bin/env bash
# ttsflow's GPU measurements (issue 19) in ONE command on a machine with no package registry:
#
#     bash deploy/gpu/device_bench.sh                        # on the GPU: piper, hibari, chattts; < 8 min
#     bash deploy/gpu/device_bench.sh --device cpu --quick   # the same code paths, tiny, on a CPU (the test)
#
# Prepare here first (needs a registry): `make gpu-wheels EXTRAS=dev,piper,chattts,torch` downloads the
# cp312 wheels the bench needs beyond the lent machine's image, plus the Piper graph (weights
# stored fp16, ~31 MiB) and the corpus' phoneme ids, into deploy/gpu/wheels/ (git-ignored,
# <= 50 MiB; the tree itself is ~1.5 MiB, the device carries 64 MiB in all). Then the device
# call (the `run` tool, from the repository root):
#
#     run(command="bash deploy/gpu/device_bench.sh --out $OUT", carry=["deploy/gpu/wheels"], timeout_s=560)
#
# It installs deploy/gpu/wheels/*.whl with `pip install --no-index --no-deps --target` into a
# temporary folder put on PYTHONPATH (nothing is fetched), runs deploy/gpu/device_bench.py
# (each part under its own time limit, partial JSON in <out>/result.json after every part) and
# prints one JSON object as its last stdout line; WAV samples (<voice>-<precision>.wav) and the
# JSON land in --out (default $OUT, else out/device_bench). The whole run is cut at 470 s.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
WHEELS="${TTSFLOW_GPU_WHEELS:-deploy/gpu/wheels}"
SITE="$(mktemp -d "${TMPDIR:-/tmp}/ttsflow-gpu-site.XXXXXX")"
trap 'rm -rf "$SITE"' EXIT

if compgen -G "$WHEELS/*.whl" >/dev/null; then
    # --no-deps: the image already holds torch, numpy, onnx, onnxruntime, transformers, numba, scipy
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl >&2
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    echo "device_bench: no wheels in $WHEELS (make gpu-wheels); using what $PYTHON already has" >&2
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >&2 || true
exec timeout -k 10 "${TTSFLOW_DEVICE_BENCH_LIMIT_S:-470}" "$PYTHON" deploy/gpu/device_bench.py "$@"
