"""The lag model: what a group's lag is, its Burrow-style status and KEDA's desired replicas.

Pure: no Kafka. The reader (:mod:`streams.ops.lag.reader`) hands it offsets; everything
computed from them is here and is tested without a broker.

* LAG = LOG-END-OFFSET - CURRENT-OFFSET, or none when nothing is committed.
* Desired replicas use :func:`streams.ops.keda.keda_desired_replicas` on KEDA's lag (a
  partition of the input topic without a committed offset counts as its whole log under
  ``offsetResetPolicy: earliest``, the worker's ``auto.offset.reset``), capped at the
  input topic's partition count.
* ``records`` (committed records a read_committed reader would still get) drives the
  status, so an idle transactional group (a lag of 1: the commit marker) is OK, not STALL.
  (KEDA counts the markers: the ScaledObject's activationLagThreshold must be >= the
  partition count or the workers never scale to zero.)
* Status follows Burrow's evaluation rules over a window of samples (oldest first):
  OK when the lag is zero now or was zero anywhere in the window; STOP when there is lag
  and the group has no live member (Burrow: offsets stopped being committed); REWIND
  when a committed offset went backwards; STALL when the committed offset did not move
  over the window although there was lag; WARN when the offset moved but the lag never
  decreased; OK otherwise. A group takes its worst partition's status.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from streams.ops.keda import KedaRule, keda_desired_replicas, partition_lag
from streams.settings import KafkaSettings, StageSettings

__all__ = ["STATUSES", "GroupLag", "GroupMember", "LagWindows", "OffsetSample", "PartitionLag", "burrow_status",
           "default_groups", "group_lag", "needs_marker_probe"]

STATUSES = ("OK", "WARN", "REWIND", "STALL", "STOP")  # ascending severity
_MARKER_PROBE_MAX = 8  # a lag this short is read to see whether it is only transaction markers


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # None: the group has no committed offset here
    end_offset: int
    lag: int | None
    status: str = "OK"
    # Committed records a read_committed consumer would still get. Less than ``lag`` when
    # the tail is transaction markers: the worker commits the offset after its last record,
    # so a caught-up partition of a transactional topic keeps a lag of 1 (the commit marker).
    records: int | None = None


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One live member as the coordinator describes it: for a worker ``client_id`` is its
    transactional id, for a stage ``instance_id`` (and ``client_id``) its static member id."""

    client_id: str
    instance_id: str | None
    host: str
    partitions: list[int]


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    topic: str  # the input topic that caps replicas
    state: str  # the group's coordinator state (STABLE, EMPTY, ...)
    members: int
    partitions: list[PartitionLag]
    total_lag: int  # sum of known lags, as kafka-consumer-groups would add them up
    keda_lag: int  # KEDA's metric before the partition cap
    input_partitions: int
    desired_replicas: int
    status: str
    sampled_at: float = field(default=0.0)
    records_waiting: int = 0  # sum of the partitions' ``records``: work actually waiting
    member_ids: list[GroupMember] = field(default_factory=list)  # who holds what (ids from the coordinator)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float
    committed: int | None
    lag: int


def burrow_status(window: Sequence[_Sample] | Sequence[tuple[float, int | None, int]], *, members: int) -> str:
    """Burrow's partition evaluation over ``window`` (oldest first), adapted to sampling.

    Burrow sees every commit and its timestamp; a sampler only sees committed offsets, so
    "stopped committing" is read from group membership: lag with no live member is STOP.
    """
    samples = [s if isinstance(s, _Sample) else _Sample(*s) for s in window]
    if not samples:
        return "OK"
    now = samples[-1]
    if now.lag <= 0:
        return "OK"
    if members == 0:
        return "STOP"
    if any(s.lag <= 0 for s in samples):
        return "OK"
    offsets = [s.committed if s.committed is not None else -1 for s in samples]
    if any(b < a for a, b in itertools.pairwise(offsets)):
        return "REWIND"
    if len(samples) < 2:
        return "OK"  # one sample cannot show a trend
    if offsets[0] == offsets[-1]:
        return "STALL"
    if all(b.lag >= a.lag for a, b in itertools.pairwise(samples)):
        return "WARN"
    return "OK"


def _worst(statuses: Sequence[str]) -> str:
    return max(statuses, key=STATUSES.index, default="OK")


def needs_marker_probe(committed: int | None, end_offset: int) -> bool:
    """Whether a lag is short enough to read whether it is only transaction markers."""
    return committed is not None and 0 < end_offset - committed <= _MARKER_PROBE_MAX


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """One partition as the reader found it: its end, the group's committed offset (None: nothing
    committed) and the committed records between them (None: not read; the lag stands for it)."""

    topic: str
    partition: int
    end_offset: int
    committed: int | None
    records: int | None


class LagWindows:
    """The last ``size`` samples of each (group, topic, partition), oldest first: what the status reads."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._windows: dict[tuple[str, str, int], deque[_Sample]] = {}

    def add(self, group: str, topic: str, partition: int, sample: _Sample) -> Sequence[_Sample]:
        win = self._windows.setdefault((group, topic, partition), deque(maxlen=self._size))
        win.append(sample)
        return win


def group_lag(group: str, topic: str, *, state: str, member_ids: list[GroupMember], input_partitions: int,
              offsets: Sequence[OffsetSample], windows: LagWindows, rule: KedaRule, now: float) -> GroupLag:
    """One sample of ``group`` from the offsets read at ``now``; ``topic`` is its input topic."""
    members = len(member_ids)
    rows: list[PartitionLag] = []
    keda_lag = 0
    for o in offsets:
        t, p, end, c = o.topic, o.partition, o.end_offset, o.committed
        lag = None if c is None else end - c
        if t == topic:
            keda_lag += partition_lag(end, c, offset_reset_policy="earliest")
        records = o.records if o.records is not None else lag
        win = windows.add(group, t, p, _Sample(now, c, records if records is not None else end))
        rows.append(PartitionLag(t, p, c, end, lag, burrow_status(win, members=members), records))
    desired = keda_desired_replicas(keda_lag, partitions=max(input_partitions, 1), rule=rule)
    return GroupLag(group=group, topic=topic, state=state, members=members, partitions=rows,
                    total_lag=sum(r.lag for r in rows if r.lag is not None), keda_lag=keda_lag,
                    input_partitions=input_partitions, desired_replicas=desired,
                    status=_worst([r.status for r in rows]), sampled_at=now,
                    records_waiting=sum(r.records if r.records is not None else r.end_offset for r in rows),
                    member_ids=member_ids)


def default_groups(kafka: KafkaSettings, stage: StageSettings) -> list[tuple[str, str]]:
    """(group, input topic): the worker group on segments, the stage on requests."""
    return [(kafka.worker_group, kafka.topic_segments), (stage.stage_app_id, kafka.topic_requests)]
