"""The local Kafka, S3 and Redis, no Docker: ``up``, ``down``, ``status`` and the topics and bucket.

What it guarantees:

* ``up`` is idempotent. It starts only the services that are not already running from
  this ``TTS_HOME`` (a PID file plus the process's command line proves ownership), waits
  with a deadline until Kafka answers a metadata request, S3 answers ListBuckets and
  Redis answers PING, then creates the topics (requests, segments, completed, dlq with
  ``partitions`` partitions; ``topic_done`` compacted) and the bucket. Running it twice
  does nothing harmful.
* ``down`` stops only processes that ``up`` started (by PID file), TERM then KILL after
  a deadline. Data under ``<home>/data`` survives ``down``/``up`` unless ``--wipe``.
* A missing prerequisite (Java, Maven when the jars are not cached, a Redis server
  binary, xattr support for the S3 directory) is one line saying what to install, and a
  non-zero exit.

The pieces: :mod:`~streams.devstack.jars` (the jars, Kafka's tools),
:mod:`~streams.devstack.services` (each service's start and probe),
:mod:`~streams.devstack.pidfiles` (the servers' processes). ``ttsflow stack`` is
:mod:`streams.cli.stack`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from streams.devstack import secure
from streams.devstack.errors import StackError
from streams.devstack.jars import fetch_jars
from streams.devstack.paths import StackPaths, stack_paths
from streams.devstack.pidfiles import owned_pid, port_open, rss_mb, wait_gone
from streams.devstack.services import (
    broker_node,
    broker_services,
    home_brokers,
    probe_service,
    s3_client,
    service_address,
    service_log,
    service_port,
    stack_admin,
    stack_services,
    start_service,
)
from streams.settings import Settings

__all__ = [
    "cluster_status",
    "delete_topics",
    "ensure_bucket",
    "ensure_topics",
    "stack_down",
    "stack_settings",
    "stack_up",
    "status",
    "topic_replication",
]


def stack_settings(settings: Settings, brokers: int | None = None) -> Settings:
    """``settings`` shaped like this home's stack: its number of brokers (``brokers``, else what
    the home was formatted with, else ``settings.local_stack.kafka_brokers``), clients bootstrapping from every
    broker and topics created at the replication factor the brokers allow."""
    from streams.devstack.services import replication_of

    n = brokers or home_brokers(stack_paths(settings)) or settings.local_stack.kafka_brokers
    if n == settings.local_stack.kafka_brokers and (n == 1 or "," in settings.kafka.bootstrap_servers):
        return settings
    ls = settings.replace(kafka_brokers=n).local_stack
    return settings.replace(kafka_brokers=n, replication_factor=replication_of(n)[0],
                            bootstrap_servers=",".join(f"127.0.0.1:{k}" for k, _ in ls.broker_ports()))


def ensure_topics(settings: Settings, *, partitions: int | None = None, timeout: float = 30.0) -> list[str]:
    """Create every ttsflow topic of ``settings`` that is missing (:func:`streams.kafka.ensure_topics`:
    the pipeline's five and the stage's changelog and leader topics). Returns the names created now."""
    from streams.kafka import ensure_topics as _ensure
    from streams.kafka.admin import kafka_exception

    try:
        return _ensure(_as_admin(settings).kafka, settings.stage, partitions=partitions, timeout=timeout)
    except kafka_exception() as e:
        raise StackError(f"could not create topics: {e}") from None


def delete_topics(settings: Settings, names: Sequence[str], *, timeout: float = 30.0) -> None:
    """Delete topics, ignoring ones that do not exist."""
    from streams.kafka.admin import delete_topics as _delete

    if names:
        _delete(stack_admin(_as_admin(settings)), names, timeout=timeout)


def ensure_bucket(settings: Settings) -> bool:
    """Create ``settings.s3_bucket`` if absent; True when created now."""
    s3 = s3_client(settings)
    try:
        names = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        if settings.s3.s3_bucket in names:
            return False
        s3.create_bucket(Bucket=settings.s3.s3_bucket)
        return True
    finally:
        s3.close()


@contextlib.contextmanager
def _lock(p: StackPaths) -> Iterator[None]:
    """Serialize concurrent ``up``/``down`` on one home (several engineers share a stack)."""
    p.run.mkdir(parents=True, exist_ok=True)
    with open(p.run / "stack.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _as_admin(settings: Settings) -> Settings:
    """The settings the stack itself uses: on a secured home, its admin's SASL_SSL credentials."""
    home = stack_paths(settings).home
    return secure.client_settings(settings, home) if secure.is_secure(home) else settings


def stack_up(settings: Settings, *, timeout: float = 180.0, quiet: bool = False,
             secure_kafka: bool = False, brokers: int | None = None) -> dict[str, Any]:
    """Start what is not running, wait until every service answers, create topics and bucket.

    ``brokers`` (``--brokers``, else ``settings.local_stack.kafka_brokers``): 1, or 3 brokers with every
    topic at replication factor 3 and ``min.insync.replicas`` 2; a home formatted with one
    number keeps it (changing it needs ``down --wipe``). ``secure_kafka`` (``--secure``) makes a new home's broker SASL_SSL-only with ACLs
    (:mod:`streams.devstack.secure`); a home made so stays so. Returns :func:`status`.
    Raises :class:`StackError` with one line on failure.
    """
    say: Callable[[str], None] = (lambda _m: None) if quiet else (lambda m: print(m, flush=True))
    p = stack_paths(settings)
    p.home.mkdir(parents=True, exist_ok=True)
    with _lock(p):
        fetch_jars(settings, quiet=quiet)
        formatted = home_brokers(p)
        want = brokers or (formatted if formatted is not None and settings.local_stack.kafka_brokers == 1 else settings.local_stack.kafka_brokers)
        if formatted is not None and want != formatted:
            raise StackError(f"the Kafka of {p.home} was formatted with {formatted} broker(s), not {want}: "
                             "use another TTS_HOME, or `stack down --wipe` first")
        settings = stack_settings(settings, want)
        if secure_kafka and want > 1:
            raise StackError("--secure runs one broker: a secured three-broker stack is not supported")
        if secure_kafka and not secure.is_secure(p.home):
            if (p.data / "kafka" / "meta.properties").is_file():
                raise StackError(f"the broker of {p.home} was formatted without --secure (its SCRAM users are made "
                                 "at format time): use another TTS_HOME, or `stack down --wipe` first")
            secure.ensure_material(p.home)
            say(f"stack: secured Kafka (SASL_SSL, SCRAM, ACLs); CA and passwords in {secure.secure_paths(p.home).root}")
        settings = _as_admin(settings)
        started: dict[str, int] = {}
        services = stack_services(want)
        for svc in services:
            pid = owned_pid(p, svc)
            if pid is not None:
                say(f"stack: {svc} already running (pid {pid})")
                continue
            port = service_port(svc, settings)
            if port_open(port):
                env_name = "KAFKA" if broker_node(svc) is not None else svc.upper()
                raise StackError(f"port {port} ({svc}) is in use by a process this stack did not start "
                                 f"(home {p.home}); stop it or choose another TTS_{env_name}_PORT")
            started[svc] = start_service(svc, settings, p)
            say(f"stack: started {svc} (pid {started[svc]})")
        deadline = time.monotonic() + timeout
        waiting = {svc: "not probed" for svc in services}
        admins = {svc: stack_admin(settings, service_address(svc, settings)) for svc in broker_services(want)}
        while waiting:
            for svc in list(waiting):
                why = probe_service(svc, settings, admins.get(svc))
                if why is None:
                    del waiting[svc]
                    continue
                waiting[svc] = why
                if svc in started and owned_pid(p, svc) is None:
                    raise StackError(f"{svc} exited during start; last log lines of {service_log(svc, p)}:\n"
                                     + _log_tail(service_log(svc, p)))
            if waiting and time.monotonic() > deadline:
                svc, why = next(iter(waiting.items()))
                raise StackError(f"{svc} did not answer within {timeout:.0f}s ({why}); see {service_log(svc, p)}")
            if waiting:
                time.sleep(0.2)
        created = ensure_topics(settings, timeout=max(10.0, deadline - time.monotonic()))
        if created:
            say(f"stack: created topics {', '.join(created)}")
        if secure.is_secure(p.home):
            n = secure.ensure_acls(settings, secure.acl_specs(settings), timeout=max(10.0, deadline - time.monotonic()))
            say(f"stack: {n} ACLs for {', '.join(secure.PRINCIPALS.values())}")
        if ensure_bucket(settings):
            say(f"stack: created bucket {settings.s3.s3_bucket}")
    return status(settings)


def stack_down(settings: Settings, *, wipe: bool = False, timeout: float = 60.0,
               quiet: bool = False) -> list[str]:
    """Stop the services this home's ``up`` started; with ``wipe`` delete their data too.

    Returns the services stopped.
    """
    say: Callable[[str], None] = (lambda _m: None) if quiet else (lambda m: print(m, flush=True))
    p = stack_paths(settings)
    if not p.home.exists():
        return []
    stopped = []
    with _lock(p):
        services = stack_services(home_brokers(p) or settings.local_stack.kafka_brokers)
        pids = {svc: pid for svc in services if (pid := owned_pid(p, svc)) is not None}
        # Kafka first and alone: it flushes and closes its logs cleanly while S3/Redis are still up
        # for any client finishing; then the rest together. Brokers stop together: one stopped
        # alone would move its leaderships to the others only for them to stop too.
        for group in (list(broker_services(home_brokers(p) or settings.local_stack.kafka_brokers)), ["s3", "redis"]):
            deadline = time.monotonic() + timeout
            for svc in group:
                if svc in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pids[svc], signal.SIGTERM)
            for svc in group:
                if svc in pids:
                    clean = wait_gone(pids[svc], deadline)
                    stopped.append(svc)
                    say(f"stack: stopped {svc} (pid {pids[svc]}{'' if clean else ', killed'})")
        for svc in services:
            p.pid_file(svc).unlink(missing_ok=True)
        if wipe:
            shutil.rmtree(p.data, ignore_errors=True)
            shutil.rmtree(p.conf, ignore_errors=True)
            shutil.rmtree(secure.secure_paths(p.home).root, ignore_errors=True)
            say(f"stack: wiped {p.data}")
    return stopped


def status(settings: Settings) -> dict[str, Any]:
    """``{"kafka": {...}, "s3": {...}, "redis": {...}}``, each with ``ok`` and ``address``; on a
    three-broker home also ``kafka-2`` and ``kafka-3``.

    Also ``pid`` and ``rss_mb`` when this home's ``up`` started it, ``error`` when not ok;
    ``kafka.cluster`` (:func:`cluster_status`: brokers, under-replicated partitions) when
    any broker answers; on a secured home ``kafka.security``
    (:func:`streams.devstack.secure.security_status`).
    """
    p = stack_paths(settings)
    settings = stack_settings(_as_admin(settings))
    out: dict[str, Any] = {}
    for svc in stack_services(settings.local_stack.kafka_brokers):
        why = probe_service(svc, settings)
        entry: dict[str, Any] = {"ok": why is None, "address": service_address(svc, settings)}
        pid = owned_pid(p, svc)
        entry["pid"] = pid
        if pid is not None:
            entry["rss_mb"] = rss_mb(pid)
        if why is not None:
            entry["error"] = why[:300]
        out[svc] = entry
    if any(out[b]["ok"] for b in broker_services(settings.local_stack.kafka_brokers)):
        with contextlib.suppress(Exception):  # a cluster that stops answering between probes: no summary
            out["kafka"]["cluster"] = cluster_status(settings)
    sec = secure.security_status(settings, p.home)
    if sec is not None:
        out["kafka"]["security"] = sec
    return out


def cluster_status(settings: Settings, *, timeout: float = 5.0, bootstrap: str | None = None) -> dict[str, Any]:
    """What the cluster's metadata says now: the brokers registered, the partitions (internal
    topics included) whose in-sync replicas are fewer than their replicas (under-replicated:
    on three brokers, the state while one is down or catching up) and those without a leader
    (offline). ``bootstrap``: ask that broker alone (its own view), else any."""
    md = stack_admin(settings, bootstrap).list_topics(timeout=timeout)
    under: list[str] = []
    offline: list[str] = []
    partitions = 0
    for name, t in md.topics.items():
        for pid, pm in t.partitions.items():
            partitions += 1
            if pm.leader < 0:
                offline.append(f"{name}-{pid}")
            if len(pm.isrs) < len(pm.replicas):
                under.append(f"{name}-{pid}")
    return {"brokers": sorted(md.brokers), "controller_id": md.controller_id, "partitions": partitions,
            "under_replicated": len(under), "under_replicated_sample": sorted(under)[:10],
            "offline": len(offline), "offline_sample": sorted(offline)[:10]}



def topic_replication(settings: Settings, names: Sequence[str], *, timeout: float = 10.0) -> dict[str, dict[str, int]]:
    """``{topic: {"replication_factor": r, "min_insync_replicas": m}}`` of the named topics that
    exist (:func:`streams.kafka.admin.topic_replication`)."""
    from streams.kafka.admin import topic_replication as _replication

    return _replication(stack_admin(_as_admin(settings)), names, timeout=timeout)
