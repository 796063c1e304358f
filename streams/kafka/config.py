"""Kafka client configuration shared by ttsflow processes: the one place a client config is built.

Guarantees:

* Every producer uses ``partitioner=murmur2_random`` (the Java client's and faust's
  mapping of keys to partitions, so one user's events stay in one partition whoever
  produced them) with idempotence and ``acks=all``.
* The worker's consumer reads only committed records (``read_committed``), never
  auto-commits (offsets go into the producer's transaction), and starts from the
  earliest offset when its group has none.
* Every client reaches the cluster the same way: :func:`client_config` adds the security
  settings (``security.protocol``, SASL mechanism and credentials, CA file, client
  certificate and key) to every confluent-kafka config, and :func:`faust_credentials`
  builds the stage's faust/aiokafka form of the very same settings. A password is
  handed to the client only, never put in a log line or message.
"""

from __future__ import annotations

from typing import Any

from streams.settings import KafkaSettings

__all__ = ["aiokafka_auth", "client_config", "consumer_config", "faust_credentials", "producer_config", "reader_config",
           "security_config", "ssl_context", "transactional_config"]


def security_config(kafka: KafkaSettings) -> dict[str, Any]:
    """librdkafka's security properties of ``kafka`` (empty for PLAINTEXT): protocol, SASL
    mechanism and credentials, trusted CA, client certificate and key (mutual TLS)."""
    if kafka.kafka_security_protocol == "PLAINTEXT":
        return {}
    conf: dict[str, Any] = {"security.protocol": kafka.kafka_security_protocol}
    if kafka.uses_sasl:
        conf.update({"sasl.mechanism": kafka.kafka_sasl_mechanism, "sasl.username": kafka.kafka_sasl_username,
                     "sasl.password": kafka.kafka_sasl_password.reveal()})
    if kafka.uses_tls:
        if kafka.kafka_ssl_ca_file:
            conf["ssl.ca.location"] = kafka.kafka_ssl_ca_file
        if kafka.kafka_ssl_cert_file:
            conf["ssl.certificate.location"] = kafka.kafka_ssl_cert_file
            conf["ssl.key.location"] = kafka.kafka_ssl_key_file
    return conf


def client_config(kafka: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """What every client of the cluster needs (where it is and how to reach it, securely): the base
    of every config below and of ttsflow's admin clients and tools' readers."""
    debug = {"debug": kafka.kafka_debug} if kafka.kafka_debug else {}
    return {"bootstrap.servers": kafka.bootstrap_servers, **security_config(kafka), **debug, **extra}


def ssl_context(kafka: KafkaSettings) -> Any:
    """The ``ssl.SSLContext`` of ``kafka`` for Python clients (aiokafka), or None without TLS:
    the CA file (else the system's trust store), the client certificate and key, hostname checked."""
    if not kafka.uses_tls:
        return None
    import ssl

    ctx = ssl.create_default_context(cafile=kafka.kafka_ssl_ca_file or None)
    if kafka.kafka_ssl_cert_file:
        ctx.load_cert_chain(kafka.kafka_ssl_cert_file, kafka.kafka_ssl_key_file)
    return ctx


def aiokafka_auth(kafka: KafkaSettings) -> dict[str, Any]:
    """The security keyword arguments of an aiokafka client for ``kafka`` (what faust derives from
    :func:`faust_credentials` for its own clients), for the few aiokafka clients ttsflow makes itself."""
    if kafka.kafka_security_protocol == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {"security_protocol": kafka.kafka_security_protocol, "ssl_context": ssl_context(kafka)}
    if kafka.uses_sasl:
        out.update(sasl_mechanism=kafka.kafka_sasl_mechanism, sasl_plain_username=kafka.kafka_sasl_username,
                   sasl_plain_password=kafka.kafka_sasl_password.reveal())
    return out


def faust_credentials(kafka: KafkaSettings) -> Any:
    """faust's ``broker_credentials`` for ``kafka`` (which faust hands to every aiokafka client it
    makes): None for PLAINTEXT, ``SSLCredentials`` for SSL, ``SASLCredentials`` for SASL_*."""
    if kafka.kafka_security_protocol == "PLAINTEXT":
        return None
    import faust

    ctx = ssl_context(kafka)
    if kafka.uses_sasl:
        return faust.SASLCredentials(username=kafka.kafka_sasl_username, password=kafka.kafka_sasl_password.reveal(),
                                     ssl_context=ctx, mechanism=kafka.kafka_sasl_mechanism)
    return faust.SSLCredentials(ctx)


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


# what every ttsflow reader sees: committed records only, from the start, offsets never committed for it
_READ_COMMITTED = {"isolation.level": "read_committed", "enable.auto.commit": False,
                   "enable.auto.offset.store": False, "auto.offset.reset": "earliest"}


def consumer_config(kafka: KafkaSettings, group: str, **extra: Any) -> dict[str, Any]:
    """A group consumer whose offsets are committed only through a transaction."""
    return client_config(
        kafka,
        **{"group.id": group,
           **_READ_COMMITTED,
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
           **_READ_COMMITTED,
           **extra})
