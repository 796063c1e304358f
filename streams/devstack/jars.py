"""The stack's Java side: Kafka's and s3proxy's jars from Maven Central, and Kafka's own
command-line tools run from them.

Guarantees: ``fetch_jars`` resolves the jars once per ``deploy/local/pom.xml`` (a digest
stamp; a changed pom fetches again) into ``<home>/jars``, replacing them only after a
complete fetch; a missing Java or Maven is one line saying what to install
(:class:`StackError`). ``kafka_tool`` runs a tool with the stack's bootstrap server (and,
on a secured home, its admin's client properties) and captures its output.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence

from streams.devstack import secure
from streams.devstack.errors import StackError
from streams.devstack.paths import DEPLOY_DIR, StackPaths, stack_paths
from streams.settings import Settings

__all__ = ["KAFKA_TOOLS", "TOOL_JVM", "fetch_jars", "java_binary", "kafka_tool"]

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

TOOL_JVM = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


def java_binary() -> str:
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
    p = stack_paths(settings)
    if _jars_ready(p):
        return p
    if not (DEPLOY_DIR / "pom.xml").is_file():
        raise StackError(f"{DEPLOY_DIR / 'pom.xml'} is missing: run ttsflow from its source checkout")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("mvn not found and the Kafka/s3proxy jars are not cached: install Maven "
                         "(Debian/Ubuntu: apt-get install maven)")
    java_binary()
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
    cmd = [java_binary(), *TOOL_JVM, f"-Dlog4j.configuration=file:{DEPLOY_DIR / 'tools-log4j.properties'}",
           "-cp", f"{p.kafka_jars}/*", main_class, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check,
                          stdin=subprocess.DEVNULL)
