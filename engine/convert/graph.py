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

__all__ = ["QUANT_OPS", "consumers", "detect_precision", "duration_tensor", "name_nodes", "producers", "sha256_file"]

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


def duration_tensor(graph: Any) -> str | None:
    """The tensor holding each input token's length in output frames, or None if the graph has none.

    Duration-based voices compute it in the same forward pass as the audio: Piper (VITS)
    as the output of its one ``Ceil`` (``w_ceil``, float); Kokoro and hibari as
    ``Round -> Clip -> Cast(int64)`` before the ``CumSum`` that lays frames out. The integer
    ``Cast`` is preferred where it exists: its type does not change with the graph's
    precision, so the same tensor is exact in fp32, fp16 and int8 versions.
    """
    prod = producers(graph)
    cons = consumers(graph)
    ceil = [n for n in graph.node if n.op_type == "Ceil"]
    if len(ceil) == 1:
        return str(ceil[0].output[0])
    found: list[str] = []
    for node in graph.node:
        if node.op_type != "Round":
            continue
        t = node.output[0]
        nxt = cons.get(t, [])
        if len(nxt) == 1 and nxt[0].op_type == "Clip":
            t = nxt[0].output[0]
            nxt = cons.get(t, [])
        casts = [n for n in nxt if n.op_type == "Cast"]
        if len(casts) == 1 and prod.get(t) is not None:
            found.append(str(casts[0].output[0]))
    return found[0] if len(found) == 1 else None


def tensor_elem_type(graph: Any, name: str) -> int:
    """The ONNX element type of ``name``: a ``Cast``'s target, else float32."""
    from onnx import TensorProto

    node = producers(graph).get(name)
    if node is not None and node.op_type == "Cast":
        for a in node.attribute:
            if a.name == "to":
                return int(a.i)
    return int(TensorProto.FLOAT)
