"""Every ttsflow metrics registry passes ``promtool check metrics``.

Each process keeps its metrics in one module with its own registry (worker:
``streams.worker.metrics``, stage: ``streams.stage.metrics``, lag exporter:
``streams.ops.lag.exporter``). The test exercises every hook so labelled series exist, renders the
registry with ``generate_latest`` and pipes it to promtool, which rejects names, types,
units and help text that break Prometheus conventions. promtool ships in Debian's
``prometheus`` package; without it the test is skipped and says so.
"""

from __future__ import annotations

import importlib
import inspect
import shutil
import subprocess
import typing
from pathlib import Path
from typing import Any

import pytest

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus; .ci/run installs it)")

ROOT = Path(__file__).resolve().parents[2]


def promtool_check(text: bytes) -> subprocess.CompletedProcess[bytes]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=60)


def _families(text: bytes) -> set[str]:
    return {line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE ")}


def _worker_exposition() -> bytes:
    from streams.worker.metrics import WorkerMetrics

    m = WorkerMetrics(0)
    m.consumed(3)
    m.skipped("already_done")
    m.bad_segment()
    m.batch(4, 8, 0.2, 2.0, [0.01, 0.02])
    m.cache(True)
    m.cache(False)
    m.s3_error()
    m.redis_error()
    m.transaction(True)
    m.transaction(False)
    m.completion("ok", 1.2)
    m.completion("failed", None)
    m.inflight(3)
    m.assigned(2)
    m.heartbeat()
    m.ready(True)
    try:
        return m.exposition()
    finally:
        m.close()


def _lag_exposition() -> bytes:
    from streams.ops.lag import GroupLag, LagExporter, PartitionLag

    e = LagExporter()
    e.update(GroupLag(group="ttsflow-workers", topic="tts.segments", state="STABLE", members=2,
                      partitions=[PartitionLag("tts.segments", 0, 5, 10, 5, "WARN"),
                                  PartitionLag("tts.segments", 1, None, 3, None, "OK")],
                      total_lag=5, keda_lag=8, input_partitions=2, desired_replicas=1, status="WARN",
                      sampled_at=1.0))
    e.polls.inc()
    e.errors.inc()
    return e.render()


_SAMPLE_ARGS: dict[Any, Any] = {int: 2, float: 0.25, str: "ok", bool: True, bytes: b"x"}


def _arg_for(annotation: Any, name: str) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, typing.Sequence):
        return [0.1, 0.2]
    if origin is dict:
        return {}
    for typ, value in _SAMPLE_ARGS.items():
        if annotation is typ or annotation == typ.__name__:
            return value
    if isinstance(annotation, str) and "float" in annotation:
        return 0.25
    if isinstance(annotation, str) and "int" in annotation:
        return 2
    if isinstance(annotation, str) and ("list" in annotation or "Sequence" in annotation):
        return [0.1, 0.2]
    return "ok" if "status" in name or "reason" in name or "kind" in name else 1


def _generic_exposition(module_name: str) -> bytes:
    """Instantiate the module's metrics class without serving, call every public hook with
    sample arguments, render its registry."""
    from prometheus_client import CollectorRegistry, generate_latest

    mod = importlib.import_module(module_name)
    for _, cls in inspect.getmembers(mod, inspect.isclass):
        if cls.__module__ != module_name or not cls.__name__.endswith("Metrics"):
            continue
        try:
            obj = cls(0)
        except TypeError:
            obj = cls()
        registry = getattr(obj, "registry", None)
        assert isinstance(registry, CollectorRegistry), f"{cls.__name__} keeps no own registry"
        for name, fn in inspect.getmembers(obj, inspect.ismethod):
            if name.startswith("_") or name in {"close", "exposition", "value", "serve", "start", "stop", "render"}:
                continue
            hints = typing.get_type_hints(fn) if fn.__annotations__ else {}
            params = [p for p in inspect.signature(fn).parameters.values()
                      if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            try:
                fn(*[_arg_for(hints.get(p.name, p.annotation), p.name) for p in params])
            except (TypeError, ValueError):
                continue  # a hook whose arguments cannot be guessed: its series may stay absent
        out = generate_latest(registry)
        close = getattr(obj, "close", None)
        if callable(close):
            close()
        return out
    raise AssertionError(f"{module_name} has no *Metrics class")


def _modules() -> list[str]:
    return sorted(f"streams.{p.parent.name}.metrics" for p in (ROOT / "streams").glob("*/metrics.py"))


@needs_promtool
def test_worker_metrics_pass_promtool() -> None:
    text = _worker_exposition()
    assert "ttsflow_worker_batch_fill_bucket" in text.decode()
    res = promtool_check(text)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()


@needs_promtool
def test_lag_exporter_passes_promtool() -> None:
    text = _lag_exposition()
    assert {"ttsflow_lag_messages", "ttsflow_lag_desired_replicas", "ttsflow_lag_status"} <= _families(text)
    res = promtool_check(text)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()


@needs_promtool
@pytest.mark.parametrize("module", _modules())
def test_every_metrics_module_passes_promtool(module: str) -> None:
    text = _worker_exposition() if module == "streams.worker.metrics" else _generic_exposition(module)
    assert _families(text), f"{module} rendered no metric families"
    res = promtool_check(text)
    assert res.returncode == 0, f"{module}:\n" + (res.stdout + res.stderr).decode()


@needs_promtool
def test_promtool_rejects_a_bad_exposition() -> None:
    """The check can fail: a counter without _total and without help is refused."""
    bad = b"# TYPE ttsflow_bad_requests counter\nttsflow_bad_requests 1\n"
    assert promtool_check(bad).returncode != 0


def test_all_metric_names_follow_conventions() -> None:
    """Without promtool too: ttsflow_ prefix and base units, on every registry we can render."""
    texts = [_worker_exposition(), _lag_exposition()]
    texts += [_generic_exposition(m) for m in _modules() if m != "streams.worker.metrics"]
    for text in texts:
        for fam in _families(text):
            assert fam.startswith("ttsflow_"), fam
            assert not fam.endswith(("_ms", "_milliseconds", "_kb", "_mb")), f"{fam}: use base units"
