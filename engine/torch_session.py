"""The voice graphs on torch: an ONNX graph converted with onnx2torch behind onnxruntime's session API.

``TorchSession`` answers the three calls the backends make of an ``InferenceSession``
(``run(None, feeds)``, ``get_inputs()``/``get_outputs()`` names, ``get_providers()``), so
:mod:`engine.hibari` and :mod:`engine.piper` run unchanged on it: same front end, same
batching (Piper's padded buckets), same trimming. ``engine.providers.make_session`` builds
one when the providers ask for ``torch`` (``TTS_PROVIDERS=torch``: CUDA when torch sees a
GPU, else CPU; ``torch-cuda`` / ``torch-cpu`` to insist).

Guarantees:

* The graph the store holds is the graph that runs, converted op for op: the fp16 graph
  ``ttsflow model convert --precision fp16`` makes (its fp32 islands and casts included)
  runs in fp16, the fp32 graph in fp32. So the fp16 rules of the onnxruntime path hold here
  unchanged. An fp16 graph on the CPU is refused (``ModelLoadError``), as ChatTTS refuses it:
  fp16 is for CUDA.
* An int8 graph (hibari ships one: ``quantize_dynamic``'s ``MatMulInteger`` pattern, which
  onnx2torch cannot convert) is dequantized to fp32 first (``engine.convert.dequant.dequantize``);
  ``precision`` then says ``fp32``: that is what runs.
* Two ops of these graphs get converters of our own, registered once: ``RandomNormalLike``
  (Piper's noise; onnx2torch 1.5 has none: ``torch.randn`` of the input's shape, the op's
  mean/scale; its ``seed`` attribute is not honoured) and ``Clip`` with a bound computed in
  the graph (hibari's duration clamp; onnx2torch takes constant bounds only);
  ``GreaterOrEqual``/``LessOrEqual`` at opset 16 reuse onnx2torch's opset-12 converters. ``Constant``
  nodes become initializers first (onnx2torch reads some operands only from those). A graph holding any other op
  onnx2torch cannot take is a ``ModelLoadError`` naming it, before conversion starts.
* Outputs come back as numpy arrays in the graph's output order (fp16 outputs as float32,
  as the backends expect), one ``torch.inference_mode()`` call per ``run``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ModelLoadError

__all__ = ["OWN_CONVERTERS", "TorchSession", "torch_device", "torch_model"]

_log = logging.getLogger("ttsflow.engine")

# Ops this module converts itself (onnx2torch 1.5 has none for them).
OWN_CONVERTERS: tuple[str, ...] = ("RandomNormalLike", "Clip", "NonZero", "CumSum")

_registered = False
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Arg:
    """What ``get_inputs()`` / ``get_outputs()`` hand out: only ``name`` is read."""

    name: str


def _register_converters() -> None:
    """Add our converters to onnx2torch's registry (once per process)."""
    global _registered
    with _lock:
        if _registered:
            return
        import torch
        from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription, add_converter
        from onnx2torch.onnx_graph import OnnxGraph
        from onnx2torch.onnx_node import OnnxNode
        from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node

        class RandomNormalLike(torch.nn.Module):
            def __init__(self, mean: float, scale: float, dtype: Any) -> None:
                super().__init__()
                self.mean, self.scale, self.dtype = mean, scale, dtype

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                dtype = self.dtype if self.dtype is not None else (x.dtype if x.is_floating_point() else torch.float32)
                return torch.randn(x.shape, dtype=dtype, device=x.device) * self.scale + self.mean

        _dtypes = {1: torch.float32, 10: torch.float16, 11: torch.float64, 16: torch.bfloat16}

        def random_normal_like(node: OnnxNode, graph: OnnxGraph) -> OperationConverterResult:
            a = node.attributes
            if "seed" in a:
                _log.debug("event=torch_random_seed_ignored node=%s", node.name)
            dtype = _dtypes.get(int(a["dtype"])) if "dtype" in a else None
            module = RandomNormalLike(float(a.get("mean", 0.0)), float(a.get("scale", 1.0)), dtype)
            return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node))

        class Clip(torch.nn.Module):
            """ONNX Clip (opset 11+) whose min/max may be tensors computed in the graph."""

            def __init__(self, lo: float | None, hi: float | None, lo_dynamic: bool, hi_dynamic: bool) -> None:
                super().__init__()
                self.lo, self.hi, self.lo_dynamic, self.hi_dynamic = lo, hi, lo_dynamic, hi_dynamic

            def forward(self, x: torch.Tensor, *bounds: torch.Tensor) -> torch.Tensor:
                it = iter(bounds)
                lo = next(it).to(x.dtype) if self.lo_dynamic else self.lo
                hi = next(it).to(x.dtype) if self.hi_dynamic else self.hi
                return torch.clamp(x, lo, hi)  # type: ignore[arg-type]  # clamp takes numbers too

        from onnx2torch.utils.common import OnnxMapping, get_const_value

        class NonZero(torch.nn.Module):
            """ONNX NonZero: indices as ``[rank, N]`` (onnx2torch 1.5 returns torch's ``[N, rank]``)."""

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.nonzero(x).T.contiguous()

        def nonzero(node: OnnxNode, graph: OnnxGraph) -> OperationConverterResult:
            return OperationConverterResult(torch_module=NonZero(), onnx_mapping=onnx_mapping_from_node(node))

        from onnx2torch.node_converters.cumsum import OnnxCumSum

        def cumsum(node: OnnxNode, graph: OnnxGraph) -> OperationConverterResult:
            a = node.attributes  # onnx2torch 1.5 defaults ``reverse`` to 1; the ONNX default is 0
            module = OnnxCumSum(bool(a.get("exclusive", 0)), bool(a.get("reverse", 0)))
            return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node))

        for version in (11, 14):
            _CONVERTER_REGISTRY.pop(OperationDescription("", "CumSum", version), None)
            add_converter(operation_type="CumSum", version=version)(cumsum)
        for version in (9, 13):
            _CONVERTER_REGISTRY.pop(OperationDescription("", "NonZero", version), None)
            add_converter(operation_type="NonZero", version=version)(nonzero)

        def clip(node: OnnxNode, graph: OnnxGraph) -> OperationConverterResult:
            names = [*node.input_values, "", ""]
            inputs: list[str] = [names[0]]
            bounds: list[float | None] = []
            dynamic: list[bool] = []
            for name in names[1:3]:
                if not name:
                    bounds.append(None)
                    dynamic.append(False)
                    continue
                try:
                    bounds.append(float(get_const_value(name, graph)))
                    dynamic.append(False)
                except KeyError:  # computed in the graph (hibari's lower bound): an input of the module
                    bounds.append(None)
                    dynamic.append(True)
                    inputs.append(name)
            module = Clip(bounds[0], bounds[1], dynamic[0], dynamic[1])
            return OperationConverterResult(torch_module=module,
                                            onnx_mapping=OnnxMapping(inputs=tuple(inputs), outputs=node.output_values))

        # opset 16 only added bfloat16 to these comparisons; onnx2torch registers them at 12
        for op in ("GreaterOrEqual", "LessOrEqual"):
            if OperationDescription("", op, 16) not in _CONVERTER_REGISTRY:
                add_converter(operation_type=op, version=16)(_CONVERTER_REGISTRY[OperationDescription("", op, 12)])
        for version in (11, 12, 13):  # ours replaces onnx2torch's, which takes constant bounds only
            _CONVERTER_REGISTRY.pop(OperationDescription("", "Clip", version), None)
            _CONVERTER_REGISTRY.pop(OperationDescription("ai.onnx", "Clip", version), None)
            add_converter(operation_type="Clip", version=version)(clip)
        if not any(k[1] == "RandomNormalLike" for k in _CONVERTER_REGISTRY):
            for version in (1, 22):
                add_converter(operation_type="RandomNormalLike", version=version)(random_normal_like)
        _registered = True


def _unsupported(model: Any) -> list[str]:
    """Op types of ``model`` that no registered converter takes at the model's opset."""
    from onnx2torch.node_converters.registry import get_converter

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    missing: set[str] = set()
    for op in {(n.domain, n.op_type) for n in model.graph.node}:
        if op[0] not in ("", "ai.onnx"):
            missing.add(f"{op[0]}.{op[1]}")
            continue
        try:
            get_converter(op[1], opset)
        except NotImplementedError:
            missing.add(op[1])
    return sorted(missing)


def constants_to_initializers(model: Any) -> int:
    """Turn ``Constant`` nodes (``value`` attribute) into initializers; the number moved.

    onnx2torch reads some operands only from initializers (``Clip``'s min/max: hibari's
    come from ``Constant`` nodes, which it otherwise refuses as "dynamic").
    """
    from onnx import helper

    graph = model.graph
    moved, kept = 0, []
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            t = helper.get_attribute_value(node.attribute[0])
            t.name = node.output[0]
            graph.initializer.append(t)
            moved += 1
        else:
            kept.append(node)
    if moved:
        del graph.node[:]
        graph.node.extend(kept)
    return moved


def torch_device(requested: str) -> str:
    """``cuda`` or ``cpu`` for a provider name: ``torch`` (auto), ``torch-cuda``, ``torch-cpu``."""
    import torch

    want = requested.strip().lower()
    if want in ("torch-cpu", "torch:cpu"):
        return "cpu"
    if want in ("torch-cuda", "torch:cuda", "torch-gpu"):
        if not torch.cuda.is_available():
            raise ModelLoadError("torch-cuda asked for, but torch sees no CUDA device")
        return "cuda"
    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_model(model: Any, *, device: str, name: str = "model") -> tuple[Any, str]:
    """``model`` (an ``onnx.ModelProto``) as a torch ``GraphModule`` on ``device``, and its precision.

    int8 graphs are dequantized to fp32 first; fp16 graphs need CUDA. Raises ``ModelLoadError``.
    """
    from engine.convert import detect_precision
    from engine.convert.dequant import dequantize
    from engine.convert.graph import name_nodes

    try:
        import onnx2torch  # noqa: F401 - the import error is the message
    except ImportError as e:
        raise ModelLoadError(f"{name}: the torch provider needs torch and onnx2torch "
                             f"(pip install 'ttsflow[torch]'): {e}") from e
    _register_converters()
    precision = detect_precision(model)
    if precision == "int8":
        model, rebuilt = dequantize(model)
        precision = detect_precision(model)
        _log.info("event=torch_dequantized model=%s matmuls=%d", name, rebuilt)
        if precision == "int8":
            raise ModelLoadError(f"{name}: the torch provider cannot run this int8 graph (not quantize_dynamic's "
                                 "MatMulInteger pattern); convert it to fp32 first")
    if precision == "fp16" and device != "cuda":
        raise ModelLoadError(f"{name}: an fp16 graph runs on the torch provider on CUDA only; "
                             "on a CPU use the fp32 graph (TTS_PRECISION=fp32) or onnxruntime")
    constants_to_initializers(model)
    name_nodes(model.graph)  # onnx2torch's names for unnamed nodes can collide with named ones (Piper has 18)
    missing = _unsupported(model)
    if missing:
        raise ModelLoadError(f"{name}: onnx2torch cannot convert op(s) {', '.join(missing)}")
    from onnx2torch import convert

    try:
        module = convert(model)
    except Exception as e:  # onnx2torch raises NotImplementedError / KeyError / ValueError for what it lacks
        raise ModelLoadError(f"{name}: onnx2torch could not convert the graph: {type(e).__name__}: {e}") from e
    return module.to(device).eval(), precision


class TorchSession:
    """onnxruntime's session API over a converted graph (see the module docstring)."""

    def __init__(self, model: str | Path | bytes | Any, *, provider: str = "torch", threads: int = 0,
                 name: str = "model") -> None:
        import onnx
        import torch

        if isinstance(model, bytes):
            proto = onnx.load_from_string(model)
        elif isinstance(model, str | Path):
            if not Path(model).is_file():
                raise ModelLoadError(f"{name}: model file not found: {model}")
            proto = onnx.load(str(model))
        else:
            proto = model
        if threads > 0:
            torch.set_num_threads(threads)
        self.device = torch_device(provider)
        self._inputs = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
        self._outputs = [o.name for o in proto.graph.output]
        self._module, self.precision = torch_model(proto, device=self.device, name=name)
        self.provider = f"torch-{self.device}"
        self._torch = torch

    def get_inputs(self) -> list[_Arg]:
        return [_Arg(n) for n in self._inputs]

    def get_outputs(self) -> list[_Arg]:
        return [_Arg(n) for n in self._outputs]

    def get_providers(self) -> list[str]:
        return [self.provider]

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        torch = self._torch
        missing = [n for n in self._inputs if n not in feeds]
        if missing:
            raise ValueError(f"missing inputs: {missing}")
        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])).to(self.device) for n in self._inputs]
        with torch.inference_mode():
            res = self._module(*args)
        outs: list[Any] = []
        stack = [res]
        while stack:  # an fx module may hand back nested tuples (a Split feeding outputs)
            r = stack.pop(0)
            if isinstance(r, tuple | list):
                stack[:0] = list(r)
            else:
                outs.append(r)
        if len(outs) != len(self._outputs):
            raise RuntimeError(f"converted graph returned {len(outs)} outputs, the graph has {len(self._outputs)}")
        arrays = [o.detach().float().cpu().numpy() if o.is_floating_point() else o.detach().cpu().numpy()
                  for o in outs]
        if output_names is None:
            return arrays
        return [arrays[self._outputs.index(n)] for n in output_names]
