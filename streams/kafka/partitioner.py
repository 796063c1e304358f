"""Which partition a key lands in under ``partitioner=murmur2_random`` (what every ttsflow
producer sets): Kafka's Java ``DefaultPartitioner``, ``toPositive(murmur2(key)) % partitions``.

Pure. Lets a reader go straight to one user's partition of a topic keyed by user id (the
gateway's look-up of an old completion) instead of scanning all of them.
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for"]


def murmur2(key: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``key`` (seed 0x9747b28c), as an unsigned int."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = key[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` (murmur2_random with a non-empty key)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
