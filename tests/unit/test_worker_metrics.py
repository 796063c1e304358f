"""Worker metrics: Prometheus names and units, and the probe endpoints served beside /metrics."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams.worker.metrics import WorkerMetrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()


def test_hooks_move_the_documented_metrics() -> None:
    m = WorkerMetrics(0)
    m.consumed(3)
    m.batch(4, 8, synth_s=0.5, audio_s=10.0, waits=[0.01, 0.02, 0.0, 0.005])
    m.cache(True)
    m.cache(False)
    m.s3_error()
    m.redis_error("get", OSError("down"))
    m.transaction(False)
    m.completion("ok", 1.5)
    m.completion("failed", None)
    assert m.value("ttsflow_worker_segments_consumed_total") == 3
    assert m.value("ttsflow_worker_batches_total") == 1
    assert m.value("ttsflow_worker_batch_fill_sum") == pytest.approx(0.5)
    assert m.value("ttsflow_worker_queue_wait_seconds_count") == 4
    assert m.value("ttsflow_worker_synth_seconds_sum") == pytest.approx(0.5)
    assert m.value("ttsflow_worker_rtf_sum") == pytest.approx(0.05)
    assert m.value("ttsflow_worker_audio_seconds_total") == 10
    assert m.value("ttsflow_worker_cache_hits_total") == m.value("ttsflow_worker_cache_misses_total") == 1
    assert m.value("ttsflow_worker_s3_errors_total") == m.value("ttsflow_worker_redis_errors_total") == 1
    assert m.value("ttsflow_worker_transaction_aborts_total") == 1
    assert m.value("ttsflow_worker_completions_total", {"status": "ok"}) == 1
    assert m.value("ttsflow_worker_completions_total", {"status": "failed"}) == 1
    assert m.value("ttsflow_worker_e2e_latency_seconds_count") == 1


def test_exposition_parses_and_follows_conventions() -> None:
    m = WorkerMetrics(0)
    families = list(text_string_to_metric_families(m.exposition().decode()))
    names = {f.name for f in families}
    for want in ("ttsflow_worker_segments_consumed", "ttsflow_worker_batch_fill", "ttsflow_worker_e2e_latency_seconds",
                 "ttsflow_worker_transaction_aborts", "ttsflow_worker_rtf", "ttsflow_worker_audio_seconds"):
        assert want in names
    for f in families:
        assert f.name.startswith("ttsflow_worker_")
        assert f.documentation
        if f.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in f.samples)


def test_metrics_healthz_and_readyz_are_served() -> None:
    port = _free_port()
    m = WorkerMetrics(port, stall_s=60)
    try:
        status, body = _get(port, "/metrics")
        assert status == 200 and b"ttsflow_worker_segments_consumed_total" in body
        assert _get(port, "/healthz")[0] == 200
        assert _get(port, "/readyz")[0] == 503  # not ready until the worker has subscribed
        m.ready(True)
        assert _get(port, "/readyz")[0] == 200
        m.identify(transactional_id="ttsflow-workers-host-0", group="ttsflow-workers")
        assert _get(port, "/readyz") == (200, b"ready\ntransactional_id=ttsflow-workers-host-0\n"
                                              b"group=ttsflow-workers\n")
        m.stall_s = 0.0  # the loop stopped going round: not alive, not ready
        assert _get(port, "/healthz")[0] == 503
        assert _get(port, "/readyz")[0] == 503
        assert _get(port, "/nope")[0] == 404
    finally:
        m.close()


def test_a_second_process_on_the_default_port_takes_the_next_free_one() -> None:
    """A stage and a worker started by hand on one machine share TTS_METRICS_PORT's default."""
    import socket
    import urllib.request

    from streams.stage.metrics import StageMetrics

    with socket.socket() as s:  # a free port to start from
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first = WorkerMetrics(port, host="127.0.0.1")
    second = StageMetrics(port, host="127.0.0.1")
    try:
        assert first.port == port
        assert second.port is not None and second.port != port
        body = urllib.request.urlopen(f"http://127.0.0.1:{second.port}/metrics", timeout=5).read()
        assert b"ttsflow_stage_" in body
    finally:
        first.close()
        second.close()
