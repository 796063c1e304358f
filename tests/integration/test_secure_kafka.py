"""ttsflow on a secured broker (``ttsflow stack up --secure``): SASL_SSL only, SCRAM, ACLs.

One private secured stack for the module. The pipeline answers over SASL_SSL with each
process as its own principal; a client with a wrong password, no credentials or the wrong
protocol fails in seconds with one clear line; the user principal cannot forge answers,
read the internal segments or take a worker's transactional id; a worker or stage whose
principal lacks its ACLs refuses to start and names what is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from streams.devstack import secure
from streams.devstack.procs import Supervisor, settings_env
from streams.kafka.config import consumer_config, producer_config
from streams.settings import Settings

pytestmark = pytest.mark.integration

_FAST_S = 10.0  # a refused client must be told within this (librdkafka alone retries forever)


def _as(stack: tuple[Settings, Path], role: str) -> Settings:
    s, home = stack
    return secure.client_settings(s, home, secure.PRINCIPALS[role])


def _password(stack: tuple[Settings, Path], role: str) -> str:
    return secure.secure_paths(stack[1]).password_file(secure.PRINCIPALS[role]).read_text().strip()


def _get(url: str, ca_file: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10, context=ssl.create_default_context(cafile=ca_file)) as r:
        return bytes(r.read())


def _cli(env: dict[str, str], *args: str, timeout: float = 120.0) -> tuple[int, str, float]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "streams.cli", *args], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=timeout, check=False)
    return res.returncode, res.stderr, time.monotonic() - t0


def test_status_names_principals_and_files_never_passwords(secure_stack: tuple[Settings, Path]) -> None:
    s, _home = secure_stack
    env = settings_env(s)
    res = subprocess.run([sys.executable, "-m", "streams.cli", "stack", "status", "--json"],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=True)
    sec = json.loads(res.stdout)["kafka"]["security"]
    assert sec["bootstrap"] == s.kafka.bootstrap_servers and sec["security_protocol"] == "SASL_SSL"
    assert Path(sec["ca_file"]).read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert {sec["principals"][r]["username"] for r in ("user", "stage", "worker")} == set(secure.PRINCIPALS.values())
    for role in ("user", "stage", "worker"):
        assert Path(sec["principals"][role]["password_file"]).stat().st_mode & 0o077 == 0
        assert _password(secure_stack, role) not in res.stdout
    assert "Secret('***')" in repr(_as(secure_stack, "user").kafka)


def test_pipeline_answers_over_sasl_ssl_each_process_its_own_principal(secure_stack: tuple[Settings, Path],
                                                                        tmp_path: Path) -> None:
    from streams.client import TTSClient

    stage, user = _as(secure_stack, "stage"), _as(secure_stack, "user")
    worker = _as(secure_stack, "worker")
    ttl = 5  # completions carry a presigned link to their audio, valid this long
    worker = worker.replace(transactional_id=f"{worker.kafka.effective_transactional_id_prefix}-test-1",
                            s3_presign_ttl_s=ttl)
    assert worker.s3.s3_endpoint.startswith("https://") and worker.redis.redis_username  # S3 over TLS, Redis ACL user
    n = 6
    with Supervisor(tmp_path) as sup:
        w = sup.worker("worker", worker)
        st = sup.stage("stage", stage)
        sup.wait_ready(w, timeout=240)
        sup.wait_ready(st, timeout=240)
        with TTSClient(user, lookback_s=5) as client:
            latencies = []
            for i in range(n):
                t0 = time.monotonic()
                rid = client.submit(f"Secured request {i} reads {uuid.uuid4().hex[:6]} aloud.", f"user-{i % 3}")
                c = client.wait(rid, 120)
                latencies.append(time.monotonic() - t0)
                assert c.status == "ok", c
                assert client.fetch(c)[:4] == b"RIFF"
                assert c.audio is not None and c.audio.url is not None
                # the link alone (plain HTTPS GET, no S3 credentials) fetches the same bytes, before it expires
                assert hashlib.sha256(_get(c.audio.url, user.s3.s3_ca_bundle)).hexdigest() == c.audio.sha256
        sup.check_alive()
    assert c.audio is not None and c.audio.url is not None
    deadline = time.monotonic() + ttl + 30  # refused once expired (S3's clock: seconds, no sleep beyond the TTL)
    status = 200
    while status == 200 and time.monotonic() < deadline:
        try:
            _get(c.audio.url, user.s3.s3_ca_bundle)
        except urllib.error.HTTPError as e:
            status = e.code
            assert b"expired" in e.read()
        else:
            time.sleep(0.5)  # poll interval of the expiry check
    assert status == 403
    print(f"secured e2e: {n} requests, {len(latencies)} answered, latency s: "
          f"{', '.join(f'{x:.2f}' for x in latencies)}")
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    for role in ("user", "stage", "worker"):
        assert _password(secure_stack, role) not in logs


def test_wrong_password_no_credentials_or_plaintext_fail_fast(secure_stack: tuple[Settings, Path],
                                                              tmp_path: Path) -> None:
    user = _as(secure_stack, "user")
    env = settings_env(user)
    out = str(tmp_path / "a.wav")
    rc, err, took = _cli({**env, "TTS_KAFKA_SASL_PASSWORD": "not-the-password"}, "say", "hello", "-o", out)
    print(f"wrong password: rc={rc} in {took:.2f}s: {err.strip()}")
    assert rc == 1 and took < _FAST_S
    assert "refused this client" in err and "invalid credentials" in err and "not-the-password" not in err

    rc, err, took = _cli({**env, "TTS_KAFKA_SASL_USERNAME": "", "TTS_KAFKA_SASL_PASSWORD": ""}, "say", "hello",
                         "-o", out)
    print(f"no credentials: rc={rc} in {took:.2f}s: {err.strip()}")
    assert rc == 2 and "needs TTS_KAFKA_SASL_USERNAME" in err

    rc, err, took = _cli({**env, "TTS_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT", "TTS_KAFKA_SSL_CA_FILE": ""}, "say",
                         "hello", "-o", out)
    print(f"plaintext client: rc={rc} in {took:.2f}s: {err.strip()}")
    assert rc == 1 and took < _FAST_S and "did not answer" in err and "TTS_KAFKA_SECURITY_PROTOCOL" in err

    rc, err, took = _cli({**env, "TTS_KAFKA_SSL_CA_FILE": ""}, "say", "hello", "-o", out)
    print(f"untrusted CA: rc={rc} in {took:.2f}s: {err.strip()}")
    assert rc == 1 and took < _FAST_S and "certificate verify failed" in err

    worker = settings_env(_as(secure_stack, "worker").replace(metrics_port=0))
    rc, err, took = _cli({**worker, "TTS_KAFKA_SASL_PASSWORD": "not-the-password"}, "worker")
    print(f"worker, wrong password: rc={rc} in {took:.2f}s: {err.strip().splitlines()[-1]}")
    assert rc == 1 and took < 30 and "invalid credentials" in err and "not-the-password" not in err


def _error_code(poll: Any, deadline_s: float) -> str | None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = poll()
        if got is not None:
            return str(got)
    return None


def test_user_principal_cannot_forge_answers_read_segments_or_take_a_worker_id(
        secure_stack: tuple[Settings, Path]) -> None:
    user = _as(secure_stack, "user")
    k = user.kafka
    errors: list[str] = []
    p = Producer(producer_config(k, **{"message.timeout.ms": 10_000}))
    p.produce(k.topic_completed, key=b"u", value=b"{}",
              on_delivery=lambda err, _m: errors.append(err.name() if err else "delivered"))
    p.flush(15)
    assert errors == ["TOPIC_AUTHORIZATION_FAILED"], errors

    # a group it may use, so only the topic is refused
    c = Consumer(consumer_config(k, f"ttsflow-client-{uuid.uuid4().hex[:8]}"))
    try:
        assert c.list_topics(k.topic_segments, timeout=10).topics[k.topic_segments].error.name() == \
            "TOPIC_AUTHORIZATION_FAILED"
        c.subscribe([k.topic_segments])

        def poll() -> str | None:
            m = c.poll(0.5)
            return None if m is None else (m.error().name() if m.error() else "read a segment")
        assert _error_code(poll, 15) == "TOPIC_AUTHORIZATION_FAILED"
    finally:
        c.close()

    t = Producer(producer_config(k, **{"transactional.id": f"{k.effective_transactional_id_prefix}-test-1"}))
    with pytest.raises(KafkaException) as e:
        t.init_transactions(15)
    assert e.value.args[0].name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


def test_worker_and_stage_refuse_to_start_without_their_acls(secure_stack: tuple[Settings, Path]) -> None:
    user = _as(secure_stack, "user").replace(metrics_port=0)
    rc, err, took = _cli(settings_env(user), "worker")
    print(f"worker as {user.kafka.kafka_sasl_username}: rc={rc} in {took:.2f}s: {err.strip().splitlines()[-1]}")
    assert rc == 1 and "the worker cannot start" in err
    assert f"READ on topic {user.kafka.topic_segments}" in err and f"WRITE on topic {user.kafka.topic_completed}" in err
    assert f"READ on group {user.kafka.worker_group}" in err

    rc, err, took = _cli(settings_env(user), "stage")
    print(f"stage as {user.kafka.kafka_sasl_username}: rc={rc} in {took:.2f}s: {err.strip().splitlines()[-1]}")
    assert rc == 1 and "the stage cannot start" in err
    assert f"READ on topic {user.kafka.topic_requests}" in err and f"WRITE on topic {user.kafka.topic_segments}" in err
