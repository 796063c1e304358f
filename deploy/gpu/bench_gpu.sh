#!/usr/bin/env bash
# ttsflow engine benchmark on an NVIDIA GPU, as one command:
#
#     deploy/gpu/bench_gpu.sh                 # all installed backends, fp32 vs fp16, batch 1/4/8/16
#     deploy/gpu/bench_gpu.sh --backend piper --batch 1,8,16,32
#     deploy/gpu/bench_gpu.sh baseline        # ttsflow vs Celery+Redis, Piper batched at 8 (section at the end)
#
# What it does:
#   1. checks that nvidia-smi sees a GPU (driver for CUDA 12 or newer);
#   2. creates (or reuses) the venv $TTSFLOW_GPU_VENV (default deploy/gpu/.venv, git-ignored) with ttsflow and its
#      `gpu` and `piper` extras. onnxruntime (CPU) and onnxruntime-gpu install the same Python
#      module, and ttsflow depends on the CPU one, so the CPU package is removed and
#      onnxruntime-gpu reinstalled on top; its [cuda,cudnn] extras bring CUDA 12 and cuDNN 9 as
#      nvidia-* wheels (loaded with onnxruntime.preload_dlls), falling back to the system's
#      CUDA/cuDNN where those extras are unavailable;
#   3. runs deploy/gpu/bench_gpu.py --device cuda, which converts the fp16 models into the model
#      store (once), benchmarks fp32 and fp16 and prints ONE JSON object as its last line:
#      per backend/precision/batch rtf, audio_s_per_s, batch_p50_ms, batch_p99_ms, infer_p50_ms,
#      cold_start_s, gpu_mem_peak_mib and the provider onnxruntime really used (fallback: true
#      means it quietly ran on the CPU: check the cuda_libraries field).
#
# Extra arguments go to bench_gpu.py (--provider tensorrt, --runs N, --model-dir D, ...).
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV="${TTSFLOW_GPU_VENV:-deploy/gpu/.venv}"
PYTHON="${PYTHON:-python3}"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench_gpu: no NVIDIA GPU visible (nvidia-smi missing or failing); this benchmark needs one" >&2
    exit 1
fi
nvidia-smi -L >&2

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip >&2
"${PIP[@]}" install -e ".[gpu,piper]" >&2
# Keep only the GPU build of the onnxruntime module.
"${PIP[@]}" uninstall -y onnxruntime onnxruntime-gpu >&2 || true
if ! "${PIP[@]}" install "onnxruntime-gpu[cuda,cudnn]>=1.21" >&2; then
    echo "bench_gpu: onnxruntime-gpu[cuda,cudnn] unavailable; using onnxruntime-gpu with the system CUDA/cuDNN" >&2
    "${PIP[@]}" install "onnxruntime-gpu>=1.18" >&2
fi
"$VENV/bin/python" -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" >&2

# --- ttsflow vs the seeds' design (Celery + Redis) on the GPU --------------------------------
#
#     deploy/gpu/bench_gpu.sh baseline [--workers N] [--quick] [--seconds S] ...
#
# The same comparison as `ttsflow bench baseline` on a CPU (see streams/bench/baseline.py), with
# Piper on the GPU: ttsflow micro-batches segments of many requests up to 8 per model call
# (TTS_MAX_BATCH=8, TTS_MAX_WAIT_MS=20); the Celery baseline runs one task per request (each task
# hands its own request's segments to the same engine, so it batches only within a request).
# Same voice, same model version (the store's current one), same number of worker processes.
# Needs the local stack (Kafka, S3, Redis: `ttsflow stack up`, which downloads its jars once)
# and the `bench` extra (celery[redis]), installed here into the GPU venv. The last line of
# stdout is one JSON object with the ratios ttsflow/baseline.
if [ "${1:-}" = "baseline" ]; then
    shift
    # the `bench` extra's one package, installed alone: reinstalling ttsflow with `.[bench]` would
    # bring the CPU onnxruntime back over the GPU build
    "${PIP[@]}" install "celery[redis]>=5.4" >&2
    "$VENV/bin/ttsflow" stack status --json >/dev/null 2>&1 || "$VENV/bin/ttsflow" stack up >&2
    export TTS_BACKEND=piper TTS_MAX_BATCH=8 TTS_MAX_WAIT_MS="${TTS_MAX_WAIT_MS:-20}"
    export TTS_PROVIDERS="${TTS_PROVIDERS:-cuda,cpu}" TTS_PRECISION="${TTS_PRECISION:-auto}"
    # install the shipped Piper into the model store once, before both systems' processes start at once
    "$VENV/bin/python" -c "from engine.store import ModelStore; from streams.settings import load_settings; \
print('piper model', ModelStore(load_settings().effective_model_dir).current('piper').ref)" >&2
    exec "$VENV/bin/ttsflow" bench baseline --json "$@"
fi

exec "$VENV/bin/python" deploy/gpu/bench_gpu.py --device cuda "$@"
