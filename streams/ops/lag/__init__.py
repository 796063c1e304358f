"""``ttsflow lag``: consumer-group lag, a Burrow-style status and KEDA's desired replicas.

Rooms: :mod:`~streams.ops.lag.model` (pure: lag, status, desired replicas from offsets),
:mod:`~streams.ops.lag.reader` (the offsets, from Kafka), :mod:`~streams.ops.lag.exporter`
(Prometheus gauges and the ``--serve`` loop), :mod:`~streams.ops.lag.cli` (the command).
"""

from streams.ops.lag.exporter import LagExporter, serve
from streams.ops.lag.model import GroupLag, GroupMember, PartitionLag, burrow_status, default_groups
from streams.ops.lag.reader import LagReader

__all__ = ["GroupLag", "GroupMember", "LagExporter", "LagReader", "PartitionLag", "burrow_status", "default_groups", "serve"]
