"""Hot reload: a good version swaps in and serves; a broken one is refused and the old one serves on.

These load the real hibari voice (its int8 model is 8 MB and loads in about a second).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from engine.base import Audio, SynthItem
from engine.reload import HEALTH_SENTENCES, ModelManager, health_check, install_sighup, open_engine
from engine.store import ModelStore, ModelVersion

ITEM = [SynthItem("The old voice keeps talking while the new one loads.", "")]


def _variant(store: ModelStore, version: str, mutate: object) -> ModelVersion:
    """A new hibari version made from the shipped graph by ``mutate(model)``."""
    shipped = store.install_shipped("hibari")

    def write(path: Path, _config: Path | None) -> None:
        model = onnx.load(str(shipped.onnx_path))
        mutate(model)  # type: ignore[operator]
        onnx.save_model(model, str(path))

    return store.add("hibari", version, write=write, precision="int8", source="test variant")


def _offset_outputs(names: tuple[str, ...], value: float, op: str = "Add"):
    """Route graph outputs ``names`` through ``op(x, value)``: -40 on log-magnitudes = silence."""

    def mutate(model: onnx.ModelProto) -> None:
        g = model.graph
        c = f"ttsflow_test_const_{op}"
        g.initializer.append(numpy_helper.from_array(np.array(value, np.float32), c))
        for name in names:
            inner = name + "_before_test"
            for n in g.node:
                n.output[:] = [inner if o == name else o for o in n.output]
                n.input[:] = [inner if i == name else i for i in n.input]
            g.node.append(helper.make_node(op, [inner, c], [name], name=f"test_{op}_{name}"))

    return mutate


@pytest.fixture()
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path)


@pytest.fixture()
def manager(store: ModelStore):
    m = ModelManager(store, "hibari", threads=1)
    m.start()
    yield m
    m.close()


def _speaks(manager: ModelManager) -> Audio:
    out = manager.synthesize(ITEM)[0]
    assert isinstance(out, Audio), out
    assert len(out.samples) > 0.5 * out.sample_rate
    return out


def test_start_loads_the_shipped_version_and_reports_cold_start(manager: ModelManager) -> None:
    assert manager.version.version.endswith("-int8")
    r = manager.last_result
    assert r is not None and r.swapped and r.cold_start_s > 0
    assert r.health is not None and r.health.ok
    # the health check's seconds per character of the voice: a worker's first cost estimate
    chars = sum(len(x) for x in HEALTH_SENTENCES)
    assert manager.seconds_per_char == {manager.default_voice: pytest.approx(r.health.seconds / chars)}
    _speaks(manager)


def test_reload_to_a_good_version_swaps_and_keeps_serving(store: ModelStore, manager: ModelManager) -> None:
    old_engine = manager.engine
    fp32, _ = store.convert("hibari", "fp32")
    assert manager.reload().reason == "unchanged"        # current still names the old version
    store.use("hibari", fp32.version)
    r = manager.reload()
    assert r.swapped, r.reason
    assert manager.version.version == fp32.version and manager.engine.info.precision == "fp32"
    assert manager.engine is not old_engine
    _speaks(manager)


@pytest.mark.parametrize("kind", ["garbage", "silent", "nan", "truncated"])
def test_a_broken_version_is_refused_and_the_old_one_serves(store: ModelStore, manager: ModelManager,
                                                            kind: str) -> None:
    serving = manager.version.ref
    if kind == "garbage":
        bad = store.add("hibari", "bad-garbage", write=lambda p, _c: p.write_bytes(os.urandom(4096)) and None,
                        precision="int8", source="test")
        expect = "load failed"
    elif kind == "silent":
        bad = _variant(store, "bad-silent", _offset_outputs(("lh", "ln", "lr"), -40.0))
        expect = "silent"
    elif kind == "nan":
        bad = _variant(store, "bad-nan", _offset_outputs(("lh",), float("nan"), "Mul"))
        expect = "non-finite"          # caught at warm-up or by the health check
    else:
        bad = _variant(store, "bad-truncated", lambda m: None)
        data = bad.onnx_path.read_bytes()
        bad.onnx_path.write_bytes(data[: len(data) // 3])
        expect = "does not match its manifest"
    store.use("hibari", bad.version)
    r = manager.reload()
    assert not r.swapped
    assert expect in r.reason, r.reason
    assert r.candidate == bad.ref and r.serving == serving
    assert manager.version.ref == serving
    _speaks(manager)


def test_serving_continues_while_a_reload_loads(store: ModelStore) -> None:
    """A synthesize call made between the start and the end of a reload is answered by the old engine."""
    loading = threading.Event()
    release = threading.Event()

    def slow_loader(mv: ModelVersion):
        if mv.precision == "fp32":       # only the reload's candidate waits
            loading.set()
            assert release.wait(60), "test never released the loader"
        return open_engine(mv, threads=1)

    manager = ModelManager(store, "hibari", loader=slow_loader)
    manager.start()
    try:
        fp32, _ = store.convert("hibari", "fp32")
        store.use("hibari", fp32.version)
        results = []
        t = threading.Thread(target=lambda: results.append(manager.reload()))
        t.start()
        assert loading.wait(60)
        during = manager.synthesize(ITEM)[0]                 # the reload is mid-load right now
        assert isinstance(during, Audio)
        assert manager.version.precision == "int8"
        assert manager.reload().reason == "a reload is already running"
        release.set()
        t.join(120)
        assert results and results[0].swapped, results
        assert manager.version.precision == "fp32"
        _speaks(manager)
    finally:
        release.set()
        manager.close()


def test_an_engine_leased_during_the_swap_is_closed_only_when_released(store: ModelStore,
                                                                       manager: ModelManager) -> None:
    fp32, _ = store.convert("hibari", "fp32")
    store.use("hibari", fp32.version)
    with manager.lease() as old:
        assert manager.reload().swapped
        # The old engine still works for the batch that holds it.
        assert isinstance(old.synthesize(ITEM)[0], Audio)
        assert old.backend._session is not None  # type: ignore[attr-defined]
    assert old.backend._session is None  # type: ignore[attr-defined]


def test_sighup_only_requests_and_the_loop_reloads(store: ModelStore, manager: ModelManager) -> None:
    fp32, _ = store.convert("hibari", "fp32")
    store.use("hibari", fp32.version)
    previous = install_sighup(manager)
    try:
        assert manager.maybe_reload() is None                # nothing asked yet
        os.kill(os.getpid(), signal.SIGHUP)
        assert manager.reload_pending                        # the handler ran, did no work
        assert manager.version.precision == "int8"
        r = manager.maybe_reload()
        assert r is not None and r.swapped
        assert not manager.reload_pending
        assert manager.version.precision == "fp32"
    finally:
        signal.signal(signal.SIGHUP, previous)


class _FakeEngine:
    """Returns fixed audio: the health check's rules, tested without a model."""

    def __init__(self, samples_per_char: int, amplitude: float) -> None:
        self.spc, self.amp = samples_per_char, amplitude

    def synthesize(self, items: list[SynthItem]) -> list[Audio]:
        out = []
        for it in items:
            n = self.spc * len(it.text)
            out.append(Audio((self.amp * np.sin(np.arange(n) * 0.05)).astype(np.float32), 16000))
        return out


def test_health_check_rules() -> None:
    assert health_check(_FakeEngine(1100, 0.3)).ok                       # ~0.07 s per character
    silent = health_check(_FakeEngine(1100, 1e-4))
    assert not silent.ok and "silent" in silent.reason
    short = health_check(_FakeEngine(50, 0.3))
    assert not short.ok and "implausible duration" in short.reason
    long = health_check(_FakeEngine(16000, 0.3))
    assert not long.ok and "implausible duration" in long.reason


def test_the_manager_stands_in_for_an_engine(store: ModelStore, manager: ModelManager) -> None:
    """A worker written against ``Engine`` (phases, info) can take the manager unchanged."""
    assert manager.info.version == manager.version.version
    assert manager.sample_rate == 24000
    prepared = manager.prepare_many(ITEM)
    raw = manager.infer_batch(prepared)
    (audio,) = manager.postprocess_many(raw, prepared)
    assert isinstance(audio, Audio) and len(audio.samples) > 0
    fp32, _ = store.convert("hibari", "fp32")
    store.use("hibari", fp32.version)
    manager.request_reload()
    assert manager.maybe_reload().swapped  # type: ignore[union-attr]
    assert manager.info.precision == "fp32"
