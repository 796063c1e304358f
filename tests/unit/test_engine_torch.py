"""The torch provider (TTS_PROVIDERS=torch): the shipped voice graphs through onnx2torch on the CPU.

Compared with onnxruntime on the same graph (Piper with noise off; hibari's fp32 graph
dequantized from the shipped int8 one): same length, envelope correlation, and the offline
recognizer's word error. Our own converters are checked op by op against onnxruntime.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from engine import Audio, Engine, Failure, SynthItem
from engine.convert import compare
from engine.errors import ModelLoadError

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "onnx2torch")),
    reason="the torch extra (torch, onnx2torch) is not installed: pip install -e '.[torch]'")

SENTENCES = ("The quick brown fox jumps over the lazy dog.",
             "Please call me back as soon as you get this message.",
             "Can you tell me where the nearest train station is?")


def _audio(r: Audio | Failure) -> Audio:
    assert isinstance(r, Audio), r
    return r


def _agree(ref: Engine, cand: Engine, texts: tuple[str, ...]) -> list[Audio]:
    items = [SynthItem(t, "") for t in texts]
    a = [_audio(r) for r in ref.synthesize(items)]
    b = [_audio(r) for r in cand.synthesize(items)]
    for t, x, y in zip(texts, a, b, strict=True):
        row = compare(t, x.samples, y.samples, x.sample_rate)
        assert len(x.samples) == len(y.samples), (t, len(x.samples), len(y.samples))
        assert row.envelope_corr >= 0.99, row
    return b


@pytest.mark.skipif(importlib.util.find_spec("piper") is None, reason="the piper extra is not installed")
def test_piper_on_torch_matches_onnxruntime_batched_and_is_intelligible() -> None:
    from engine.piper import PiperBackend
    from tests.support.asr import word_error_many

    ref = Engine(PiperBackend(providers="cpu", threads=2, noise_scale=0.0, noise_w=0.0), max_batch=8)
    cand = Engine(PiperBackend(providers="torch-cpu", threads=2, noise_scale=0.0, noise_w=0.0), max_batch=8)
    try:
        assert cand.info.provider == "torch-cpu" and cand.info.precision == "fp32"
        assert cand.native_batching  # the same padded buckets as onnxruntime: a batch is one model call
        out = _agree(ref, cand, SENTENCES)
        wer = word_error_many([a.samples for a in out], cand.sample_rate, SENTENCES)
        print(f"piper on torch-cpu: word error {wer:.3f} on {len(SENTENCES)} sentences")
        assert wer <= 0.25
        # noise on (the RandomNormalLike converter): still speech of the same length class
        noisy = Engine(PiperBackend(providers="torch-cpu", threads=2), max_batch=8)
        try:
            n = _audio(noisy.synthesize([SynthItem(SENTENCES[0], "")])[0])
            assert np.isfinite(n.samples).all() and 0.5 < n.duration_s / out[0].duration_s < 2.0
        finally:
            noisy.close()
    finally:
        ref.close()
        cand.close()


def test_hibari_on_torch_runs_int8_as_fp32_and_matches_onnxruntime_fp32(tmp_path: Path) -> None:
    import onnx

    from engine.convert.dequant import dequantize
    from engine.hibari import HibariBackend, _shipped_model
    from tests.support.asr import word_error_many

    fp32 = tmp_path / "hibari-fp32.onnx"
    onnx.save(dequantize(onnx.load(str(_shipped_model())))[0], str(fp32))
    ref = Engine(HibariBackend(fp32, providers="cpu", threads=2))
    cand = Engine(HibariBackend(providers="torch-cpu", threads=2))  # the shipped int8 graph, dequantized
    try:
        assert cand.info.provider == "torch-cpu" and cand.info.precision == "fp32"
        out = _agree(ref, cand, SENTENCES)
        wer = word_error_many([a.samples for a in out], cand.sample_rate, SENTENCES)
        print(f"hibari on torch-cpu: word error {wer:.3f}")
        assert wer <= 0.25
    finally:
        ref.close()
        cand.close()


def _run_both(model: object, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    import onnxruntime as ort

    from engine.torch_session import TorchSession

    data = model.SerializeToString()  # type: ignore[attr-defined]
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = TorchSession(data, provider="torch-cpu").run(None, feeds)
    return want, got


def test_own_converters_match_onnxruntime() -> None:
    """NonZero ([rank, N]), CumSum (forward by default, and reverse/exclusive), Clip with a computed bound."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in
            (("nz", TensorProto.INT64), ("cs", TensorProto.FLOAT), ("csr", TensorProto.FLOAT), ("clip", TensorProto.FLOAT))]
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("CumSum", ["x", "axis"], ["cs"]),
        helper.make_node("CumSum", ["x", "axis"], ["csr"], reverse=1, exclusive=1),
        helper.make_node("ReduceMin", ["x"], ["lo"], keepdims=0),
        helper.make_node("Constant", [], ["hi"], value=helper.make_tensor("v", TensorProto.FLOAT, [], [0.5])),
        helper.make_node("Clip", ["x", "lo", "hi"], ["clip"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs, [axis]), opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.asarray([[0, 1.5, 0, -2, 3], [0.25, 0, 0, 4, 0]], np.float32)}
    want, got = _run_both(model, feeds)
    for w, g in zip(want, got, strict=True):
        assert w.shape == g.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_unconvertible_op_and_cpu_fp16_are_refused_with_a_reason() -> None:
    from onnx import TensorProto, helper

    from engine.torch_session import TorchSession, torch_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    odd = helper.make_model(helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
                                              "g", [x], [y]),
                            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(ModelLoadError, match=r"com\.example\.Frobnicate"):
        TorchSession(odd.SerializeToString(), provider="torch-cpu")
    w = helper.make_tensor("w", TensorProto.FLOAT16, [2], np.ones(2, np.float16).tobytes(), raw=True)
    x16 = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])
    y16 = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])
    half = helper.make_model(helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "g", [x16], [y16], [w]),
                             opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelLoadError, match="CUDA only"):
        torch_model(half, device="cpu")
