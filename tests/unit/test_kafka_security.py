"""Kafka/S3/Redis security settings: masked secrets, password files, one config for every client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streams.kafka.config import client_config, consumer_config, faust_credentials, producer_config, ssl_context
from streams.settings import Secret, Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]


def _sasl(**env: str) -> Settings:
    return load_settings(env={"TTS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TTS_KAFKA_SASL_USERNAME": "u",
                              "TTS_KAFKA_SASL_PASSWORD": "hunter2-secret", **env})


def test_secrets_are_masked_in_every_repr_yet_usable() -> None:
    s = _sasl(TTS_REDIS_PASSWORD="redis-pw-secret")
    for shown in (repr(s), repr(s.kafka), repr(s.s3), repr(s.redis), str(s)):
        for secret in ("hunter2-secret", "redis-pw-secret", "ttsflow-local-secret"):
            assert secret not in shown
    assert "Secret('***')" in repr(s.kafka)
    assert isinstance(s.kafka.kafka_sasl_password, Secret) and s.kafka.kafka_sasl_password.reveal() == "hunter2-secret"
    replaced = s.replace(kafka_sasl_password="other-secret")  # a plain str in: still masked
    assert isinstance(replaced.kafka.kafka_sasl_password, Secret) and "other-secret" not in repr(replaced)


def test_passwords_come_from_files_as_kubernetes_mounts_them(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("from-file\n")
    (tmp_path / "s3").write_text("s3-from-file")
    s = load_settings(env={"TTS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "TTS_KAFKA_SASL_USERNAME": "u",
                           "TTS_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "k"),
                           "TTS_S3_SECRET_KEY_FILE": str(tmp_path / "s3")})
    assert s.kafka.kafka_sasl_password.reveal() == "from-file" and s.s3.s3_secret_key.reveal() == "s3-from-file"
    assert client_config(s.kafka)["sasl.password"] == "from-file"
    with pytest.raises(SettingsError, match=r"TTS_REDIS_PASSWORD_FILE=.*cannot read"):
        load_settings(env={"TTS_REDIS_PASSWORD_FILE": str(tmp_path / "absent")})


@pytest.mark.parametrize(("env", "message"), [
    ({"TTS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs TTS_KAFKA_SASL_USERNAME"),
    ({"TTS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TTS_KAFKA_SASL_USERNAME": "u"}, "needs TTS_KAFKA_SASL_USERNAME"),
    ({"TTS_KAFKA_SECURITY_PROTOCOL": "SSL", "TTS_KAFKA_SSL_CERT_FILE": "/x"}, "go together"),
    ({"TTS_KAFKA_SSL_CA_FILE": "/etc/hostname"}, "uses no TLS"),
    ({"TTS_KAFKA_SECURITY_PROTOCOL": "SSL", "TTS_KAFKA_SSL_CA_FILE": "/no/such.pem"}, "no such file"),
    ({"TTS_KAFKA_SASL_MECHANISM": "AWS_MSK_IAM"}, "is not one of"),
    ({"TTS_KAFKA_SECURITY_PROTOCOL": "ssl"}, "is not one of"),
])
def test_inconsistent_security_settings_are_one_clear_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(env=env)


def test_plaintext_configs_are_unchanged_and_secured_ones_carry_the_same_settings_everywhere() -> None:
    plain = Settings().kafka
    assert client_config(plain) == {"bootstrap.servers": plain.bootstrap_servers}
    assert faust_credentials(plain) is None and ssl_context(plain) is None
    s = _sasl(TTS_KAFKA_SASL_MECHANISM="PLAIN").kafka
    want = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
            "sasl.password": "hunter2-secret"}
    for conf in (client_config(s), producer_config(s), consumer_config(s, "g")):
        assert want.items() <= conf.items()
        assert "ssl.ca.location" not in conf  # the system's trust store (Confluent Cloud, MSK)


def test_mutual_tls_and_a_private_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    s = load_settings(env={"TTS_KAFKA_SECURITY_PROTOCOL": "SSL", "TTS_KAFKA_SSL_CA_FILE": str(ca),
                           "TTS_KAFKA_SSL_CERT_FILE": str(ca), "TTS_KAFKA_SSL_KEY_FILE": str(ca)}).kafka
    conf = client_config(s)
    assert conf["security.protocol"] == "SSL" and conf["ssl.ca.location"] == str(ca)
    assert conf["ssl.certificate.location"] == conf["ssl.key.location"] == str(ca)
    assert "sasl.username" not in conf


def test_faust_gets_the_same_credentials_with_a_verifying_ssl_context() -> None:
    import ssl

    import faust

    creds = faust_credentials(_sasl(TTS_KAFKA_SASL_MECHANISM="SCRAM-SHA-256").kafka)
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.username == "u" and creds.password == "hunter2-secret"
    assert creds.mechanism.value == "SCRAM-SHA-256" and creds.protocol.value == "SASL_SSL"
    assert creds.ssl_context is not None and creds.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert creds.ssl_context.check_hostname and "hunter2" not in repr(creds)
    sasl_plain = faust_credentials(load_settings(env={"TTS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                                                      "TTS_KAFKA_SASL_USERNAME": "u",
                                                      "TTS_KAFKA_SASL_PASSWORD": "p"}).kafka)
    assert sasl_plain.protocol.value == "SASL_PLAINTEXT" and sasl_plain.ssl_context is None
    tls = faust_credentials(load_settings(env={"TTS_KAFKA_SECURITY_PROTOCOL": "SSL"}).kafka)
    assert isinstance(tls, faust.SSLCredentials)


def test_our_own_aiokafka_clients_get_what_faust_gives_its_own() -> None:
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    from streams.kafka.config import aiokafka_auth

    assert aiokafka_auth(Settings().kafka) == {}
    for s in (_sasl(TTS_KAFKA_SASL_MECHANISM="SCRAM-SHA-256"), load_settings(env={"TTS_KAFKA_SECURITY_PROTOCOL": "SSL"})):
        ours, faust_own = aiokafka_auth(s.kafka), dict(credentials_to_aiokafka_auth(faust_credentials(s.kafka)))
        assert ours.keys() == faust_own.keys()
        assert {k: v for k, v in ours.items() if k != "ssl_context"} == \
            {k: v for k, v in faust_own.items() if k != "ssl_context"}
        assert ours["ssl_context"].verify_mode == faust_own["ssl_context"].verify_mode


def test_every_kafka_client_in_the_product_is_built_from_client_config() -> None:
    """A Consumer/Producer/AdminClient made from anything but the shared config builders would
    ignore the security settings (and reach only a plaintext cluster)."""
    made = re.compile(r"\b(Consumer|Producer|AdminClient)\(([^)\n]*)")
    builders = ("client_config(", "producer_config(", "consumer_config(", "reader_config(",
                "transactional_config(", "base", "conf")
    offenders = []
    for path in [*ROOT.glob("streams/**/*.py"), *ROOT.glob("storage/**/*.py")]:
        for m in made.finditer(path.read_text()):
            arg = m.group(2).strip()
            if arg and not arg.startswith(builders) and not arg.startswith(("consumer or", "producer or")):
                offenders.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not offenders, offenders
    built = re.compile(r"\bAIOKafka(Consumer|Producer|AdminClient|Client)\(")  # a client made (not a class patched)
    for path in ROOT.glob("streams/**/*.py"):
        text = path.read_text()
        if built.search(text):
            assert any(f in text for f in ("faust_credentials", "credentials_to_aiokafka_auth", "aiokafka_auth(")), path


def test_redis_auth_options() -> None:
    from storage.cache import redis_auth

    assert redis_auth("redis://h:6379/0") == {}
    assert redis_auth("redis://h/0", "ttsflow", Secret("pw")) == {"username": "ttsflow", "password": "pw"}
    assert redis_auth("rediss://h/0", ca_file="/ca.pem") == {"ssl_cert_reqs": "required", "ssl_ca_certs": "/ca.pem"}


def test_presigned_links_are_off_by_default_and_bounded() -> None:
    assert Settings().s3.s3_presign_ttl_s == 0
    with pytest.raises(SettingsError, match="above the maximum"):
        load_settings(env={"TTS_S3_PRESIGN_TTL_S": str(8 * 24 * 3600)})  # S3 SigV4 allows 7 days at most


def test_an_access_check_the_cluster_does_not_answer_is_retriable_not_a_crash() -> None:
    # a broker restarting while a worker starts: the futures never complete in time
    from concurrent.futures import Future

    from streams.errors import RetriableError
    from streams.kafka.access import require, role_needs
    from streams.settings import Settings

    class SilentAdmin:
        def describe_topics(self, topics, **_kw):  # type: ignore[no-untyped-def]
            return {t: Future() for t in topics.topic_names}

        def describe_consumer_groups(self, groups, **_kw):  # type: ignore[no-untyped-def]
            return {g: Future() for g in groups}

    kafka = Settings().kafka
    with pytest.raises(RetriableError, match="did not answer the worker's access check"):
        require(kafka, role_needs(kafka, "worker"), role="worker", admin=SilentAdmin(), timeout_s=0.05)
