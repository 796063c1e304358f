"""onnxruntime sessions: which execution provider runs, with how many threads, at what precision.

``choose_providers("auto")`` prefers TensorRT, then CUDA, then CPU among the providers
this onnxruntime build offers. onnxruntime silently falls back to CPU when a provider
fails to initialise (missing CUDA libraries, for instance), so ``make_session`` logs and
returns the provider that actually runs (``session.get_providers()[0]``): that is the one
``ModelInfo.provider`` reports, never the one that was asked for.

``torch`` (or ``torch-cuda`` / ``torch-cpu``) as the first provider runs the same graph on
torch instead (:class:`engine.torch_session.TorchSession`, onnx2torch): for a GPU where
onnxruntime-gpu cannot be installed. Its provider reads ``torch-cuda`` or ``torch-cpu``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.errors import ModelLoadError

__all__ = ["choose_providers", "detect_precision", "make_session", "torch_requested"]

_log = logging.getLogger("ttsflow.engine")

_PREFERENCE = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
_ALIASES = {
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "gpu": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}

# Per-provider options. Text-to-speech shapes change with every input length, so cuDNN's
# default exhaustive algorithm search would run again for each new shape (Piper sets the
# same option for the same reason).
_OPTIONS: dict[str, dict[str, Any]] = {
    "CUDAExecutionProvider": {"cudnn_conv_algo_search": "HEURISTIC"},
}


def _available() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def choose_providers(requested: str | Sequence[str] | None = "auto") -> list[str]:
    """Provider names to hand to onnxruntime, best first, always ending with CPU.

    ``requested`` is ``"auto"`` (TensorRT, CUDA, CPU: whichever this build has), a comma
    separated string, or a sequence; short names (``cuda``, ``trt``, ``cpu``) are accepted.
    A provider this build lacks is dropped with a warning rather than failing the load.
    """
    available = _available()
    auto = requested is None or (isinstance(requested, str) and requested.strip().lower() in ("", "auto"))
    if auto:
        wanted = list(_PREFERENCE)
    else:
        names = requested.split(",") if isinstance(requested, str) else list(requested or ())
        wanted = [_ALIASES.get(n.strip().lower(), n.strip()) for n in names if n.strip()]
    chosen: list[str] = []
    for name in wanted:
        if name in available and name not in chosen:
            chosen.append(name)
        elif name not in available and not auto:
            _log.warning("event=provider_unavailable provider=%s available=%s", name, ",".join(available))
    if "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")
    return chosen


def torch_requested(providers: str | Sequence[str] | None) -> str | None:
    """The torch provider's name when ``providers`` asks for it first (``torch``, ``torch-cuda``, ``torch-cpu``)."""
    if providers is None:
        return None
    names = providers.split(",") if isinstance(providers, str) else list(providers)
    first = next((n.strip().lower() for n in names if n.strip()), "")
    return first if first.startswith("torch") else None


def make_session(model: str | Path | bytes, *, providers: str | Sequence[str] | None = "auto",
                 threads: int = 0, name: str = "model", spinning: bool = True) -> tuple[Any, str]:
    """An ``InferenceSession`` (or a ``TorchSession``) and the provider that really runs it.

    ``threads`` is the intra-op thread count (0 = onnxruntime's default: all cores).
    ``spinning`` False: its idle intra-op threads sleep instead of spinning (a session that shares
    the cores with other calls; spinning threads there took a 10-character call from 2.3 s to 3.8 s
    on 2 cores).
    Raises ``ModelLoadError`` when the file is missing or onnxruntime refuses the graph.
    """
    wanted_torch = torch_requested(providers)
    if wanted_torch is not None:
        from engine.torch_session import TorchSession

        tsession = TorchSession(model, provider=wanted_torch, threads=threads, name=name)
        _log.info("event=session_ready model=%s provider=%s precision=%s", name, tsession.provider,
                  tsession.precision)
        return tsession, tsession.provider
    import onnxruntime as ort

    if isinstance(model, Path | str) and not Path(model).is_file():
        raise ModelLoadError(f"{name}: model file not found: {model}")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads > 0:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    chosen = choose_providers(providers)
    with_options = [(n, _OPTIONS[n]) if n in _OPTIONS else n for n in chosen]
    try:
        session = ort.InferenceSession(model if isinstance(model, bytes) else str(model), so, providers=with_options)
    except Exception as e:  # onnxruntime raises its own untyped errors for bad graphs
        raise ModelLoadError(f"{name}: onnxruntime could not load the model: {e}") from e
    actual = session.get_providers()[0]
    if actual != chosen[0]:
        _log.warning("event=provider_fallback model=%s requested=%s actual=%s", name, chosen[0], actual)
    _log.info("event=session_ready model=%s provider=%s threads=%s", name, actual, threads or "all")
    return session, actual


def detect_precision(model: Any) -> str:
    """``int8``, ``fp16`` or ``fp32`` from an ``onnx.ModelProto``'s operators and weights."""
    from onnx import TensorProto

    ops = {n.op_type for n in model.graph.node}
    if ops & {"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QLinearMatMul", "QLinearConv"}:
        return "int8"
    types = [t.data_type for t in model.graph.initializer]
    if types and sum(t == TensorProto.FLOAT16 for t in types) > sum(t == TensorProto.FLOAT for t in types):
        return "fp16"
    return "fp32"
