"""Converting a voice graph file to a precision (fp32, fp16, int8).

``convert(src, dst, precision)`` writes a new ONNX file and guarantees that it loads in
onnxruntime on the CPU (it is opened once before returning; a graph that does not load
raises ``ConversionError`` and leaves no file at ``dst``, which is replaced atomically).
It does not promise the audio is right: :mod:`engine.convert.checks` measures that.

``fp32`` from an int8 graph dequantizes it (:mod:`engine.convert.dequant`); ``fp16`` goes
through fp32 first (:mod:`engine.convert.fp16`); INT8 is
``onnxruntime.quantization.quantize_dynamic`` (MatMul weights, per tensor).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.convert.dequant import dequantize
from engine.convert.fp16 import to_fp16
from engine.convert.graph import QUANT_OPS, detect_precision, sha256_file, tensor_elem_type
from engine.errors import ConversionError

__all__ = ["PRECISIONS", "ConvertReport", "convert", "expose_durations", "expose_outputs"]

Precision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")


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
    """Make internal tensors graph outputs: float ones typed float32 (so an fp16 graph casts
    them), a ``Cast``'s output with the type it casts to.

    The voices' duration tensors (:func:`engine.convert.graph.duration_tensor`) are needed
    to trim padded rows (Piper) and to time every word; exposing them before the fp16
    conversion keeps them exact.
    """
    from onnx import helper

    have = {o.name for o in model.graph.output}
    produced = {o for n in model.graph.node for o in n.output}
    added = 0
    for name in names:
        if name in have:
            continue
        if name not in produced:
            raise ConversionError(f"cannot expose {name!r}: no node produces it")
        model.graph.output.append(helper.make_tensor_value_info(name, tensor_elem_type(model.graph, name), None))
        added += 1
    return added


def expose_durations(model: Any) -> str | None:
    """Make the voice's duration tensor a graph output (in place) and return its name; None
    when the graph predicts no durations. A graph that has it as an output already is
    left as it is."""
    from engine.convert.graph import duration_tensor

    name = duration_tensor(model.graph)
    if name is not None:
        expose_outputs(model, [name])
    return name


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
                    left = sorted({n.op_type for n in model.graph.node if n.op_type in QUANT_OPS})
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
