"""The soak's RSS verdict (pure): growth after warm-up, slope and curve."""

from __future__ import annotations

import pytest

from streams.bench.soak import rss_verdict


def test_flat_after_warmup_passes_even_if_warmup_grew():
    samples = [(n, 200.0 + min(n, 1000) * 0.1) for n in range(0, 10_001, 50)]  # grows 100 MiB, then flat
    v = rss_verdict(samples, 10_000, 0.1)
    assert v["ok"] is True and v["growth_pct"] == 0.0
    assert v["rss_after_warmup_mib"] == v["rss_end_mib"] == 300.0
    assert abs(v["slope_mib_per_1000_requests"]) < 1e-6
    assert [c["answered"] for c in v["curve"]] == list(range(0, 10_001, 1000))


def test_a_steady_leak_fails():
    samples = [(n, 300.0 + n * 0.003) for n in range(0, 10_001, 50)]  # 3 MiB per 1000 requests
    v = rss_verdict(samples, 10_000, 0.1)
    assert v["ok"] is False and v["growth_pct"] > 5
    assert v["slope_mib_per_1000_requests"] == pytest.approx(3.0, rel=0.01)


def test_too_few_samples_give_no_verdict():
    v = rss_verdict([(0, 100.0), (5, 101.0)], 10, 0.1)
    assert v["ok"] is None and "samples" in v["reason"]
