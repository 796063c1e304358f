"""Settings: defaults for the local stack, env overrides, bounds checked at load with one clear line."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from streams.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_match_the_local_stack() -> None:
    s = load_settings({})
    assert s.bootstrap_servers == f"127.0.0.1:{s.kafka_port}" == "127.0.0.1:9092"
    assert s.s3_endpoint == f"http://127.0.0.1:{s.s3_port}"
    assert s.redis_url == f"redis://127.0.0.1:{s.redis_port}/0"
    assert (s.topic_requests, s.topic_segments, s.topic_completed, s.topic_dlq) == (
        "tts.requests", "tts.segments", "tts.completed", "tts.requests.dlq")
    assert s.partitions == 4


def test_env_overrides_each_type() -> None:
    s = load_settings({"TTS_MAX_BATCH": "16", "TTS_BACKEND": "piper", "TTS_TOPIC_REQUESTS": "my.requests",
                       "TTS_MAX_WAIT_MS": "0", "UNRELATED": "x"})
    assert (s.max_batch, s.backend, s.topic_requests, s.max_wait_ms) == (16, "piper", "my.requests", 0)


def test_cli_overrides_beat_env_and_none_means_unset() -> None:
    s = load_settings({"TTS_MAX_BATCH": "16"}, max_batch=4, max_wait_ms=None)
    assert s.max_batch == 4 and s.max_wait_ms == Settings().max_wait_ms


def test_settings_are_frozen() -> None:
    s = load_settings({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_batch = 3  # type: ignore[misc]
    assert s.replace(max_batch=3).max_batch == 3 and s.max_batch == 8


@pytest.mark.parametrize(("env", "message"), [
    ({"TTS_MAX_BATCH": "0"}, "TTS_MAX_BATCH=0 is below the minimum 1"),
    ({"TTS_MAX_BATCH": "2000"}, "TTS_MAX_BATCH=2000 is above the maximum 1024"),
    ({"TTS_PARTITIONS": "0"}, "TTS_PARTITIONS=0 is below the minimum 1"),
    ({"TTS_KAFKA_PORT": "70000"}, "TTS_KAFKA_PORT=70000 is above the maximum 65535"),
    ({"TTS_MAX_WAIT_MS": "-1"}, "TTS_MAX_WAIT_MS=-1 is below the minimum 0"),
    ({"TTS_MAX_SEGMENT_CHARS": "8"}, "TTS_MAX_SEGMENT_CHARS=8 is below the minimum 16"),
    ({"TTS_BACKEND": "espeak"}, "TTS_BACKEND='espeak' is not one of hibari, piper, chattts"),
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
    assert (s.max_batch, s.partitions, s.kafka_port) == (1, 10000, 65535)


def test_unknown_override_is_refused() -> None:
    with pytest.raises(SettingsError, match="unknown settings: nope"):
        load_settings({}, nope=1)


def test_a_stack_port_alone_moves_its_client_address() -> None:
    s = load_settings({"TTS_KAFKA_PORT": "19092", "TTS_S3_PORT": "19000", "TTS_REDIS_PORT": "16379"})
    assert s.bootstrap_servers == "127.0.0.1:19092"
    assert s.s3_endpoint == "http://127.0.0.1:19000"
    assert s.redis_url == "redis://127.0.0.1:16379/0"
    explicit = load_settings({"TTS_KAFKA_PORT": "19092", "TTS_BOOTSTRAP_SERVERS": "kafka:9092"})
    assert explicit.bootstrap_servers == "kafka:9092"  # an explicit address wins


def test_derived_values() -> None:
    s = load_settings({"TTS_HOME": "/srv/tts", "TTS_LENGTH_BUCKETS": "16, 48,200"})
    assert s.buckets == (16, 48, 200)
    assert s.effective_model_dir == Path("/srv/tts/models")
    assert load_settings({"TTS_MODEL_DIR": "/m"}).effective_model_dir == Path("/m")
    assert load_settings({"TTS_TRANSACTIONAL_ID": "w-1"}).effective_transactional_id == "w-1"
    assert load_settings({}).effective_transactional_id.startswith("ttsflow-workers-")
    assert load_settings({"TTS_TRANSACTIONAL_ID_PREFIX": "acme"}).effective_transactional_id.startswith("acme-")
    assert load_settings({"TTS_WORKER_GROUP": "g"}).effective_transactional_id_prefix == "g"


def test_every_field_is_described() -> None:
    rows = Settings.describe()
    assert len(rows) == len(dataclasses.fields(Settings))
    for env, _default, doc in rows:
        assert re.fullmatch(r"TTS_[A-Z0-9_]+", env)
        assert doc.strip(), f"{env} has no description"


# --- deploy files use the same names -----------------------------------------------------------

def _known_env() -> set[str]:
    return {env for env, _, _ in Settings.describe()}


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


def test_every_setting_is_in_exactly_one_frozen_section_with_its_value() -> None:
    import dataclasses

    from streams.settings import SECTIONS

    s = Settings(max_batch=3, s3_bucket="b", lag_threshold=7)
    names = [f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(Settings)), "a setting in no section, or in two"
    for attr, cls in SECTIONS.items():
        section = getattr(s, attr)
        assert isinstance(section, cls)
        assert all(getattr(section, f.name) == getattr(s, f.name) for f in dataclasses.fields(cls))
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, dataclasses.fields(cls)[0].name, None)
    assert s.batching.max_batch == 3 and s.s3.s3_bucket == "b" and s.scaling.lag_threshold == 7


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
