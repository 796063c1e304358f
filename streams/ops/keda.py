"""KEDA's Kafka-scaler rule: the replicas KEDA + HPA ask for at a consumer group's lag.

``keda_desired_replicas`` is the one implementation of the rule (``ttsflow lag`` and
the simulation both call it), written from KEDA's ``pkg/scalers/kafka_scaler.go``:

* per-partition lag = end offset - committed offset; a partition with no committed
  offset counts 1 under ``offsetResetPolicy: latest`` (0 with
  ``scaleToZeroOnInvalidOffset``) and its whole end offset under ``earliest``;
* the trigger is *active* only while total lag > ``activationLagThreshold``; an inactive
  trigger lets KEDA take the deployment to ``minReplicaCount`` (0 by default);
* the metric is the total lag, targeted as an AverageValue of ``lagThreshold`` per
  replica, so the HPA asks for ``ceil(total lag / lagThreshold)`` replicas;
* unless ``allowIdleConsumers`` is true, the metric is capped at partitions x threshold
  (with ``limitToPartitionsWithLag``, at partitions-with-lag x threshold): a consumer
  beyond the partition count would sit idle. KEDA caps with integer division, which
  lets ``ceil`` reach cap+1 for a lag just above the cap; we clamp to the cap, which is
  what KEDA documents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["KedaRule", "keda_desired_replicas", "partition_lag"]


@dataclass(frozen=True, slots=True)
class KedaRule:
    """The kafka trigger's metadata plus the ScaledObject's replica bounds."""

    lag_threshold: int = 1000
    activation_lag_threshold: int = 0
    allow_idle_consumers: bool = False
    limit_to_partitions_with_lag: bool = False
    min_replicas: int = 0
    max_replicas: int = 100

    def __post_init__(self) -> None:
        if self.lag_threshold < 1:
            raise ValueError("lag_threshold must be >= 1")
        if self.activation_lag_threshold < 0:
            raise ValueError("activation_lag_threshold must be >= 0")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 0 <= min_replicas <= max_replicas")


def partition_lag(end_offset: int, committed: int | None, *, offset_reset_policy: str = "latest",
                  scale_to_zero_on_invalid_offset: bool = False) -> int:
    """One partition's lag as KEDA counts it (``committed`` None = no committed offset)."""
    if committed is None or committed < 0:
        if scale_to_zero_on_invalid_offset:
            return 0
        return 1 if offset_reset_policy == "latest" else max(end_offset, 0)
    return max(end_offset - committed, 0)


def keda_desired_replicas(total_lag: float, *, partitions: int, rule: KedaRule,
                          partitions_with_lag: int | None = None) -> int:
    """Replicas KEDA + HPA ask for at this total lag (see the module docstring)."""
    if total_lag <= rule.activation_lag_threshold:
        # Inactive trigger: KEDA scales to minReplicaCount (to zero after its cooldown).
        return rule.min_replicas
    want = math.ceil(total_lag / rule.lag_threshold)
    if not rule.allow_idle_consumers or rule.limit_to_partitions_with_lag:
        upper = partitions
        if rule.limit_to_partitions_with_lag and partitions_with_lag is not None:
            upper = partitions_with_lag
        want = min(want, upper)
    return max(min(want, rule.max_replicas), rule.min_replicas, 1)
