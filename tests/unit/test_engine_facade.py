"""The engine facade's batching logic, with a scripted backend (pure, no model)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from engine import Audio, Engine, Failure, ModelInfo, SynthItem
from engine.base import Backend, Prepared
from engine.errors import BackendError, ItemError, ModelLoadError
from engine.providers import choose_providers
from engine.registry import load_engine, resolve_model


class Scripted(Backend):
    """Speaks len(text) samples of 0.1; 'bad' fails prepare, 'boom' fails its whole batch."""

    info = ModelInfo(name="scripted", version="1", precision="fp32", provider="CPUExecutionProvider")
    sample_rate = 1000
    voices = ("v",)
    default_voice = "v"

    def __init__(self, native: bool) -> None:
        self.native_batching = native
        self.calls: list[list[str]] = []

    def prepare(self, item: SynthItem) -> Prepared:
        if "bad" in item.text:
            raise ItemError("bad text")
        return Prepared(item, item.text, len(item.text))

    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        self.calls.append([p.item.text for p in batch])
        if any("boom" in p.payload for p in batch):
            raise BackendError("model exploded")
        return [np.full(p.length, 0.1, np.float32) for p in batch]

    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        if "post" in prepared.item.text:
            raise ItemError("dsp failed")
        return raw


def test_native_batches_group_by_bucket_and_speed_and_cap_at_max_batch() -> None:
    be = Scripted(native=True)
    eng = Engine(be, max_batch=2)
    items = [SynthItem("a" * 10, "v"), SynthItem("b" * 12, "v"), SynthItem("c" * 11, "v", 1.5),
             SynthItem("d" * 40, "v"), SynthItem("e" * 9, "v")]
    out = eng.synthesize(items)
    assert [len(r.samples) for r in out] == [10, 12, 11, 40, 9]  # type: ignore[union-attr]
    assert sorted(map(sorted, be.calls)) == sorted([["a" * 10, "b" * 12], ["e" * 9], ["c" * 11], ["d" * 40]])


def test_backend_error_fails_only_its_sub_batch() -> None:
    be = Scripted(native=True)
    eng = Engine(be)
    out = eng.synthesize([SynthItem("short boom", "v"), SynthItem("short ok!!", "v"),
                          SynthItem("a much longer sentence in another bucket", "v")])
    assert isinstance(out[0], Failure) and isinstance(out[1], Failure)
    assert out[0].code == out[1].code == "engine_error" and "exploded" in out[0].message
    assert isinstance(out[2], Audio)


def test_item_errors_in_prepare_and_postprocess_fail_only_that_item() -> None:
    eng = Engine(Scripted(native=False))
    out = eng.synthesize([SynthItem("fine", "v"), SynthItem("bad", "v"), SynthItem("post", "v"),
                          SynthItem("fine too", "")])
    assert [type(r).__name__ for r in out] == ["Audio", "Failure", "Failure", "Audio"]
    assert out[1].code == "synthesis_failed" and out[1].message == "bad text"
    assert out[3].sample_rate == 1000  # type: ignore[union-attr]


def test_non_native_backend_gets_plain_chunks_in_order() -> None:
    be = Scripted(native=False)
    Engine(be, max_batch=3).synthesize([SynthItem(t, "v", s) for t, s in
                                        [("x", 1.0), ("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", 2.0), ("z", 1.0), ("w", 1.0)]])
    assert be.calls == [["x", "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", "z"], ["w"]]


def test_choose_providers_always_ends_with_cpu_and_drops_missing_ones() -> None:
    assert choose_providers("auto")[-1] == "CPUExecutionProvider"
    assert choose_providers("cpu") == ["CPUExecutionProvider"]
    assert choose_providers(["NoSuchExecutionProvider"]) == ["CPUExecutionProvider"]


def test_registry_refuses_unknown_backends_and_missing_precisions() -> None:
    with pytest.raises(ModelLoadError, match="unknown backend 'nope'"):
        load_engine("nope")
    with pytest.raises(ModelLoadError, match="ships only int8"):
        resolve_model("hibari", "fp16", None)
    assert resolve_model("piper", "auto", None).precision == "fp32"
    with pytest.raises(ModelLoadError, match="not found"):
        load_engine("hibari", model_path="/nonexistent/model.onnx")


def test_session_reports_the_provider_that_really_runs(caplog: pytest.LogCaptureFixture) -> None:
    """Asking for a provider this build lacks still loads, and says it runs on CPU."""
    import onnxruntime as ort

    from engine.hibari import HibariBackend

    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    with caplog.at_level(logging.INFO, logger="ttsflow.engine"):
        be = HibariBackend(providers=wanted, threads=1)
    actual = be._session.get_providers()[0]
    assert be.info.provider == actual
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert actual == "CPUExecutionProvider"
        assert any("provider_unavailable" in r.message for r in caplog.records)
    assert any(f"provider={actual}" in r.message for r in caplog.records if "session_ready" in r.message)
    be.close()
