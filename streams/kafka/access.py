"""Can this process reach the cluster, as whom, and may it do what its role needs?

Guarantees:

* :func:`connect` fails within about a second when the cluster refuses the client
  (wrong password, unknown user, untrusted certificate): librdkafka alone would retry
  such a connection forever and report only a metadata time-out. It raises
  :class:`~streams.errors.KafkaAccessError` with librdkafka's reason (which never holds a
  password) and what to check; a broker that does not answer in time is a retriable
  ``RetriableError``, with a hint when the client speaks another protocol than the listener.
* :func:`require` checks, before a process starts its work, that its principal holds every
  operation its role needs on its topics and group (KIP-430's authorized operations), and
  names each one missing. On a cluster without an authorizer every operation is granted;
  a topic that does not exist yet is left to the process (it creates it or waits for it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from streams.errors import KafkaAccessError, RetriableError
from streams.kafka.config import client_config
from streams.settings import KafkaSettings

__all__ = ["connect", "require", "role_needs"]

_REFUSED = frozenset({"_AUTHENTICATION", "_SSL"})
_COORDINATOR_BUSY = frozenset({"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"})


def _quiet() -> logging.Logger:
    lg = logging.getLogger("ttsflow.kafka.librdkafka")
    lg.propagate = False
    if not lg.handlers:
        lg.addHandler(logging.NullHandler())
    return lg


def _who(kafka: KafkaSettings) -> str:
    user = f" as {kafka.kafka_sasl_username!r}" if kafka.uses_sasl else ""
    return f"Kafka at {kafka.bootstrap_servers} ({kafka.kafka_security_protocol}{user})"


def connect(kafka: KafkaSettings, *, timeout_s: float = 10.0) -> Any:
    """An ``AdminClient`` that has answered a metadata request; :class:`KafkaAccessError` at the
    first authentication or TLS failure, ``RetriableError`` when nothing answers within ``timeout_s``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient(client_config(kafka, error_cb=errors.append, logger=_quiet()))
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            md = admin.list_topics(timeout=max(0.1, min(0.5, deadline - time.monotonic())))
            if md.brokers:
                return admin
        except KafkaException as e:
            last = e.args[0].str() if e.args else str(e)
        admin.poll(0)  # serves error_cb: librdkafka reports a refused login there, not to the call
        refused = [e for e in errors if e.name() in _REFUSED]
        if refused:
            why = refused[0].str()
            hint = ("check TTS_KAFKA_SASL_USERNAME and the password (TTS_KAFKA_SASL_PASSWORD[_FILE]) and "
                    "TTS_KAFKA_SASL_MECHANISM" if refused[0].name() == "_AUTHENTICATION" else
                    "check TTS_KAFKA_SSL_CA_FILE (the CA that signed the broker's certificate)")
            raise KafkaAccessError(f"{_who(kafka)} refused this client: {why.split(': ', 1)[-1]}; {hint}")
        if time.monotonic() >= deadline:
            hint = ("" if kafka.uses_tls else "; if the listener uses TLS/SASL set TTS_KAFKA_SECURITY_PROTOCOL "
                    "(SASL_SSL for Confluent Cloud, MSK, `ttsflow stack up --secure`)")
            raise RetriableError(f"{_who(kafka)} did not answer within {timeout_s:g} s ({last}){hint}")


def role_needs(kafka: KafkaSettings, role: str, *, stage_app_id: str = "") -> list[tuple[str, str, str]]:
    """(resource kind, name, operation) a process of ``role`` (``stage``, ``worker``) needs."""
    if role == "worker":
        return [("topic", kafka.topic_segments, "READ"), ("topic", kafka.topic_completed, "WRITE"),
                ("topic", kafka.topic_chunks, "WRITE"), ("topic", kafka.topic_done, "READ"),
                ("topic", kafka.topic_done, "WRITE"), ("group", kafka.worker_group, "READ")]
    if role == "stage":
        # WRITE on requests: the stage's own timer records for requests sent in pieces (streams/stage/pieces.py)
        return [("topic", kafka.topic_requests, "READ"), ("topic", kafka.topic_requests, "WRITE"),
                ("topic", kafka.topic_segments, "WRITE"),
                ("topic", kafka.topic_dlq, "WRITE"), ("group", stage_app_id, "READ"),
                ("topic", kafka.topic_lexicons, "READ"), ("topic", kafka.topic_lexicons_global, "READ")]
    raise ValueError(f"unknown role {role!r}")


def _granted(kafka: KafkaSettings, needs: Sequence[tuple[str, str, str]], admin: Any,
             timeout_s: float) -> dict[tuple[str, str], set[str] | None]:
    """The operations granted on each resource of ``needs`` (None: unknown, not made yet)."""
    from confluent_kafka import KafkaException, TopicCollection

    admin = admin or connect(kafka, timeout_s=timeout_s)
    topics = sorted({n for kind, n, _ in needs if kind == "topic"})
    groups = sorted({n for kind, n, _ in needs if kind == "group"})
    granted: dict[tuple[str, str], set[str] | None] = {}
    for name, fut in admin.describe_topics(TopicCollection(topics), include_authorized_operations=True,
                                           request_timeout=timeout_s).items():
        try:
            ops = fut.result(timeout_s).authorized_operations
            granted["topic", name] = None if ops is None else {op.name for op in ops}
        except KafkaException as e:
            code = e.args[0].name() if e.args else ""
            if code == "TOPIC_AUTHORIZATION_FAILED":
                granted["topic", name] = set()
            elif code == "UNKNOWN_TOPIC_OR_PART":
                granted["topic", name] = None  # not made yet: the process creates it or waits for it as before
            else:
                raise
    deadline = time.monotonic() + timeout_s
    for name in groups:
        while True:  # a group's coordinator may still be loading on a fresh broker: retried, bounded
            try:
                fut = admin.describe_consumer_groups([name], include_authorized_operations=True,
                                                     request_timeout=timeout_s)[name]
                ops = fut.result(timeout_s).authorized_operations
                granted["group", name] = None if ops is None else {op.name for op in ops}
                break
            except KafkaException as e:
                code = e.args[0].name() if e.args else ""
                if code == "GROUP_AUTHORIZATION_FAILED":
                    granted["group", name] = set()
                    break
                if code not in _COORDINATOR_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # back-off before asking the coordinator again
    return granted


def require(kafka: KafkaSettings, needs: Sequence[tuple[str, str, str]], *, role: str, admin: Any = None,
            timeout_s: float = 10.0) -> None:
    """Raise :class:`KafkaAccessError` naming every operation of ``needs`` this principal lacks;
    ``RetriableError`` when the cluster does not answer the check in time (a broker restarting, a
    loaded machine): the caller starts anyway and its own loop waits for the broker."""
    import concurrent.futures

    from confluent_kafka import KafkaException

    try:
        granted = _granted(kafka, needs, admin, timeout_s)
    except (concurrent.futures.TimeoutError, KafkaException) as e:
        why = e.args[0].str() if isinstance(e, KafkaException) and e.args else type(e).__name__
        raise RetriableError(f"{_who(kafka)} did not answer the {role}'s access check within {timeout_s:g} s "
                             f"({why})") from e
    missing = [f"{op} on {kind} {name}" for kind, name, op in needs
               if (ops := granted.get((kind, name))) is not None and op not in ops and "ALL" not in ops]
    if missing:
        user = kafka.kafka_sasl_username or "this client"
        raise KafkaAccessError(f"the {role} cannot start: {_who(kafka)} grants {user} no "
                               f"{', '.join(missing)}; add these ACLs (deploy/k8s/kafka-acls.sh)")
