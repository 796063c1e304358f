"""Precision conversion of the voice graphs (fp32, fp16, int8) and its check against fp32.

``convert(src, dst, precision)`` writes a new ONNX file and guarantees that it loads in
onnxruntime on the CPU (it is opened once before returning; a graph that does not load
raises ``ConversionError`` and leaves no file at ``dst``). It does not promise the audio
is right: ``compare()`` / ``check_against_fp32()`` measure that (length ratio,
correlation of the waveforms and of their spectral envelopes, optional word error).

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

Hibari ships only an int8 graph (``quantize_dynamic``: ``DynamicQuantizeLinear`` +
``MatMulInteger`` + rescale). ``dequantize()`` rebuilds the fp32 graph from it: each
pattern becomes a ``MatMul`` with the dequantized float weight, so ``fp32`` is a real
target for Hibari and the fp16 graph is made from that.

INT8 is ``onnxruntime.quantization.quantize_dynamic`` (MatMul weights, per tensor).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from engine.errors import ConversionError

__all__ = [
    "CHECK_SENTENCES",
    "PRECISIONS",
    "Comparison",
    "ConversionError",
    "ConvertReport",
    "WordErrorMeter",
    "check_against",
    "compare",
    "convert",
    "detect_precision",
    "summarize",
]

Precision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")

# Ops kept in fp32 on top of onnxconverter-common's defaults.
_EXTRA_FP16_BLOCK = ("RandomNormalLike", "RandomNormal", "RandomUniform", "RandomUniformLike")
_QUANT_OPS = frozenset({"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QLinearMatMul",
                        "QLinearConv", "DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLSTM"})


@dataclass(frozen=True, slots=True)
class ConvertReport:
    """What ``convert`` did: where, how long, and which graph fixes it needed."""

    src: str
    dst: str
    precision: str
    source_precision: str
    seconds: float
    bytes: int
    sha256: str
    fixes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- helpers
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
    if ops & _QUANT_OPS:
        return "int8"
    # Count weights, not tensors: the small scalars kept fp32 for blocked ops do not decide it.
    n16 = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16)
    n32 = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT)
    return "fp16" if n16 > n32 else "fp32"


def _consumers(graph: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                out.setdefault(name, []).append(node)
    return out


def _producers(graph: Any) -> dict[str, Any]:
    return {o: node for node in graph.node for o in node.output if o}


def _name_nodes(graph: Any) -> int:
    seen: set[str] = set()
    fixed = 0
    for i, node in enumerate(graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_ttsflow_{i}"
            fixed += 1
        seen.add(node.name)
    return fixed


# --------------------------------------------------------------------------- int8 -> fp32
def dequantize(model: Any) -> tuple[Any, int]:
    """Rebuild float ``MatMul`` nodes from ``quantize_dynamic``'s int8 pattern.

    The pattern (onnxruntime's dynamic quantizer)::

        xq, xs, xz = DynamicQuantizeLinear(x)
        yi = MatMulInteger(xq, Wq, xz, Wz)
        s  = Mul(xs, Ws)
        y  = Mul(Cast(yi, to=FLOAT), s)

    becomes ``y = MatMul(x, (Wq - Wz) * Ws)``. Its convolution form (``ConvInteger``, whose
    bias the quantizer adds as ``Floor(B / s)`` in int32 before the Cast) becomes
    ``y = Conv(x, (Wq - Wz) * Ws, B)`` with the same attributes, and
    ``com.microsoft.DynamicQuantizeLSTM`` (weights ``[dirs, input, 4*hidden]``, a scale and
    zero point per direction) becomes the standard ``LSTM`` with its weights dequantized and
    transposed to ``[dirs, 4*hidden, input]``. Nodes left without consumers are dropped.
    Returns the model (modified in place) and the number of rebuilt nodes.
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    prod = _producers(graph)
    cons = _consumers(graph)
    remove: set[int] = set()
    new_inits: list[Any] = []
    add_nodes: list[tuple[int, Any]] = []
    rebuilt = 0
    index = {id(n): i for i, n in enumerate(graph.node)}

    def init_array(name: str) -> np.ndarray | None:
        t = inits.get(name)
        if t is not None:
            return numpy_helper.to_array(t)
        p = prod.get(name)
        if p is not None and p.op_type == "Constant":
            return numpy_helper.to_array(helper.get_attribute_value(p.attribute[0]))
        return None

    for node in graph.node:
        if node.op_type == "ConvInteger":
            _rebuild_conv(node, prod, cons, init_array, new_inits, add_nodes, remove, index)
            rebuilt += 1
            continue
        if node.op_type == "DynamicQuantizeLSTM":
            _rebuild_lstm(node, init_array, new_inits, add_nodes, remove, index)
            rebuilt += 1
            continue
        if node.op_type == "DequantizeLinear":
            _rebuild_gather(node, prod, init_array, new_inits, add_nodes, remove, index)
            rebuilt += 1
            continue
        if node.op_type != "MatMulInteger":
            continue
        a, b = node.input[0], node.input[1]
        dql = prod.get(a)
        wq = init_array(b)
        if dql is None or dql.op_type != "DynamicQuantizeLinear" or wq is None:
            raise ConversionError(f"MatMulInteger {node.name!r}: not the dynamic-quantization pattern")
        wz = init_array(node.input[3]) if len(node.input) > 3 and node.input[3] else np.zeros((), wq.dtype)
        if wz is None:
            raise ConversionError(f"MatMulInteger {node.name!r}: weight zero point is not constant")
        casts = cons.get(node.output[0], [])
        if len(casts) != 1 or casts[0].op_type != "Cast":
            raise ConversionError(f"MatMulInteger {node.name!r}: expected one Cast after it")
        cast = casts[0]
        muls = cons.get(cast.output[0], [])
        if len(muls) != 1 or muls[0].op_type != "Mul":
            raise ConversionError(f"MatMulInteger {node.name!r}: expected one rescale Mul")
        out_mul = muls[0]
        scale_name = next(i for i in out_mul.input if i != cast.output[0])
        scale_mul = prod.get(scale_name)
        if scale_mul is None or scale_mul.op_type != "Mul":
            raise ConversionError(f"MatMulInteger {node.name!r}: scale is not Mul(x_scale, w_scale)")
        ws = None
        for i in scale_mul.input:
            if i != dql.output[1]:
                ws = init_array(i)
        if ws is None:
            raise ConversionError(f"MatMulInteger {node.name!r}: weight scale is not constant")
        w = _dequant(wq, wz, ws)
        wname = f"{b}_ttsflow_dequantized"
        new_inits.append(numpy_helper.from_array(w, wname))
        mm = helper.make_node("MatMul", [dql.input[0], wname], [out_mul.output[0]],
                              name=f"{node.name}_ttsflow_fp32")
        add_nodes.append((index[id(out_mul)], mm))
        for n in (node, cast, out_mul):
            remove.add(index[id(n)])
        rebuilt += 1

    if not rebuilt:
        return model, 0
    kept = []
    replacement = dict(add_nodes)
    for i, n in enumerate(graph.node):
        if i in replacement:
            kept.append(replacement[i])
        elif i not in remove:
            kept.append(n)
    # Drop what no longer feeds anything (scale Muls, DynamicQuantizeLinear, int8 weights).
    outputs = {o.name for o in graph.output}
    while True:
        used = {i for n in kept for i in n.input} | outputs
        still = [n for n in kept if any(o in used for o in n.output)]
        if len(still) == len(kept):
            break
        kept = still
    del graph.node[:]
    graph.node.extend(kept)
    used = {i for n in graph.node for i in n.input} | outputs
    # a weight shared by several quantized nodes is dequantized once per node under one name: keep one
    fresh = list({t.name: t for t in new_inits if t.name in used}.values())
    keep_inits = [t for t in graph.initializer if t.name in used] + fresh
    del graph.initializer[:]
    graph.initializer.extend(keep_inits)
    # Value infos of removed tensors would only confuse shape inference.
    produced = {o for n in graph.node for o in n.output}
    vis = [v for v in graph.value_info if v.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(vis)
    return model, rebuilt


def _dequant(q: np.ndarray, zero: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(q - zero) * scale`` in float32 (zero and scale already shaped to broadcast over ``q``)."""
    return ((q.astype(np.float32) - zero.astype(np.float32)) * scale.astype(np.float32)).astype(np.float32)


def _per_axis0(v: np.ndarray, ndim: int) -> np.ndarray:
    """A scale or zero point (scalar, or one per output channel) shaped to broadcast over a weight."""
    return v if v.ndim == 0 else v.reshape((-1,) + (1,) * (ndim - 1))


def _rebuild_gather(node: Any, prod: dict[str, Any], init_array: Any, new_inits: list[Any],
                    add_nodes: list[tuple[int, Any]], remove: set[int], index: dict[int, int]) -> None:
    """An int8 table read by ``Gather`` + ``DequantizeLinear`` (embeddings) -> a ``Gather`` of the floats."""
    from onnx import helper, numpy_helper

    gather = prod.get(node.input[0])
    table = init_array(gather.input[0]) if gather is not None and gather.op_type == "Gather" else None
    sc = init_array(node.input[1])
    zp = init_array(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.float32)
    if gather is None or table is None or sc is None or zp is None or sc.ndim or zp.ndim:
        raise ConversionError(f"DequantizeLinear {node.name!r}: not a per-tensor int8 table read by Gather")
    fname = f"{gather.input[0]}_ttsflow_dequantized"
    new_inits.append(numpy_helper.from_array(_dequant(table, zp, sc), fname))
    g2 = helper.make_node("Gather", [fname, gather.input[1]], [node.output[0]], name=f"{gather.name}_ttsflow_fp32")
    g2.attribute.extend(gather.attribute)
    add_nodes.append((index[id(node)], g2))
    remove.update({index[id(node)], index[id(gather)]})


def _rebuild_conv(node: Any, prod: dict[str, Any], cons: dict[str, list[Any]], init_array: Any,
                  new_inits: list[Any], add_nodes: list[tuple[int, Any]], remove: set[int],
                  index: dict[int, int]) -> None:
    """``ConvInteger`` (+ its int32 bias Add) + Cast + rescale Mul -> one float ``Conv``."""
    from onnx import helper, numpy_helper

    def fail(why: str) -> ConversionError:
        return ConversionError(f"ConvInteger {node.name!r}: {why}")

    dql = prod.get(node.input[0])
    wq = init_array(node.input[1])
    if dql is None or dql.op_type != "DynamicQuantizeLinear" or wq is None:
        raise fail("not the dynamic-quantization pattern")
    wz = init_array(node.input[3]) if len(node.input) > 3 and node.input[3] else np.zeros((), wq.dtype)
    if wz is None:
        raise fail("weight zero point is not constant")
    after = cons.get(node.output[0], [])
    bias: np.ndarray | None = None
    chain = [node]
    if len(after) == 1 and after[0].op_type == "Add":  # the bias, quantized in the graph: Floor(B / s) as int32
        add = after[0]
        chain.append(add)
        q = prod.get(next(i for i in add.input if i != node.output[0]))
        while q is not None and q.op_type in ("Reshape", "Cast", "Floor", "Round"):
            q = prod.get(q.input[0])
        if q is None or q.op_type != "Div" or (bias := init_array(q.input[0])) is None:
            raise fail("its bias is not Floor(B / scale) of a constant B")
        after = cons.get(add.output[0], [])
    if len(after) != 1 or after[0].op_type != "Cast":
        raise fail("expected one Cast after it")
    cast = after[0]
    muls = cons.get(cast.output[0], [])
    if len(muls) != 1 or muls[0].op_type != "Mul":
        raise fail("expected one rescale Mul")
    out_mul = muls[0]
    scale_mul = prod.get(next(i for i in out_mul.input if i != cast.output[0]))
    if scale_mul is None or scale_mul.op_type != "Mul":
        raise fail("scale is not Mul(x_scale, w_scale)")
    ws = next((v for i in scale_mul.input if i != dql.output[1] and (v := init_array(i)) is not None), None)
    if ws is None:
        raise fail("weight scale is not constant")
    w = _dequant(wq, _per_axis0(wz, wq.ndim), _per_axis0(ws, wq.ndim))
    wname = f"{node.input[1]}_ttsflow_dequantized"
    new_inits.append(numpy_helper.from_array(w, wname))
    inputs = [dql.input[0], wname]
    if bias is not None:
        bname = f"{node.name}_ttsflow_bias"
        new_inits.append(numpy_helper.from_array(bias.astype(np.float32).reshape(-1), bname))
        inputs.append(bname)
    conv = helper.make_node("Conv", inputs, [out_mul.output[0]], name=f"{node.name}_ttsflow_fp32")
    conv.attribute.extend(node.attribute)
    add_nodes.append((index[id(out_mul)], conv))
    for n in (*chain, cast, out_mul):
        remove.add(index[id(n)])


def _rebuild_lstm(node: Any, init_array: Any, new_inits: list[Any], add_nodes: list[tuple[int, Any]],
                  remove: set[int], index: dict[int, int]) -> None:
    """``com.microsoft.DynamicQuantizeLSTM`` -> the standard float ``LSTM`` (same attributes)."""
    from onnx import helper, numpy_helper

    ins = list(node.input) + [""] * (12 - len(node.input))
    names = []
    for k, (w_in, s_in, z_in) in enumerate(((ins[1], ins[8], ins[9]), (ins[2], ins[10], ins[11]))):
        wq, sc = init_array(w_in), init_array(s_in)
        zp = init_array(z_in) if z_in else None
        if wq is None or sc is None or (z_in and zp is None):
            raise ConversionError(f"DynamicQuantizeLSTM {node.name!r}: weights, scales or zero points are not constant")
        dirs = wq.shape[0]
        zp = np.zeros((dirs,), np.float32) if zp is None else zp
        # [dirs, in, 4h] with a scale/zero point per direction (or per dir and gate column)
        w = _dequant(wq, zp.reshape(dirs, 1, -1), sc.reshape(dirs, 1, -1))
        name = f"{w_in}_ttsflow_dequantized_{'WR'[k]}"
        new_inits.append(numpy_helper.from_array(np.ascontiguousarray(w.transpose(0, 2, 1)), name))
        names.append(name)
    lstm = helper.make_node("LSTM", [ins[0], names[0], names[1], *ins[3:8]], list(node.output),
                            name=f"{node.name}_ttsflow_fp32")
    lstm.attribute.extend(node.attribute)
    while lstm.input and lstm.input[-1] == "":
        lstm.input.pop()
    add_nodes.append((index[id(node)], lstm))
    remove.add(index[id(node)])


# --------------------------------------------------------------------------- fp32 -> fp16
def _fp16_block_list() -> list[str]:
    from onnxconverter_common import float16

    return sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(_EXTRA_FP16_BLOCK))


def _untie_initializers(graph: Any, blocked: set[str], kept: set[str]) -> int:
    """An initializer read by both fp32 nodes (a blocked op, a kept node) and converted ones gets
    a copy of its own for the fp32 readers. (Only then: ALBERT's one layer, read by each of its
    twelve passes, would otherwise be stored twelve times.)"""
    from onnx import TensorProto

    inits = {t.name: t for t in graph.initializer if t.data_type == TensorProto.FLOAT}
    cons = _consumers(graph)
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

    cons = _consumers(graph)
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

    cons = _consumers(graph)
    prod = _producers(graph)
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
        "nodes_named": _name_nodes(graph),
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
    prod = _producers(graph)
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


# --------------------------------------------------------------------------- entry point
def _load_check(path: Path) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    try:
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own untyped errors
        raise ConversionError(f"converted graph does not load: {str(e).splitlines()[0][:300]}") from e


def _save(model: Any, path: Path) -> None:
    import onnx

    onnx.save_model(model, str(path))


def expose_outputs(model: Any, names: Sequence[str]) -> int:
    """Make internal float tensors graph outputs (typed float32, so an fp16 graph casts them).

    Piper's duration tensor (the output of its one ``Ceil``) is needed to trim padded
    rows; exposing it before the fp16 conversion keeps it float32 and exact.
    """
    from onnx import TensorProto, helper

    have = {o.name for o in model.graph.output}
    produced = {o for n in model.graph.node for o in n.output}
    added = 0
    for name in names:
        if name in have:
            continue
        if name not in produced:
            raise ConversionError(f"cannot expose {name!r}: no node produces it")
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        added += 1
    return added


def convert(src: Path, dst: Path, precision: str, *, expose: Sequence[str] = (),
            keep_fp32: Sequence[str] = ()) -> ConvertReport:
    """Write ``src`` converted to ``precision`` at ``dst`` (atomically) and check that it loads.

    ``fp32`` from an int8 graph dequantizes it; ``fp16`` goes through fp32 first;
    ``int8`` quantizes the fp32 graph dynamically. Converting to the source's own
    precision copies the graph unchanged. ``expose`` names internal float tensors to add
    as float32 graph outputs (see ``expose_outputs``); ``keep_fp32`` names nodes an fp16
    graph keeps in fp32 (see ``to_fp16``).
    """
    import onnx

    if precision not in PRECISIONS:
        raise ConversionError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    src, dst = Path(src), Path(dst)
    t0 = time.perf_counter()
    try:
        model = onnx.load(str(src))
    except Exception as e:
        raise ConversionError(f"cannot read {src}: {e}") from e
    source_precision = detect_precision(model)
    fixes: dict[str, int] = {}
    if expose:
        fixes["outputs_exposed"] = expose_outputs(model, expose)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dst.name + ".", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        if precision == source_precision:
            _save(model, tmp)
        else:
            if source_precision == "int8":
                model, fixes["matmuls_dequantized"] = dequantize(model)
                if detect_precision(model) != "fp32":
                    left = sorted({n.op_type for n in model.graph.node if n.op_type in _QUANT_OPS})
                    raise ConversionError("graph still holds quantized ops after dequantization "
                                          f"({', '.join(left)}; MatMulInteger, ConvInteger and "
                                          "DynamicQuantizeLSTM are rebuilt)")
            elif source_precision == "fp16":
                raise ConversionError("converting from an fp16 graph is not supported; start from fp32 or int8")
            if precision == "fp32":
                _save(model, tmp)
            elif precision == "fp16":
                model, more = to_fp16(model, keep_fp32)
                fixes.update(more)
                _save(model, tmp)
            else:
                fixes.update(_quantize_int8(model, tmp))
        _load_check(tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return ConvertReport(
        src=str(src), dst=str(dst), precision=precision, source_precision=source_precision,
        seconds=round(time.perf_counter() - t0, 3), bytes=dst.stat().st_size, sha256=sha256_file(dst),
        fixes=fixes,
    )


def _quantize_int8(model: Any, out: Path) -> dict[str, int]:
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def quiet(record: logging.LogRecord) -> bool:
        # The quantizer logs hundreds of "unsupported type" lines on the root logger.
        return "onnxruntime/quantization" not in record.pathname.replace("\\", "/")

    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with tempfile.TemporaryDirectory(prefix="ttsflow-quant-") as d:
            fp32 = Path(d) / "fp32.onnx"
            onnx.save_model(model, str(fp32))
            quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8)
    finally:
        root.removeFilter(quiet)
    q = onnx.load(str(out), load_external_data=False)
    return {"ops_quantized": sum(1 for n in q.graph.node if n.op_type in ("MatMulInteger", "ConvInteger"))}


# --------------------------------------------------------------------------- comparison
@dataclass(frozen=True, slots=True)
class Comparison:
    """One sentence, candidate vs reference audio."""

    text: str
    length_ratio: float
    waveform_corr: float
    envelope_corr: float
    wer_reference: float | None = None
    wer_candidate: float | None = None


def _band_envelope(x: np.ndarray, sr: int, bands: int = 40) -> np.ndarray:
    """Log energy in ``bands`` linear-in-mel bands per 20 ms frame: phase-blind."""
    n_fft = 1 << max(8, int(np.ceil(np.log2(0.04 * sr))))
    hop = max(1, int(0.02 * sr))
    if len(x) < n_fft:
        x = np.pad(x, (0, n_fft - len(x)))
    frames = np.lib.stride_tricks.sliding_window_view(x.astype(np.float32), n_fft)[::hop]
    spec = np.abs(np.fft.rfft(frames * np.hanning(n_fft).astype(np.float32), axis=1)) ** 2
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    mel = 2595.0 * np.log10(1.0 + freqs / 700.0)
    edges = np.linspace(mel[1], mel[-1], bands + 1)
    idx = np.clip(np.searchsorted(edges, mel) - 1, 0, bands - 1)
    env = np.zeros((spec.shape[0], bands), np.float64)
    for b in range(bands):
        sel = idx == b
        if sel.any():
            env[:, b] = spec[:, sel].sum(axis=1)
    return np.log(env + 1e-8)


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a = a.ravel().astype(np.float64) - a.mean()
    b = b.ravel().astype(np.float64) - b.mean()
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else 0.0


def _stretch(env: np.ndarray, frames: int) -> np.ndarray:
    """Linearly time-stretch an envelope to ``frames`` rows (durations may drift a frame or two)."""
    if len(env) == frames:
        return env
    src = np.linspace(0.0, 1.0, len(env))
    dst = np.linspace(0.0, 1.0, frames)
    return np.stack([np.interp(dst, src, env[:, b]) for b in range(env.shape[1])], axis=1)


def compare(text: str, reference: np.ndarray, candidate: np.ndarray, sample_rate: int) -> Comparison:
    """Length ratio, waveform correlation (over the common length) and envelope correlation."""
    n = min(len(reference), len(candidate))
    ratio = len(candidate) / len(reference) if len(reference) else float("inf")
    wave = _corr(reference[:n], candidate[:n]) if n else 0.0
    er = _band_envelope(reference, sample_rate)
    ec = _stretch(_band_envelope(candidate, sample_rate), len(er))
    return Comparison(text=text, length_ratio=round(ratio, 4), waveform_corr=round(wave, 4),
                      envelope_corr=round(_corr(er, ec), 4))


def summarize(rows: Sequence[Comparison]) -> dict[str, Any]:
    """Worst and mean numbers over the sentences, the lines a person reads first."""
    if not rows:
        return {}
    out: dict[str, Any] = {
        "sentences": len(rows),
        "length_ratio_min": min(r.length_ratio for r in rows),
        "length_ratio_max": max(r.length_ratio for r in rows),
        "waveform_corr_mean": round(float(np.mean([r.waveform_corr for r in rows])), 4),
        "envelope_corr_min": min(r.envelope_corr for r in rows),
        "envelope_corr_mean": round(float(np.mean([r.envelope_corr for r in rows])), 4),
    }
    if all(r.wer_candidate is not None for r in rows):
        out["wer_reference"] = round(float(np.mean([r.wer_reference for r in rows])), 4)  # type: ignore[arg-type]
        out["wer_candidate"] = round(float(np.mean([r.wer_candidate for r in rows])), 4)  # type: ignore[arg-type]
    return out


# --------------------------------------------------------------------------- word error
def _words(text: str) -> list[str]:
    import re

    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()


class WordErrorMeter:
    """Offline word error with pocketsphinx (its en-US model ships on PyPI) and jiwer.

    Optional: ``available()`` is False when either package is missing (they are in the
    ``dev`` extra), and callers report no word error rather than fail.
    """

    def __init__(self) -> None:
        self._decoder: Any = None

    @staticmethod
    def available() -> bool:
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in ("pocketsphinx", "jiwer"))

    def transcribe(self, samples: np.ndarray, sample_rate: int) -> str:
        from engine.audio import resample

        if self._decoder is None:
            from pocketsphinx import Decoder

            self._decoder = Decoder(samprate=16000, logfn=os.devnull)
        x = resample(np.asarray(samples, np.float32), sample_rate, 16000)
        pcm = (np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        d = self._decoder
        d.start_utt()
        d.process_raw(pcm, full_utt=True)
        d.end_utt()
        hyp = d.hyp()
        return hyp.hypstr if hyp is not None else ""

    def wer(self, text: str, samples: np.ndarray, sample_rate: int) -> float:
        import jiwer

        ref = " ".join(_words(text))
        hyp = " ".join(_words(self.transcribe(samples, sample_rate)))
        if not hyp:
            return 1.0
        return float(jiwer.wer(ref, hyp))


CHECK_SENTENCES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog near the river bank this morning.",
    "Please remember to bring your passport and two forms of identification to the appointment.",
    "Scientists announced on Tuesday that the new telescope had captured images of a distant galaxy.",
    "If the weather stays clear tonight, we will walk down to the harbor and watch the boats come in.",
)


def check_against(reference: Any, candidate: Any, sentences: Sequence[str] = CHECK_SENTENCES,
                  *, wer: bool = True) -> list[Comparison]:
    """Speak ``sentences`` with two engines (anything with ``synthesize(items)``) and compare.

    ``reference`` is normally the fp32 graph. A sentence either engine fails on raises
    ``ConversionError`` naming it. Word error is added when pocketsphinx is installed.
    """
    from engine.base import Audio, SynthItem

    items = [SynthItem(s, "") for s in sentences]
    ref = reference.synthesize(items)
    cand = candidate.synthesize(items)
    meter = WordErrorMeter() if wer and WordErrorMeter.available() else None
    rows: list[Comparison] = []
    for s, a, b in zip(sentences, ref, cand, strict=True):
        if not isinstance(a, Audio) or not isinstance(b, Audio):
            bad = a if not isinstance(a, Audio) else b
            raise ConversionError(f"check sentence failed ({bad}): {s!r}")
        row = compare(s, a.samples, b.samples, a.sample_rate)
        if meter is not None:
            row = Comparison(row.text, row.length_ratio, row.waveform_corr, row.envelope_corr,
                             round(meter.wer(s, a.samples, a.sample_rate), 4),
                             round(meter.wer(s, b.samples, b.sample_rate), 4))
        rows.append(row)
    return rows
