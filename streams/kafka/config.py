"""Kafka client configuration shared by ttsflow processes: the one place a client config is built.

Guarantees:

* Every producer uses ``partitioner=murmur2_random`` (the Java client's and faust's
  mapping of keys to partitions, so one user's events stay in one partition whoever
  produced them) with idempotence and ``acks=all``.
* The worker's consumer reads only committed records (``read_committed``), never
  auto-commits (offsets go into the producer's transaction), and starts from the
  earliest offset when its group has none.
"""

from __future__ import annotations

from typing import Any

from streams.settings import KafkaSettings

__all__ = ["client_config", "consumer_config", "producer_config", "reader_config", "transactional_config"]


def client_config(kafka: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """What every client of the cluster needs (where it is and how to reach it): the base of every
    config below and of ttsflow's admin clients and tools' readers."""
    return {"bootstrap.servers": kafka.bootstrap_servers, **extra}


def producer_config(kafka: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """An idempotent producer that partitions like Java clients and faust."""
    return client_config(
        kafka,
        **{"partitioner": "murmur2_random",
           "enable.idempotence": True,
           "acks": "all",
           "linger.ms": 5,
           **extra})


def transactional_config(kafka: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """The worker's transactional producer (``transactional.id`` fences older instances)."""
    return producer_config(
        kafka,
        **{"transactional.id": kafka.effective_transactional_id,
           "transaction.timeout.ms": kafka.transaction_timeout_ms,
           # back-to-back transactions: the next one's AddPartitions/AddOffsets meets the
           # coordinator still finishing the last (CONCURRENT_TRANSACTIONS) and is retried
           # after this backoff. librdkafka's 100 ms default made every transaction ~110 ms
           # on the local broker (20 ms: ~26 ms; Java's producer uses 20 ms here, KAFKA-5477),
           # and the worker's loop waits for each one
           "retry.backoff.ms": 20,
           # a transaction's records are flushed by its commit anyway: lingering (5 ms) only delays
           # them; 0 costs a produce request per record burst instead of per 5 ms window
           "linger.ms": 0,
           "client.id": kafka.effective_transactional_id,
           **extra})


def consumer_config(kafka: KafkaSettings, group: str, **extra: Any) -> dict[str, Any]:
    """A group consumer whose offsets are committed only through a transaction."""
    return client_config(
        kafka,
        **{"group.id": group,
           "isolation.level": "read_committed",
           "enable.auto.commit": False,
           "enable.auto.offset.store": False,
           "auto.offset.reset": "earliest",
           "partition.assignment.strategy": "cooperative-sticky",
           "session.timeout.ms": 10_000,
           "heartbeat.interval.ms": 1_000,
           "max.poll.interval.ms": 300_000,
           **extra})


def reader_config(kafka: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """A group-less reader (explicit assignment) of committed records only."""
    return client_config(
        kafka,
        **{"group.id": "ttsflow-reader-unused",  # required by the client; never joins or commits
           "isolation.level": "read_committed",
           "enable.auto.commit": False,
           "enable.auto.offset.store": False,
           "auto.offset.reset": "earliest",
           **extra})
