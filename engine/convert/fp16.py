"""fp32 -> fp16 with fp32 inputs and outputs: ``onnxconverter_common.float16`` plus the repairs it needs.

What plain ``onnxconverter_common.float16`` conversion gets wrong on these graphs, and
what ``to_fp16`` does about each before converting:

* an initializer shared by a blocked (kept fp32) and a converted consumer can only have
  one type: the fp32 consumers get a copy of their own;
* ``Cast(to=FLOAT)`` nodes inside the graph still emit float32 into fp16 consumers: they
  are retargeted to FLOAT16 (blocked consumers get a cast back, inserted by the converter);
* ``RandomNormalLike`` (Piper's noise) stays fp32: it is on the op block list;
* a graph output that is also consumed inside the graph is renamed by the converter's
  output cast, cutting the internal consumers off: such outputs are routed through an
  ``Identity`` first;
* unnamed nodes are named (the converter keys its cast bookkeeping by node name);
* two kept-fp32 nodes in a row are joined by the converter through a Cast to fp16 and
  back, rounding (and flushing to zero) the tensor between them: each such round trip is
  made an ``Identity`` of the fp32 tensor afterwards (Kokoro's STFT -> atan2 divided by
  the zeros that made).

Guarantee: a graph output that was float32 stays float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.convert.graph import consumers, name_nodes, producers

__all__ = ["to_fp16"]

# Ops kept in fp32 on top of onnxconverter-common's defaults.
_EXTRA_FP16_BLOCK = ("RandomNormalLike", "RandomNormal", "RandomUniform", "RandomUniformLike")


def _fp16_block_list() -> list[str]:
    from onnxconverter_common import float16

    return sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(_EXTRA_FP16_BLOCK))


def _untie_initializers(graph: Any, blocked: set[str], kept: set[str]) -> int:
    """An initializer read by both fp32 nodes (a blocked op, a kept node) and converted ones gets
    a copy of its own for the fp32 readers. (Only then: ALBERT's one layer, read by each of its
    twelve passes, would otherwise be stored twelve times.)"""
    from onnx import TensorProto

    inits = {t.name: t for t in graph.initializer if t.data_type == TensorProto.FLOAT}
    cons = consumers(graph)
    copies = 0
    for name, init in inits.items():
        users = cons.get(name, [])
        fp32 = [n for n in users if n.op_type in blocked or n.name in kept]
        if not fp32 or len(fp32) == len(users):
            continue
        new_name = f"{name}_ttsflow_fp32"
        dup = graph.initializer.add()
        dup.CopyFrom(init)
        dup.name = new_name
        for node in fp32:
            for j, i in enumerate(node.input):
                if i == name:
                    node.input[j] = new_name
        copies += 1
    return copies


def _retarget_casts(graph: Any, blocked: set[str], kept: set[str]) -> tuple[int, list[str]]:
    """Retarget ``Cast(to=FLOAT)`` to FLOAT16 where every reader is converted to fp16.

    A cast that feeds a blocked op or a graph output keeps emitting float32 and is put on
    the node block list instead: the converter then adds a Cast16 for its fp16 readers.
    (Retargeting it would make the converter pair the new cast with the Cast32 it puts
    before the blocked op and drop both, wiring an int64 tensor into e.g. ``Range``.)
    Returns (retargeted, names of the casts kept fp32).
    """
    from onnx import TensorProto

    cons = consumers(graph)
    outputs = {o.name for o in graph.output}
    n, keep = 0, []
    for node in graph.node:
        if node.op_type != "Cast" or node.name in kept:
            continue
        for attr in node.attribute:
            if attr.name == "to" and attr.i == TensorProto.FLOAT:
                out = node.output[0]
                if out in outputs or any(c.op_type in blocked or c.name in kept for c in cons.get(out, [])):
                    keep.append(node.name)
                else:
                    attr.i = TensorProto.FLOAT16
                    n += 1
    return n, keep


def _rename_tensor(nodes: Any, old: str, new: str) -> None:
    """Every mention of tensor ``old`` among ``nodes``' inputs and outputs becomes ``new``."""
    for node in nodes:
        for names in (node.input, node.output):
            for j, name in enumerate(names):
                if name == old:
                    names[j] = new


def _route_outputs(graph: Any) -> int:
    """Put an Identity between a graph output and its producer when the graph also reads it."""
    from onnx import helper

    cons = consumers(graph)
    prod = producers(graph)
    n = 0
    for out in graph.output:
        if out.name not in cons or out.name not in prod:
            continue
        inner = f"{out.name}_ttsflow_inner"
        _rename_tensor([prod[out.name], *cons[out.name]], out.name, inner)
        graph.node.append(helper.make_node("Identity", [inner], [out.name], name=f"{out.name}_ttsflow_identity"))
        n += 1
    return n


def to_fp16(model: Any, keep_fp32: Sequence[str] = ()) -> tuple[Any, dict[str, int]]:
    """fp32 graph -> fp16 graph with fp32 inputs and outputs (see the module docstring).

    ``keep_fp32``: regular expressions; nodes whose name matches one stay fp32 (a model's
    numerically fragile parts, e.g. a sine generator's running phase)."""
    import re

    from onnxconverter_common import float16

    graph = model.graph
    block = _fp16_block_list()
    fixes = {
        "nodes_named": name_nodes(graph),
        "outputs_routed": _route_outputs(graph),
    }
    kept: list[str] = []
    if keep_fp32:
        pattern = re.compile("|".join(f"(?:{k})" for k in keep_fp32))
        kept = [n.name for n in graph.node if pattern.search(n.name)]
        fixes["nodes_kept_fp32"] = len(kept)
    fixes["casts_retargeted"], keep_casts = _retarget_casts(graph, set(block), set(kept))
    fixes["casts_kept_fp32"] = len(keep_casts)
    keep_casts += kept  # disjoint: _retarget_casts leaves the kept nodes alone
    fixes["initializers_untied"] = _untie_initializers(graph, set(block), set(keep_casts))
    del graph.value_info[:]  # stale fp32 infos; the converter re-infers shapes
    output_types = {o.name: o.type.tensor_type.elem_type for o in graph.output}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the float32 number ... will be truncated": expected
        # check_fp16_ready would mistake the retargeted casts for an fp16 graph.
        out = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=block, node_block_list=keep_casts,
                                               check_fp16_ready=False)
    fixes["outputs_retyped"] = _restore_output_types(out, output_types)
    fixes["round_trips_removed"] = _collapse_round_trips(out)
    return out, fixes


def _restore_output_types(model: Any, types: dict[str, int]) -> int:
    """keep_io_types, where the converter missed it: an fp32 output made by a kept-fp32 node
    comes out of the converter as fp16 (its output cast points the wrong way); cast it back."""
    from onnx import TensorProto, helper

    graph = model.graph
    n = 0
    for out in graph.output:
        tt = out.type.tensor_type
        if types.get(out.name) != TensorProto.FLOAT or tt.elem_type != TensorProto.FLOAT16:
            continue
        inner = f"{out.name}_ttsflow_fp16"
        _rename_tensor(graph.node, out.name, inner)
        graph.node.append(helper.make_node("Cast", [inner], [out.name], to=TensorProto.FLOAT,
                                           name=f"{out.name}_ttsflow_to_fp32"))
        tt.elem_type = TensorProto.FLOAT
        n += 1
    return n


def _cast_to(node: Any) -> int | None:
    return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None


def _collapse_round_trips(model: Any) -> int:
    """``x(fp32) -> Cast(fp16) -> Cast(fp32)`` becomes ``Identity(x)``; casts left unread go."""
    from onnx import TensorProto, shape_inference

    graph = model.graph
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # an uninferable graph keeps its casts (correct, only less precise)
        return 0
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    prod = producers(graph)
    n = 0
    for node in graph.node:
        if _cast_to(node) != TensorProto.FLOAT:
            continue
        first = prod.get(node.input[0])
        if first is None or _cast_to(first) != TensorProto.FLOAT16 or types.get(first.input[0]) != TensorProto.FLOAT:
            continue
        node.op_type = "Identity"
        del node.attribute[:]
        node.input[0] = first.input[0]
        n += 1
    outputs = {o.name for o in graph.output}
    while True:
        read = {i for node in graph.node for i in node.input} | outputs
        dead = [node for node in graph.node if node.op_type == "Cast" and not any(o in read for o in node.output)]
        if not dead:
            return n
        for node in dead:
            graph.node.remove(node)
