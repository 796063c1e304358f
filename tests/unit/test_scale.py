"""KEDA's Kafka rule and the scaling simulation (pure, deterministic)."""

from __future__ import annotations

import itertools
import json

import pytest

from streams.ops.keda import KedaRule, keda_desired_replicas, partition_lag
from streams.ops.scale import SimParams, main, recommend, simulate


def test_rule_is_ceil_of_lag_over_threshold() -> None:
    rule = KedaRule(lag_threshold=10)
    assert keda_desired_replicas(1, partitions=100, rule=rule) == 1
    assert keda_desired_replicas(10, partitions=100, rule=rule) == 1
    assert keda_desired_replicas(11, partitions=100, rule=rule) == 2
    assert keda_desired_replicas(95, partitions=100, rule=rule) == 10


def test_activation_threshold_keeps_zero_replicas_below_it() -> None:
    rule = KedaRule(lag_threshold=10, activation_lag_threshold=5)
    assert keda_desired_replicas(0, partitions=4, rule=rule) == 0
    assert keda_desired_replicas(5, partitions=4, rule=rule) == 0
    assert keda_desired_replicas(6, partitions=4, rule=rule) == 1
    # a replica floor wins over deactivation
    floor = KedaRule(lag_threshold=10, activation_lag_threshold=5, min_replicas=2)
    assert keda_desired_replicas(0, partitions=4, rule=floor) == 2


def test_never_more_replicas_than_partitions_unless_idle_consumers_allowed() -> None:
    rule = KedaRule(lag_threshold=10)
    assert keda_desired_replicas(10_000, partitions=4, rule=rule) == 4
    # KEDA's integer-division cap would let 45/10 through as 5; the documented cap holds
    assert keda_desired_replicas(45, partitions=4, rule=rule) == 4
    idle = KedaRule(lag_threshold=10, allow_idle_consumers=True)
    assert keda_desired_replicas(10_000, partitions=4, rule=idle) == 100  # maxReplicaCount
    assert keda_desired_replicas(45, partitions=4, rule=idle) == 5
    with_lag = KedaRule(lag_threshold=10, limit_to_partitions_with_lag=True)
    assert keda_desired_replicas(10_000, partitions=8, rule=with_lag, partitions_with_lag=3) == 3


def test_partition_lag_without_committed_offset_follows_reset_policy() -> None:
    assert partition_lag(100, 40) == 60
    assert partition_lag(100, None) == 1
    assert partition_lag(100, None, offset_reset_policy="earliest") == 100
    assert partition_lag(100, None, scale_to_zero_on_invalid_offset=True) == 0


def test_rule_rejects_bad_threshold() -> None:
    with pytest.raises(ValueError):
        KedaRule(lag_threshold=0)


def _day(partitions: int, capacity: float = 50.0) -> SimParams:
    return SimParams(trace="diurnal", rate_per_hour=100_000, capacity=capacity, segments_per_request=3,
                     partitions=partitions, rule=KedaRule(lag_threshold=500), duration_s=6 * 3600)


def test_enough_capacity_keeps_lag_bounded() -> None:
    # peak 100k/h x 3 = 83 segments/s; 8 partitions x 50/s = 400/s of room
    res = simulate(_day(partitions=8))
    assert not res.delay_unbounded
    assert res.served_fraction > 0.999
    assert res.peak_lag_segments < 8 * 500 * 2
    assert res.worst_queue_delay_s < 600
    assert res.max_replicas <= 8


def test_undersized_partition_count_shows_growing_lag() -> None:
    # 1 partition x 10 segments/s < the 17-83 segments/s that arrive: lag only grows
    res = simulate(_day(partitions=1, capacity=10.0))
    lags = [s["lag_segments"] for s in res.samples]
    assert all(b >= a for a, b in itertools.pairwise(lags))
    assert res.final_lag_segments > 100_000
    assert res.delay_unbounded
    assert res.max_replicas == 1


def test_simulation_is_deterministic() -> None:
    assert simulate(_day(partitions=4)) == simulate(_day(partitions=4))


def test_burst_scales_up_then_back_down() -> None:
    p = SimParams(trace="burst", rate_per_hour=20_000, capacity=10, segments_per_request=2, partitions=16,
                  rule=KedaRule(lag_threshold=100), sample_s=60)
    res = simulate(p)
    during = [s["replicas"] for s in res.samples if 3600 <= s["t_s"] < 4200]
    after = [s["replicas"] for s in res.samples if s["t_s"] >= 3 * 3600 - 600]
    assert max(during) > max(after)
    assert res.final_lag_segments < 100


def test_recommendation_meets_its_target_when_reachable() -> None:
    p = _day(partitions=1)
    rec = recommend(p, target_delay_s=300)
    assert rec["met"] is True
    assert rec["worst_queue_delay_s"] <= 300
    assert rec["partitions"] >= rec["replicas_at_peak"]


def test_cli_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--json", "--trace", "burst", "--rate-per-hour", "1000", "--partitions", "2",
               "--duration-s", "7200", "--capacity", "5"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"samples", "peak_lag_segments", "worst_queue_delay_s", "recommendation"} <= set(out)


# --- Burrow-style status (streams.ops.lag.model.burrow_status): pure over a window of samples ---------

def _w(*rows: tuple[int | None, int]) -> list[tuple[float, int | None, int]]:
    return [(float(i), c, lag) for i, (c, lag) in enumerate(rows)]


def test_burrow_ok_when_lag_is_zero_now_or_anywhere_in_the_window() -> None:
    from streams.ops.lag import burrow_status

    assert burrow_status(_w((10, 5), (10, 5), (10, 0)), members=1) == "OK"
    assert burrow_status(_w((10, 0), (10, 3), (10, 3)), members=1) == "OK"


def test_burrow_stop_stall_rewind_warn() -> None:
    from streams.ops.lag import burrow_status

    assert burrow_status(_w((10, 5), (12, 4)), members=0) == "STOP"  # lag, nobody consuming
    assert burrow_status(_w((10, 5), (10, 7), (10, 9)), members=2) == "STALL"  # offset frozen
    assert burrow_status(_w((10, 5), (8, 7)), members=2) == "REWIND"
    assert burrow_status(_w((10, 5), (12, 5), (14, 6)), members=2) == "WARN"  # moving, lag not shrinking
    assert burrow_status(_w((10, 9), (15, 6), (18, 7)), members=2) == "OK"  # lag went down once
    assert burrow_status(_w((10, 5)), members=2) == "OK"  # one sample shows no trend


def test_group_lag_is_computed_from_offsets_without_kafka() -> None:
    from streams.ops.keda import KedaRule
    from streams.ops.lag.model import LagWindows, OffsetSample, group_lag, needs_marker_probe

    windows = LagWindows(3)
    offsets = [OffsetSample("seg", 0, 100, 40, None), OffsetSample("seg", 1, 10, None, None),
               OffsetSample("seg", 2, 51, 50, 0), OffsetSample("old", 0, 7, 7, None)]
    g = group_lag("workers", "seg", state="STABLE", member_ids=[], input_partitions=3, offsets=offsets,
                  windows=windows, rule=KedaRule(lag_threshold=20, activation_lag_threshold=0), now=1.0)
    assert [r.lag for r in g.partitions] == [60, None, 1, 0]
    assert g.total_lag == 61 and g.keda_lag == 60 + 10 + 1  # no commit counts its whole log (earliest)
    assert g.desired_replicas == 3  # ceil(71 / 20) = 4, capped at the 3 input partitions
    assert g.records_waiting == 60 + 10 + 0 + 0  # the marker-only tail waits for nothing
    assert g.status == "STOP"  # lag and no live member
    assert needs_marker_probe(50, 51) and not needs_marker_probe(40, 100) and not needs_marker_probe(None, 3)
