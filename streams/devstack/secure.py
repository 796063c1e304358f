"""``ttsflow stack up --secure``: the local broker as production runs it -- TLS, SASL, ACLs.

What it guarantees:

* Clients reach the broker on one SASL_SSL listener only. Its certificate is signed by a
  self-signed CA, both made with the JDK's ``keytool`` (nothing downloaded) under
  ``<home>/secure``; clients trust ``<home>/secure/ca.pem`` (subject alternative names
  ``localhost`` and ``127.0.0.1``, so hostnames are verified).
* SCRAM-SHA-512 users are created when the storage is formatted (``StorageTool format
  --add-scram``): the admin (the broker's own and the stack's super user) and three
  principals, each with a random password kept in ``<home>/secure/<name>.password``
  (mode 0600). Passwords are written to those files only: never printed, never logged;
  ``stack status --json`` names the files.
* KRaft's ``StandardAuthorizer`` denies what no ACL allows. :func:`acl_specs` is each
  principal's least privilege: the user writes requests and reads completions and chunks
  (its own groups by prefix); the stage reads requests, writes segments and dead
  letters, owns its faust topics, group and transactional ids by prefix; the worker reads
  segments, writes completions, chunks and its done topic, commits its group's offsets
  in transactions under its transactional-id prefix.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.devstack.errors import StackError
from streams.settings import Secret, Settings

__all__ = ["ADMIN", "PRINCIPALS", "AclSpec", "SecurePaths", "acl_specs", "client_settings", "ensure_acls",
           "ensure_material", "is_secure", "scram_format_args", "security_status", "tool_properties"]

ADMIN = "admin"
#: The three principals of a ttsflow deployment (SCRAM user names), by role.
PRINCIPALS: dict[str, str] = {"user": "ttsflow-user", "stage": "ttsflow-stage", "worker": "ttsflow-worker"}
MECHANISM = "SCRAM-SHA-512"
#: The lag exporter's principal in deployments (``acl_specs(ops=True)``); the local stack has none.
OPS_PRINCIPAL = "ttsflow-ops"
#: The Redis ACL user of ttsflow's processes on a secured stack.
REDIS_USER = "ttsflow"
_VALIDITY_DAYS = "825"
_SAN = "SAN=dns:localhost,ip:127.0.0.1"


@dataclass(frozen=True, slots=True)
class SecurePaths:
    root: Path

    @property
    def ca_pem(self) -> Path:
        return self.root / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.root / "broker.p12"

    @property
    def store_password(self) -> Path:
        return self.root / "keystore.password"

    def password_file(self, user: str) -> Path:
        return self.root / f"{user}.password"


def secure_paths(home: Path) -> SecurePaths:
    return SecurePaths(home / "secure")


def _keytool() -> str:
    found = shutil.which("keytool")
    if found is None:
        raise StackError("keytool not found: it ships with the JDK (Debian/Ubuntu: apt-get install "
                         "openjdk-17-jre-headless)")
    return found


def _run(argv: list[str], what: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if res.returncode != 0:  # keytool's messages hold no passwords (they go in as -storepass)
        raise StackError(f"keytool could not {what}: {(res.stderr or res.stdout).strip()[-300:]}")


def _write_secret(path: Path, value: str) -> None:
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(value + "\n")


def _password(path: Path) -> str:
    if not path.is_file():
        _write_secret(path, secrets.token_urlsafe(24))
    return path.read_text().strip()


def ensure_material(home: Path) -> SecurePaths:
    """Create (once) the passwords, the CA and the broker's PKCS12 keystore under ``<home>/secure``."""
    sp = secure_paths(home)
    sp.root.mkdir(parents=True, exist_ok=True)
    sp.root.chmod(0o700)
    for user in (ADMIN, *PRINCIPALS.values(), f"redis-{REDIS_USER}"):
        _password(sp.password_file(user))
    store_pw = _password(sp.store_password)
    if sp.keystore.is_file() and sp.ca_pem.is_file():
        return sp
    kt = _keytool()
    ca_store, csr, crt = sp.root / "ca.p12", sp.root / "broker.csr", sp.root / "broker.crt"
    for f in (ca_store, csr, crt, sp.keystore, sp.ca_pem):
        f.unlink(missing_ok=True)
    common = ["-storetype", "PKCS12", "-storepass", store_pw, "-keypass", store_pw]
    _run([kt, "-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=ttsflow local CA",
          "-ext", "bc:c", "-validity", _VALIDITY_DAYS, "-keystore", str(ca_store), *common], "make the CA")
    _run([kt, "-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-storepass", store_pw,
          "-file", str(sp.ca_pem)], "export the CA certificate")
    _run([kt, "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=localhost",
          "-ext", _SAN, "-validity", _VALIDITY_DAYS, "-keystore", str(sp.keystore), *common], "make the broker's key")
    _run([kt, "-certreq", "-alias", "broker", "-keystore", str(sp.keystore), "-storepass", store_pw,
          "-file", str(csr)], "make the broker's certificate request")
    _run([kt, "-gencert", "-alias", "ca", "-keystore", str(ca_store), "-storepass", store_pw, "-infile", str(csr),
          "-outfile", str(crt), "-rfc", "-validity", _VALIDITY_DAYS, "-ext", _SAN,
          "-ext", "ku:c=digitalSignature,keyEncipherment", "-ext", "eku=serverAuth,clientAuth"],
         "sign the broker's certificate")
    _run([kt, "-importcert", "-noprompt", "-alias", "ca", "-file", str(sp.ca_pem), "-keystore", str(sp.keystore),
          "-storepass", store_pw], "import the CA into the keystore")
    _run([kt, "-importcert", "-noprompt", "-alias", "broker", "-file", str(crt), "-keystore", str(sp.keystore),
          "-storepass", store_pw], "import the broker's certificate")
    csr.unlink(missing_ok=True)
    return sp


def template_values(sp: SecurePaths) -> dict[str, object]:
    """What ``server-secure.properties.template`` is filled with."""
    return {"admin_user": ADMIN, "admin_password": _password(sp.password_file(ADMIN)),
            "keystore": sp.keystore, "store_password": _password(sp.store_password), "ca_file": sp.ca_pem}


def scram_format_args(sp: SecurePaths) -> list[str]:
    """``--add-scram`` arguments of ``StorageTool format``: every user's SCRAM-SHA-512 credential."""
    args = []
    for user in (ADMIN, *PRINCIPALS.values()):
        args += ["--add-scram", f"{MECHANISM}=[name={user},password={_password(sp.password_file(user))}]"]
    return args


def client_settings(settings: Settings, home: Path, user: str = ADMIN) -> Settings:
    """``settings`` as ``user`` of the secured stack at ``home`` sees it: Kafka on SASL_SSL as ``user``,
    S3 on HTTPS trusting the stack's CA, Redis as its ACL user :data:`REDIS_USER`."""
    sp = secure_paths(home)
    return settings.replace(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism=MECHANISM,
                            kafka_sasl_username=user, kafka_sasl_password=Secret(_password(sp.password_file(user))),
                            kafka_sasl_password_file="", kafka_ssl_ca_file=str(sp.ca_pem),
                            s3_endpoint=f"https://127.0.0.1:{settings.local_stack.s3_port}", s3_ca_bundle=str(sp.ca_pem),
                            redis_username=REDIS_USER, redis_password_file="",
                            redis_password=Secret(_password(sp.password_file(f"redis-{REDIS_USER}"))))


def s3proxy_tls(home: Path, port: int) -> str:
    """s3proxy's properties for HTTPS only on ``port``, with the broker's keystore."""
    sp = secure_paths(home)
    return "\n".join([f"s3proxy.secure-endpoint=https://127.0.0.1:{port}", f"s3proxy.keystore-path={sp.keystore}",
                       f"s3proxy.keystore-password={_password(sp.store_password)}"])


def redis_acl_lines(home: Path) -> str:
    """redis.conf lines: the default user needs the admin's password; :data:`REDIS_USER` may use the
    cache's keys (``ttsflow:*``) with every command but the dangerous ones (FLUSHALL, CONFIG, KEYS...)."""
    sp = secure_paths(home)
    return ("\n# `stack up --secure`: no anonymous access\n"
            f"user default on >{_password(sp.password_file(ADMIN))} ~* &* +@all\n"
            f"user {REDIS_USER} on >{_password(sp.password_file(f'redis-{REDIS_USER}'))} ~ttsflow:* "
            "+@all -@dangerous\n")


@dataclass(frozen=True, slots=True)
class AclSpec:
    """One ALLOW ACL: ``principal`` may do ``operation`` on ``resource`` ``name`` (pattern LITERAL or PREFIXED)."""

    principal: str
    resource: str  # TOPIC, GROUP, TRANSACTIONAL_ID
    name: str
    pattern: str
    operation: str  # READ, WRITE, DESCRIBE, CREATE


def acl_specs(settings: Settings, *, ops: bool = False) -> list[AclSpec]:
    """Least privilege of the three principals for the topics, groups and ids of ``settings``; with
    ``ops`` also :data:`OPS_PRINCIPAL`'s (the lag exporter: describe topics and read groups' offsets)."""
    k, st = settings.kafka, settings.stage
    user, stage, worker = (f"User:{PRINCIPALS[r]}" for r in ("user", "stage", "worker"))
    out: list[AclSpec] = []

    def allow(principal: str, resource: str, name: str, ops: tuple[str, ...], pattern: str = "LITERAL") -> None:
        out.extend(AclSpec(principal, resource, name, pattern, op) for op in ops)

    # user: publish requests, read answers; its consumer groups by prefix (the SDK's and its own name's)
    allow(user, "TOPIC", k.topic_requests, ("WRITE", "DESCRIBE"))
    allow(user, "TOPIC", k.topic_completed, ("READ", "DESCRIBE"))
    allow(user, "TOPIC", k.topic_chunks, ("READ", "DESCRIBE"))
    allow(user, "TOPIC", k.topic_lexicons, ("READ", "WRITE", "DESCRIBE"))  # its own lexicons (owner = its user id)
    allow(user, "TOPIC", k.topic_lexicons_global, ("READ", "DESCRIBE"))  # global ones: read, never write
    # (ttsflow's group-less readers name a group librdkafka looks up but never join: ttsflow-reader-*)
    for prefix in ("ttsflow-client-", "ttsflow-reader-", f"{PRINCIPALS['user']}-"):
        allow(user, "GROUP", prefix, ("READ", "DESCRIBE"), "PREFIXED")
    # stage: requests in, segments and dead letters out; its faust topics (changelog, leader)
    # and group start with its app id (it runs at_least_once: no transactional id)
    app = st.stage_app_id
    allow(stage, "TOPIC", k.topic_requests, ("READ", "WRITE", "DESCRIBE"))  # WRITE: its timer records
    allow(stage, "TOPIC", k.topic_segments, ("WRITE", "DESCRIBE"))
    allow(stage, "TOPIC", k.topic_dlq, ("WRITE", "DESCRIBE"))
    allow(stage, "TOPIC", f"{app}-", ("READ", "WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS"), "PREFIXED")
    allow(stage, "GROUP", app, ("READ", "DESCRIBE"))
    for topic in (k.topic_lexicons, k.topic_lexicons_global):  # read whole, group-less (assigned partitions)
        allow(stage, "TOPIC", topic, ("READ", "DESCRIBE"))
    allow(stage, "GROUP", "ttsflow-reader-", ("READ", "DESCRIBE"), "PREFIXED")  # (the reader's unused group name)
    # worker: segments in; completions, chunks, done records out in its transactions; the done
    # topic read back after a restart; its group's offsets committed in the transaction
    allow(worker, "TOPIC", k.topic_segments, ("READ", "DESCRIBE"))
    allow(worker, "TOPIC", k.topic_completed, ("WRITE", "DESCRIBE"))
    allow(worker, "TOPIC", k.topic_chunks, ("WRITE", "DESCRIBE"))
    allow(worker, "TOPIC", k.topic_done, ("READ", "WRITE", "DESCRIBE"))
    allow(worker, "GROUP", k.worker_group, ("READ", "DESCRIBE"))
    allow(worker, "GROUP", "ttsflow-reader-", ("READ", "DESCRIBE"), "PREFIXED")
    allow(worker, "TRANSACTIONAL_ID", f"{k.effective_transactional_id_prefix}-", ("WRITE", "DESCRIBE"), "PREFIXED")
    # user: `say`, `submit` and the gateway tell a caller "no stage/worker is running" from these
    # groups' members; without DESCRIBE the broker hides them and every wait would say so falsely
    for group in (app, k.worker_group):
        allow(user, "GROUP", group, ("DESCRIBE",))
    if ops:  # ttsflow lag: end offsets of the input topics, committed offsets and members of the groups
        lag = f"User:{OPS_PRINCIPAL}"
        for topic in (k.topic_requests, k.topic_segments):
            allow(lag, "TOPIC", topic, ("DESCRIBE",))
        for group in (k.worker_group, app):
            allow(lag, "GROUP", group, ("DESCRIBE",))
        allow(lag, "GROUP", "ttsflow-lag-", ("READ", "DESCRIBE"), "PREFIXED")
        allow(lag, "TOPIC", k.topic_lexicons_global, ("READ", "WRITE", "DESCRIBE"))  # only operators write global lexicons
    return out


def kafka_acls_script(settings: Settings) -> str:
    """``deploy/k8s/kafka-acls.sh``: the ACLs of :func:`acl_specs` as ``kafka-acls.sh`` commands."""
    lines = ["#!/bin/sh", "# ttsflow's Kafka ACLs, least privilege per principal (generated by",
             "# `python -m streams.devstack.secure kafka-acls`; tests/unit/test_deploy.py keeps it in step).",
             "# Usage: KAFKA_BIN=/opt/kafka/bin BOOTSTRAP=broker:9093 ADMIN_CONFIG=admin.properties sh kafka-acls.sh",
             "# (ADMIN_CONFIG: client properties of a principal allowed to alter ACLs.)", "set -eu",
             'acl() { "${KAFKA_BIN:-/opt/kafka/bin}/kafka-acls.sh" --bootstrap-server "$BOOTSTRAP" '
             '--command-config "$ADMIN_CONFIG" --add --force "$@"; }']
    flag = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}
    for s in acl_specs(settings, ops=True):
        op = "".join(w.capitalize() for w in s.operation.split("_"))
        lines.append(f"acl --allow-principal {s.principal} --operation {op} {flag[s.resource]} {s.name} "
                     f"--resource-pattern-type {s.pattern.lower()}")
    return "\n".join(lines) + "\n"


def strimzi_users(settings: Settings, cluster: str = "my-cluster") -> list[dict[str, Any]]:
    """Strimzi ``KafkaUser`` resources (SCRAM-SHA-512, simple authorization) with :func:`acl_specs`'s ACLs;
    Strimzi keeps each user's password in a Secret of the user's name (key ``password``)."""
    by_user: dict[str, dict[tuple[str, str, str], list[str]]] = {}
    for s in acl_specs(settings, ops=True):
        res = by_user.setdefault(s.principal.removeprefix("User:"), {})
        res.setdefault((s.resource, s.name, s.pattern), []).append(s.operation)
    kinds = {"TOPIC": "topic", "GROUP": "group", "TRANSACTIONAL_ID": "transactionalId"}
    return [{"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaUser",
             "metadata": {"name": user, "labels": {"strimzi.io/cluster": cluster}},
             "spec": {"authentication": {"type": "scram-sha-512"},
                      "authorization": {"type": "simple", "acls": [
                          {"resource": {"type": kinds[kind], "name": name, "patternType": pattern.lower()},
                           "operations": ["".join(w.capitalize() for w in op.split("_")) for op in ops_],
                           "host": "*"} for (kind, name, pattern), ops_ in res.items()]}}}
            for user, res in by_user.items()]


def strimzi_yaml(settings: Settings) -> str:
    import yaml

    head = ("# Strimzi KafkaUser resources for ttsflow's principals (generated by `python -m streams.devstack.secure\n"
            "# strimzi`; tests/unit/test_deploy.py keeps it in step). Set strimzi.io/cluster to your Kafka's name;\n"
            "# Strimzi writes each password into a Secret named like the user (key: password), which the\n"
            "# stage, worker and lag exporter mount (deploy/k8s/kafka-secrets.yaml is then not needed).\n")
    return head + "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in strimzi_users(settings))


def main(argv: list[str] | None = None) -> int:
    import sys

    from streams.settings import load_settings

    what = (sys.argv[1:] if argv is None else argv) or ["kafka-acls"]
    settings = load_settings()
    sys.stdout.write(kafka_acls_script(settings) if what[0] == "kafka-acls" else strimzi_yaml(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def ensure_acls(admin_settings: Settings, specs: list[AclSpec], *, timeout: float = 30.0) -> int:
    """Create the ACLs of ``specs`` (creating an existing one is a no-op); returns how many were sent."""
    from streams.kafka.admin import create_acls, kafka_exception

    try:
        return create_acls(admin_settings.kafka, [(s.principal, s.resource, s.name, s.pattern, s.operation)
                                                  for s in specs], timeout=timeout)
    except kafka_exception() as e:
        raise StackError(f"could not create ACLs: {e}") from None


def security_status(settings: Settings, home: Path) -> dict[str, Any] | None:
    """``kafka.security`` of ``stack status --json`` for a secured home, else None: bootstrap, CA
    file, mechanism and each principal's name and password file (never the password itself)."""
    sp = secure_paths(home)
    if not sp.ca_pem.is_file():
        return None
    principals = {role: {"username": name, "password_file": str(sp.password_file(name)),
                         "principal": f"User:{name}"} for role, name in PRINCIPALS.items()}
    principals["admin"] = {"username": ADMIN, "password_file": str(sp.password_file(ADMIN)),
                           "principal": f"User:{ADMIN}"}
    return {"bootstrap": f"127.0.0.1:{settings.local_stack.kafka_port}", "security_protocol": "SASL_SSL",
            "sasl_mechanism": MECHANISM, "ca_file": str(sp.ca_pem), "principals": principals,
            "s3_endpoint": f"https://127.0.0.1:{settings.local_stack.s3_port}",
            "redis": {"username": REDIS_USER, "password_file": str(sp.password_file(f"redis-{REDIS_USER}")),
                      "tls": False},
            "env": {"TTS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TTS_KAFKA_SASL_MECHANISM": MECHANISM,
                    "TTS_KAFKA_SSL_CA_FILE": str(sp.ca_pem), "TTS_S3_ENDPOINT": f"https://127.0.0.1:{settings.local_stack.s3_port}",
                    "TTS_S3_CA_BUNDLE": str(sp.ca_pem), "TTS_REDIS_USERNAME": REDIS_USER}}


def is_secure(home: Path) -> bool:
    return secure_paths(home).ca_pem.is_file()


def tool_properties(home: Path) -> Path:
    """A client properties file (0600) for Kafka's command-line tools as the admin (``--command-config``)."""
    sp = secure_paths(home)
    path = sp.root / "admin.properties"
    if not path.is_file():
        pw = _password(sp.password_file(ADMIN))
        _write_secret(path, "\n".join([
            "security.protocol=SASL_SSL", f"sasl.mechanism={MECHANISM}",
            f'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
            f'password="{pw}";', "ssl.truststore.type=PEM", f"ssl.truststore.location={sp.ca_pem}"]))
    return path
