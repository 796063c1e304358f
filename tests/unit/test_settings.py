"""Settings: defaults for the local stack, env overrides, bounds checked at load with one clear line,
each field declared once in its section."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.registry import BACKENDS
from streams.settings import Secret, Settings, SettingsError, describe, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_match_the_local_stack() -> None:
    s = load_settings({})
    assert s.kafka.bootstrap_servers == f"127.0.0.1:{s.local_stack.kafka_port}" == "127.0.0.1:9092"
    assert s.s3.s3_endpoint == f"http://127.0.0.1:{s.local_stack.s3_port}"
    assert s.redis.redis_url == f"redis://127.0.0.1:{s.local_stack.redis_port}/0"
    assert (s.kafka.topic_requests, s.kafka.topic_segments, s.kafka.topic_completed, s.kafka.topic_dlq) == (
        "tts.requests", "tts.segments", "tts.completed", "tts.requests.dlq")
    assert s.kafka.partitions == 4


def test_env_overrides_each_type() -> None:
    s = load_settings({"TTS_MAX_BATCH": "16", "TTS_BACKEND": "piper", "TTS_TOPIC_REQUESTS": "my.requests",
                       "TTS_MAX_WAIT_MS": "0", "UNRELATED": "x"})
    assert (s.batching.max_batch, s.engine.backend, s.kafka.topic_requests, s.batching.max_wait_ms) == (
        16, "piper", "my.requests", 0)


def test_cli_overrides_beat_env_and_none_means_unset() -> None:
    s = load_settings({"TTS_MAX_BATCH": "16"}, max_batch=4, max_wait_ms=None)
    assert s.batching.max_batch == 4 and s.batching.max_wait_ms == Settings().batching.max_wait_ms


def test_settings_are_frozen() -> None:
    s = load_settings({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.batching.max_batch = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.batching = s.batching  # type: ignore[misc]
    assert s.replace(max_batch=3).batching.max_batch == 3 and s.batching.max_batch == 8


@pytest.mark.parametrize(("env", "message"), [
    ({"TTS_MAX_BATCH": "0"}, "TTS_MAX_BATCH=0 is below the minimum 1"),
    ({"TTS_MAX_BATCH": "2000"}, "TTS_MAX_BATCH=2000 is above the maximum 1024"),
    ({"TTS_PARTITIONS": "0"}, "TTS_PARTITIONS=0 is below the minimum 1"),
    ({"TTS_KAFKA_PORT": "70000"}, "TTS_KAFKA_PORT=70000 is above the maximum 65535"),
    ({"TTS_MAX_WAIT_MS": "-1"}, "TTS_MAX_WAIT_MS=-1 is below the minimum 0"),
    ({"TTS_MAX_SEGMENT_CHARS": "8"}, "TTS_MAX_SEGMENT_CHARS=8 is below the minimum 16"),
    ({"TTS_BACKEND": "espeak"}, "TTS_BACKEND='espeak' is not one of hibari, piper, kokoro, chattts"),
    ({"TTS_BACKENDS": "hibari,espeak"}, "TTS_BACKENDS='hibari,espeak': 'espeak' is not one of hibari, piper"),
    ({"TTS_STAGE_GUARANTEE": "exactly_once"}, "TTS_STAGE_GUARANTEE=exactly_once is refused: faust's exactly_once"),
    ({"TTS_STAGE_GUARANTEE": "sometimes"}, "TTS_STAGE_GUARANTEE='sometimes' is not one of at_least_once"),
    ({"TTS_PRECISION": "fp8"}, "TTS_PRECISION='fp8' is not one of"),
    ({"TTS_LOG_LEVEL": "loud"}, "TTS_LOG_LEVEL='loud' is not one of"),
    ({"TTS_MAX_BATCH": "eight"}, "TTS_MAX_BATCH='eight'"),
    ({"TTS_MAX_BATCH": "1.5"}, "TTS_MAX_BATCH='1.5'"),
    ({"TTS_LENGTH_BUCKETS": "64,32"}, "TTS_LENGTH_BUCKETS='64,32' must be ascending"),
    ({"TTS_LENGTH_BUCKETS": "32,32"}, "TTS_LENGTH_BUCKETS='32,32' must be ascending"),
    ({"TTS_LENGTH_BUCKETS": "0,32"}, "TTS_LENGTH_BUCKETS='0,32' must be ascending"),
    ({"TTS_LENGTH_BUCKETS": "a,b"}, "TTS_LENGTH_BUCKETS='a,b'"),
])
def test_bad_values_are_one_clear_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as e:
        load_settings(env)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_bounds_are_inclusive() -> None:
    s = load_settings({"TTS_MAX_BATCH": "1", "TTS_PARTITIONS": "10000", "TTS_KAFKA_PORT": "65535"})
    assert (s.batching.max_batch, s.kafka.partitions, s.local_stack.kafka_port) == (1, 10000, 65535)


def test_unknown_override_is_refused() -> None:
    with pytest.raises(SettingsError, match="unknown settings: nope"):
        load_settings({}, nope=1)


def test_a_stack_port_alone_moves_its_client_address() -> None:
    s = load_settings({"TTS_KAFKA_PORT": "19092", "TTS_S3_PORT": "19000", "TTS_REDIS_PORT": "16379"})
    assert s.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert s.s3.s3_endpoint == "http://127.0.0.1:19000"
    assert s.redis.redis_url == "redis://127.0.0.1:16379/0"
    explicit = load_settings({"TTS_KAFKA_PORT": "19092", "TTS_BOOTSTRAP_SERVERS": "kafka:9092"})
    assert explicit.kafka.bootstrap_servers == "kafka:9092"  # an explicit address wins


def test_derived_values() -> None:
    s = load_settings({"TTS_HOME": "/srv/tts", "TTS_LENGTH_BUCKETS": "16, 48,200"})
    assert s.batching.buckets == (16, 48, 200)
    assert s.effective_model_dir == Path("/srv/tts/models")
    assert load_settings({"TTS_MODEL_DIR": "/m"}).effective_model_dir == Path("/m")
    assert load_settings({"TTS_TRANSACTIONAL_ID": "w-1"}).kafka.effective_transactional_id == "w-1"
    assert load_settings({}).kafka.effective_transactional_id.startswith("ttsflow-workers-")
    assert load_settings({"TTS_TRANSACTIONAL_ID_PREFIX": "acme"}).kafka.effective_transactional_id.startswith("acme-")
    assert load_settings({"TTS_WORKER_GROUP": "g"}).kafka.effective_transactional_id_prefix == "g"


def test_exactly_once_at_the_stage_is_refused_with_what_gives_it_instead() -> None:
    with pytest.raises(SettingsError) as e:
        load_settings({}, stage_guarantee="exactly_once")
    assert "SIGKILL" in str(e.value) and "done log" in str(e.value) and "at_least_once" in str(e.value)
    assert load_settings({"TTS_STAGE_GUARANTEE": "at_least_once"}).stage.stage_guarantee == "at_least_once"


def _section_fields() -> list[tuple[str, dataclasses.Field[Any]]]:
    return [(s.name, f) for s in dataclasses.fields(Settings)
            for f in dataclasses.fields(getattr(Settings(), s.name))]


def test_every_field_is_declared_once_in_one_frozen_section() -> None:
    names = [f.name for _, f in _section_fields()]
    assert len(names) == len(set(names)), f"in two sections: {sorted(n for n in names if names.count(n) > 1)}"
    s = Settings()
    for sec in dataclasses.fields(Settings):
        section = getattr(s, sec.name)
        assert type(section).__dataclass_params__.frozen and not hasattr(section, "__dict__")  # type: ignore[attr-defined]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, dataclasses.fields(section)[0].name, None)
    flat = [n for n in vars(Settings) if n in set(names)]
    assert not flat, f"declared on Settings as well: {flat}"


def test_env_names_are_derived_and_unique() -> None:
    rows = describe()
    assert [d.env for d in rows] == [f"TTS_{d.name.upper()}" for d in rows]
    assert len({d.env for d in rows}) == len(rows)
    # the names deploy files, docs and tests use (a sample from each section)
    assert {"TTS_BOOTSTRAP_SERVERS", "TTS_S3_BUCKET", "TTS_REDIS_URL", "TTS_STAGE_GUARANTEE", "TTS_MAX_BATCH",
            "TTS_BACKEND", "TTS_LAG_THRESHOLD", "TTS_HOME", "TTS_KAFKA_PORT", "TTS_GATEWAY_PORT"} <= {d.env for d in rows}


def test_describe_covers_every_field_in_declaration_order() -> None:
    rows = describe()
    assert [(d.section, d.name) for d in rows] == [(sec, f.name) for sec, f in _section_fields()]
    for d in rows:
        assert re.fullmatch(r"TTS_[A-Z0-9_]+", d.env)
        assert d.doc.strip(), f"{d.env} has no description"
        assert d.type in ("str", "int", "float", "bool", "Secret"), d
    by_name = {d.name: d for d in rows}
    assert by_name["home"].default == "~/.local/share/ttsflow"  # not this machine's home
    assert (by_name["max_batch"].section, by_name["max_batch"].default, by_name["max_batch"].lo,
            by_name["max_batch"].hi) == ("batching", "8", 1, 1024)
    assert by_name["stage_guarantee"].choices == ("at_least_once",)
    assert by_name["backend"].choices == BACKENDS
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_name["home"].doc = ""  # type: ignore[misc]


def test_sections_are_built_once() -> None:
    s = load_settings({})
    for sec in dataclasses.fields(Settings):
        assert getattr(s, sec.name) is getattr(s, sec.name)
    assert s.kafka is s.kafka
    t = s.replace(max_batch=3)
    assert t.kafka is s.kafka and t.batching is not s.batching  # only the changed section is rebuilt


def test_replace_routes_flat_names_and_checks_again() -> None:
    s = load_settings({})
    t = s.replace(max_batch=3, s3_bucket="b", lag_threshold=7, kafka_sasl_password="pw")
    assert (t.batching.max_batch, t.s3.s3_bucket, t.scaling.lag_threshold) == (3, "b", 7)
    assert isinstance(t.kafka.kafka_sasl_password, Secret) and repr(t.kafka.kafka_sasl_password) == "Secret('***')"
    with pytest.raises(SettingsError, match="TTS_MAX_BATCH=0 is below the minimum 1"):
        s.replace(max_batch=0)
    with pytest.raises(SettingsError, match="TTS_LENGTH_BUCKETS='64,32' must be ascending"):
        s.replace(length_buckets="64,32")
    with pytest.raises(SettingsError, match="unknown settings: nope"):
        s.replace(nope=1)


# --- deploy files use the same names -----------------------------------------------------------

def _known_env() -> set[str]:
    return {d.env for d in describe()}


def test_compose_and_dockerfile_use_only_known_settings() -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for needed in ("kafka", "redis", "minio", "stage", "worker", "prometheus"):
        assert needed in services, f"docker-compose.yml lacks {needed}"
    used: set[str] = set()
    for svc in services.values():
        env = svc.get("environment", {})
        names = env.keys() if isinstance(env, dict) else [e.split("=", 1)[0] for e in env]
        used |= {n for n in names if n.startswith("TTS_")}
    for anchor in compose.get("x-ttsflow-env", {}) or {}:
        used.add(anchor)
    used |= set(re.findall(r"\bTTS_[A-Z0-9_]+", (ROOT / "deploy" / "Dockerfile").read_text()))
    assert used, "compose sets no TTS_ variables"
    assert used <= _known_env(), f"unknown settings in deploy files: {sorted(used - _known_env())}"
    assert services["kafka"]["image"].startswith("apache/kafka:3.9")


def _compose_cmd() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_config_is_valid() -> None:
    cmd = _compose_cmd()
    if cmd is None:
        reason = ("the docker client has no compose plugin" if shutil.which("docker")
                  else "neither docker nor docker-compose is installed")
        pytest.skip(f"cannot run `docker compose config -q`: {reason}")
    res = subprocess.run([*cmd, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([*cmd, "-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "deploy/compose/cluster.yml"),
                          "config", "-q"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert res.returncode == 0, res.stderr  # the three-broker override merges


def test_kraft_cluster_ids_never_look_like_options() -> None:
    from streams.devstack.services import _cluster_id

    ids = [_cluster_id() for _ in range(3000)]  # ~47 of 3000 would start with '-' without the guard
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_compose_cluster_override_is_three_replicated_brokers() -> None:
    """deploy/compose/cluster.yml: three KRaft voters that exist, RF 3 / min ISR 2 everywhere, distinct
    host ports, and clients bootstrapping from all three with known settings only."""
    import yaml

    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    over = yaml.safe_load((ROOT / "deploy" / "compose" / "cluster.yml").read_text())["services"]
    brokers = ["kafka", "kafka-2", "kafka-3"]
    envs = {b: over[b]["environment"] for b in brokers}
    voters = {v.split("@")[1].split(":")[0] for v in envs["kafka"]["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")}
    assert voters == set(brokers)
    assert sorted(e["KAFKA_NODE_ID"] for e in envs.values()) == [1, 2, 3]
    for e in envs.values():
        assert e["KAFKA_CONTROLLER_QUORUM_VOTERS"] == envs["kafka"]["KAFKA_CONTROLLER_QUORUM_VOTERS"]
        assert (e["KAFKA_DEFAULT_REPLICATION_FACTOR"], e["KAFKA_MIN_INSYNC_REPLICAS"]) == (3, 2)
        assert (e["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"], e["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"],
                e["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]) == (3, 3, 2)
    host_ports = [p for b in ("kafka-2", "kafka-3") for p in over[b]["ports"]] + base["kafka"]["ports"]
    assert len(set(host_ports)) == 3
    assert "--replication-factor 3" in over["kafka-init"]["command"][0]
    for app in ("stage", "worker", "gateway"):
        env = over[app]["environment"]
        assert env["TTS_BOOTSTRAP_SERVERS"].split(",") == [f"{b}:19092" for b in brokers]
        assert set(env) <= _known_env()
