"""int8 -> fp32: rebuild the float graph from ``quantize_dynamic``'s int8 patterns.

Hibari ships only an int8 graph (``quantize_dynamic``: ``DynamicQuantizeLinear`` +
``MatMulInteger`` + rescale). ``dequantize()`` rebuilds the fp32 graph from it: each
pattern becomes a ``MatMul`` (``Conv``, ``LSTM``, ``Gather``) with the dequantized float
weight, so ``fp32`` is a real target for Hibari and the fp16 graph is made from that.
A pattern it does not recognise raises ``ConversionError`` naming the node; it never
guesses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.convert.graph import consumers, producers
from engine.errors import ConversionError

__all__ = ["dequantize"]


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
    prod = producers(graph)
    cons = consumers(graph)
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
