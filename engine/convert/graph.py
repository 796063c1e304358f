"""Read-only views of an ONNX graph that every conversion step shares.

Who produces and who consumes each tensor, unique node names (the fp16 converter keys its
bookkeeping by name), and which precision a graph is in. Nothing here changes a tensor's
value; ``name_nodes`` only renames nodes that have no name or a duplicate one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["QUANT_OPS", "consumers", "detect_precision", "name_nodes", "producers", "sha256_file"]

QUANT_OPS = frozenset({"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QLinearMatMul",
                       "QLinearConv", "DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLSTM"})


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def detect_precision(model: Any) -> str:
    """``int8`` if the graph holds quantization ops, ``fp16`` if float16 weights, else ``fp32``."""
    from onnx import TensorProto

    ops = {n.op_type for n in model.graph.node}
    if ops & QUANT_OPS:
        return "int8"
    # Count weights, not tensors: the small scalars kept fp32 for blocked ops do not decide it.
    n16 = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16)
    n32 = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT)
    return "fp16" if n16 > n32 else "fp32"


def consumers(graph: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                out.setdefault(name, []).append(node)
    return out


def producers(graph: Any) -> dict[str, Any]:
    return {o: node for node in graph.node for o in node.output if o}


def name_nodes(graph: Any) -> int:
    seen: set[str] = set()
    fixed = 0
    for i, node in enumerate(graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_ttsflow_{i}"
            fixed += 1
        seen.add(node.name)
    return fixed
