"""The Kubernetes manifests, KEDA ScaledObject, alerts and Grafana dashboard agree with the code.

Parses every file under deploy/k8s and deploy/grafana and checks what would break in a
cluster without failing ``kubectl apply``: env names the settings do not know, probes on
paths the process does not serve, a worker without a GPU or a stable transactional id, a
ScaledObject whose trigger disagrees with the settings defaults or lets replicas idle,
a PodDisruptionBudget that selects nothing, metric names the code never exports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.kafka import consumer_config
from streams.settings import Settings, describe, load_settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
GRAFANA = ROOT / "deploy" / "grafana"
SETTINGS_ENV = {d.env for d in describe()}
DEFAULTS = Settings()


def _docs() -> list[dict[str, Any]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                doc["__file__"] = path.name
                out.append(doc)
    return out


DOCS = _docs()


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in DOCS if d.get("kind") == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["spec"]["template"]["spec"]["containers"])


def _workloads() -> list[dict[str, Any]]:
    return [d for d in DOCS if d.get("kind") in ("Deployment", "StatefulSet")]


def test_every_manifest_parses_and_names_itself() -> None:
    assert {p.name for p in K8S.glob("*.yaml")} >= {"configmap.yaml", "secret.yaml", "stage.yaml", "worker.yaml",
                                                    "scaledobject.yaml", "pdb.yaml", "podmonitor.yaml"}
    for d in DOCS:
        if d["__file__"] == "prometheus-scrape.yaml":
            assert d["scrape_configs"][0]["job_name"] == "ttsflow"
            continue
        if d.get("kind") == "Kustomization":
            continue
        assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), d["__file__"]
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for res in kust["resources"]:
        assert (K8S / res).exists(), res


def test_configmap_and_secret_hold_only_settings_and_load_cleanly() -> None:
    cm = _one("ConfigMap", "ttsflow-config")["data"]
    secret = _one("Secret", "ttsflow-credentials")["stringData"]
    assert set(cm) <= SETTINGS_ENV, set(cm) - SETTINGS_ENV
    assert set(secret) <= SETTINGS_ENV, set(secret) - SETTINGS_ENV
    assert not set(cm) & set(secret)
    for key in ("TTS_S3_ACCESS_KEY", "TTS_S3_SECRET_KEY"):
        assert key in secret and key not in cm  # credentials only in the Secret
    s = load_settings(env={**cm, **secret})
    assert s.process.metrics_port == 9108


def _expand(value: str, known: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion, from the variables defined before (envFrom, earlier env)."""
    def one(m: re.Match[str]) -> str:
        assert m.group(1) in known, f"$({m.group(1)}) is not defined before it is used"
        return known[m.group(1)]
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, value)


def test_every_container_env_is_a_setting_and_comes_from_the_configmap_and_secret() -> None:
    cm = _one("ConfigMap", "ttsflow-config")["data"]
    for w in _workloads():
        for c in _containers(w):
            known = dict(cm)
            helpers = set()
            for e in c.get("env", []):
                if not e["name"].startswith("TTS_"):
                    # a downward-API value only spelled into a setting below (ttsflow never reads it)
                    assert "fieldRef" in e.get("valueFrom", {}), (w["metadata"]["name"], e["name"])
                    helpers.add(e["name"])
                    known[e["name"]] = f"<{e['name']}>"
                    continue
                assert e["name"] in SETTINGS_ENV, (w["metadata"]["name"], e["name"])
                if "value" in e:
                    known[e["name"]] = _expand(str(e["value"]), known)
            used = {m for e in c.get("env", []) for m in re.findall(r"\$\((\w+)\)", str(e.get("value", "")))}
            assert helpers <= used, f"{w['metadata']['name']}: {sorted(helpers - used)} set but never used"
            refs = {(k, v["name"]) for src in c.get("envFrom", []) for k, v in src.items()}
            assert ("configMapRef", "ttsflow-config") in refs, w["metadata"]["name"]
            if w["metadata"]["name"] in ("ttsflow-stage", "ttsflow-worker"):
                assert ("secretRef", "ttsflow-credentials") in refs


def _probe_paths(source_files: list[Path]) -> set[str]:
    text = "\n".join(p.read_text() for p in source_files if p.exists())
    return set(re.findall(r'"(/[a-z]+)"', text))


def _check_probes(doc: dict[str, Any], served: set[str]) -> None:
    port = int(load_settings(env=_one("ConfigMap", "ttsflow-config")["data"]).process.metrics_port)
    for c in _containers(doc):
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["metrics"] == port
        for probe in ("readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["port"] in ("metrics", port)
            assert get["path"] in served, (doc["metadata"]["name"], probe, get["path"], served)


def test_worker_is_a_statefulset_with_gpu_probes_and_stable_transactional_id() -> None:
    w = _one("StatefulSet", "ttsflow-worker")
    assert w["spec"]["podManagementPolicy"] == "Parallel"
    (c,) = _containers(w)
    res = c["resources"]
    assert int(res["limits"]["nvidia.com/gpu"]) >= 1
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"]
    env = {e["name"]: e for e in c["env"]}
    # the group's prefix and the pod name (stable per replica): what an ACL grants by PREFIXED pattern
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["TTS_TRANSACTIONAL_ID"]["value"] == "$(TTS_TRANSACTIONAL_ID_PREFIX)-$(POD_NAME)"
    cm = _one("ConfigMap", "ttsflow-config")["data"]
    s = load_settings(env={**cm, "TTS_TRANSACTIONAL_ID": _expand(env["TTS_TRANSACTIONAL_ID"]["value"],
                                                                   {**cm, "POD_NAME": "ttsflow-worker-0"})})
    assert s.kafka.effective_transactional_id == f"{s.kafka.effective_transactional_id_prefix}-ttsflow-worker-0"
    assert s.kafka.effective_transactional_id_prefix == s.kafka.worker_group
    served = _probe_paths([ROOT / "streams" / "worker_metrics.py", ROOT / "streams" / "worker.py",
                           ROOT / "streams" / "metrics_http.py"])
    _check_probes(w, served)
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # the grace period outlasts nothing the worker must finish: a transaction times out later
    assert w["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] * 1000 >= DEFAULTS.kafka.transaction_timeout_ms


def test_stage_probes_are_served_by_the_stage() -> None:
    sources = [*sorted((ROOT / "streams" / "stage").glob("*.py")), ROOT / "streams" / "metrics_http.py"]
    if not any(p.exists() for p in sources):
        pytest.skip("streams/stage/ is not in the tree yet")
    _check_probes(_one("Deployment", "ttsflow-stage"), _probe_paths(sources))


def test_lag_exporter_serves_on_the_metrics_port() -> None:
    d = _one("Deployment", "ttsflow-lag-exporter")
    (c,) = _containers(d)
    assert c["args"][:3] == ["ttsflow", "lag", "--serve"]
    assert int(c["args"][3]) == c["ports"][0]["containerPort"]


def test_pdb_selectors_match_pod_labels() -> None:
    pdbs = [d for d in DOCS if d.get("kind") == "PodDisruptionBudget"]
    assert {p["metadata"]["name"] for p in pdbs} == {"ttsflow-worker", "ttsflow-stage"}
    for pdb in pdbs:
        sel = pdb["spec"]["selector"]["matchLabels"]
        matched = [w for w in _workloads()
                   if sel.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert [w["metadata"]["name"] for w in matched] == [pdb["metadata"]["name"]], pdb["metadata"]["name"]
        assert sel.items() <= matched[0]["spec"]["selector"]["matchLabels"].items()


def test_scaledobject_trigger_agrees_with_settings_and_caps_at_partitions() -> None:
    so = _one("ScaledObject", "ttsflow-worker")
    cm = load_settings(env=_one("ConfigMap", "ttsflow-config")["data"])
    target = so["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("StatefulSet", "ttsflow-worker")
    (trig,) = so["spec"]["triggers"]
    assert trig["type"] == "kafka"
    md = trig["metadata"]
    assert md["topic"] == cm.kafka.topic_segments == DEFAULTS.kafka.topic_segments
    assert md["consumerGroup"] == cm.kafka.worker_group == DEFAULTS.kafka.worker_group
    assert md["bootstrapServers"] == cm.kafka.bootstrap_servers
    assert int(md["lagThreshold"]) == cm.scaling.lag_threshold == DEFAULTS.scaling.lag_threshold
    assert int(md["activationLagThreshold"]) == cm.scaling.activation_lag_threshold == DEFAULTS.scaling.activation_lag_threshold
    # an idle transactional partition keeps lag 1 (its commit marker): below this, never zero
    assert int(md["activationLagThreshold"]) >= cm.kafka.partitions
    # a partition without a committed offset is read from the start by the worker, so KEDA
    # must count it as its whole log
    assert md["offsetResetPolicy"] == consumer_config(DEFAULTS.kafka, "g")["auto.offset.reset"] == "earliest"
    assert all(isinstance(v, str) for v in md.values())  # KEDA metadata is a string map
    if md.get("allowIdleConsumers", "false") == "false":
        assert so["spec"]["maxReplicaCount"] <= cm.kafka.partitions
    assert so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"]
    assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"] >= so["spec"]["pollingInterval"]


def test_podmonitor_selects_every_workload_on_the_metrics_port() -> None:
    pm = _one("PodMonitor", "ttsflow")
    sel = pm["spec"]["selector"]["matchLabels"]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    for w in _workloads():
        assert sel.items() <= w["spec"]["template"]["metadata"]["labels"].items(), w["metadata"]["name"]
        assert any(p["name"] == "metrics" for c in _containers(w) for p in c["ports"])


# --- metric names used in deploy/ exist in the code --------------------------------------------

_METRIC_MODULES = ["streams/worker/metrics.py", "streams/stage/metrics.py", "streams/ops/lag/exporter.py"]
_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def _exported_names() -> set[str]:
    names: set[str] = set()
    for rel in _METRIC_MODULES:
        p = ROOT / rel
        if p.exists():
            for base in re.findall(r'"(ttsflow_[a-z0-9_]+)"', p.read_text()):
                names.update(base + s for s in _SUFFIXES)
                if base.endswith("_total"):
                    names.add(base[: -len("_total")] + "_created")
    return names


def _used_names(text: str) -> set[str]:
    return set(re.findall(r"\bttsflow_[a-z0-9_]+", text))


def _dashboard_exprs() -> list[str]:
    exprs = []
    for path in GRAFANA.glob("*.json"):
        dash = json.loads(path.read_text())
        for panel in dash["panels"]:
            exprs += [t["expr"] for t in panel.get("targets", [])]
        for var in dash.get("templating", {}).get("list", []):
            if var.get("type") == "query":
                exprs.append(str(var["query"]))
    return exprs


def test_dashboard_covers_the_questions_an_operator_asks() -> None:
    dash = json.loads((GRAFANA / "ttsflow-dashboard.json").read_text())
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for word in ("throughput", "lag", "desired vs actual", "batch fill", "latency", "cache hit", "real-time factor",
                 "errors"):
        assert word in titles, word
    exprs = " ".join(_dashboard_exprs())
    assert "histogram_quantile(0.5" in exprs and "histogram_quantile(0.99" in exprs


def test_every_metric_name_in_dashboard_alerts_and_scaledobject_exists_in_code() -> None:
    exported = _exported_names()
    assert "ttsflow_worker_e2e_latency_seconds_bucket" in exported and "ttsflow_lag_messages" in exported
    used: dict[str, set[str]] = {"grafana": set()}
    for e in _dashboard_exprs():
        used["grafana"] |= _used_names(e)
    for name in ("prometheusrule.yaml", "scaledobject.yaml"):
        used[name] = _used_names((K8S / name).read_text())
    assert used["grafana"] and used["prometheusrule.yaml"]
    for where, names in used.items():
        missing = names - exported
        assert not missing, f"{where} uses metrics no module exports: {sorted(missing)}"


def test_the_name_check_catches_a_typo() -> None:
    assert "ttsflow_worker_e2e_latency_second_bucket" not in _exported_names()


def _promtool_rules(groups: list[dict[str, Any]], tmp_path: Path) -> Any:
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus; .ci/run installs it)")
    f = tmp_path / "rules.yaml"
    f.write_text(yaml.safe_dump({"groups": groups}))
    return subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    rule = _one("PrometheusRule", "ttsflow")
    res = _promtool_rules(rule["spec"]["groups"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """Each panel query, with Grafana's variables filled in, as a recording rule for promtool."""
    rules = []
    for i, e in enumerate(_dashboard_exprs()):
        e = e.replace("$__rate_interval", "5m").replace("$worker_group", "ttsflow-workers")
        if e.startswith("label_values("):
            continue  # a Grafana template function, not PromQL
        rules.append({"record": f"ttsflow:dashboard_check_{i}", "expr": e})
    res = _promtool_rules([{"name": "dashboard", "rules": rules}], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    bad = _promtool_rules([{"name": "bad", "rules": [{"record": "x:y", "expr": "sum(rate(ttsflow_x[5m])"}]}], tmp_path)
    assert bad.returncode != 0


# --- Kafka security: principals, their Secrets and ACLs ------------------------------------------

def test_acl_script_and_strimzi_users_are_generated_from_the_code() -> None:
    from streams.devstack.secure import kafka_acls_script, strimzi_yaml

    s = load_settings(env={})
    assert (K8S / "kafka-acls.sh").read_text() == kafka_acls_script(s)
    assert (K8S / "strimzi-kafka-users.yaml").read_text() == strimzi_yaml(s)


def test_each_kafka_client_workload_is_its_own_principal_with_a_mounted_password() -> None:
    from streams.devstack.secure import OPS_PRINCIPAL, PRINCIPALS, acl_specs

    sec = _one("ConfigMap", "ttsflow-kafka-security")["data"]
    assert set(sec) <= SETTINGS_ENV and sec["TTS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert not any("PASSWORD" in k and not k.endswith("_FILE") for k in sec)  # passwords only in Secrets
    granted = {a.principal for a in acl_specs(DEFAULTS, ops=True)}
    secrets = {d["metadata"]["name"]: d for d in DOCS if d.get("kind") == "Secret"}
    users = {}
    for name in ("ttsflow-stage", "ttsflow-worker", "ttsflow-lag-exporter"):
        w = next(d for d in _workloads() if d["metadata"]["name"] == name)
        (c,) = _containers(w)
        refs = {(k, v["name"]) for src in c.get("envFrom", []) for k, v in src.items()}
        assert ("configMapRef", "ttsflow-kafka-security") in refs, name
        user = {e["name"]: e for e in c["env"]}["TTS_KAFKA_SASL_USERNAME"]["value"]
        assert f"User:{user}" in granted, (name, user)
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        vols = {v["name"]: v for v in w["spec"]["template"]["spec"]["volumes"]}
        secret = vols["kafka-password"]["secret"]
        assert secret["secretName"] == user and user in secrets  # Strimzi's Secret of a KafkaUser has its name
        assert "password" in secrets[user]["stringData"]
        (item,) = secret["items"]
        assert f"{mounts['kafka-password']}/{item['path']}" == sec["TTS_KAFKA_SASL_PASSWORD_FILE"]
        users[name] = user
    assert len(set(users.values())) == 3  # no principal shared by two roles
    assert users["ttsflow-stage"] == PRINCIPALS["stage"] and users["ttsflow-worker"] == PRINCIPALS["worker"]
    assert users["ttsflow-lag-exporter"] == OPS_PRINCIPAL


def test_secured_settings_load_as_a_pod_sees_them(tmp_path: Path) -> None:
    cm = _one("ConfigMap", "ttsflow-config")["data"]
    secret = _one("Secret", "ttsflow-credentials")["stringData"]
    sec = dict(_one("ConfigMap", "ttsflow-kafka-security")["data"])
    pw = tmp_path / "password"
    pw.write_text("from-the-mounted-secret\n")
    sec["TTS_KAFKA_SASL_PASSWORD_FILE"] = str(pw)
    s = load_settings(env={**cm, **secret, **sec, "TTS_KAFKA_SASL_USERNAME": "ttsflow-worker"})
    assert s.kafka.kafka_sasl_password.reveal() == "from-the-mounted-secret"
    shown = repr(s)
    assert "from-the-mounted-secret" not in shown
    assert "s3_secret_key=Secret('***')" in shown and "redis_password=Secret('***')" in shown
    assert not re.search(r"redis://[^/]*:[^/]*@", secret["TTS_REDIS_URL"])  # the password is its own key


def test_keda_reads_lag_with_the_ops_principal() -> None:
    so = _one("ScaledObject", "ttsflow-worker")
    (trig,) = so["spec"]["triggers"]
    ta = _one("TriggerAuthentication", trig["authenticationRef"]["name"])
    params = {r["parameter"]: r for r in ta["spec"]["secretTargetRef"]}
    assert set(params) >= {"sasl", "username", "password", "tls"}
    secrets = {d["metadata"]["name"]: d["stringData"] for d in DOCS if d.get("kind") == "Secret"}
    for r in params.values():
        assert r["key"] in secrets[r["name"]], r
    ops = secrets[params["username"]["name"]]
    assert ops["sasl"] == "scram_sha512" and ops["tls"] == "enable"


def test_gateway_is_a_user_principal_behind_one_service_on_the_port_it_serves() -> None:
    from streams.devstack.secure import PRINCIPALS

    d = _one("Deployment", "ttsflow-gateway")
    (c,) = _containers(d)
    assert c["args"] == ["ttsflow", "gateway"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    port = c["ports"][0]["containerPort"]
    assert int(env["TTS_GATEWAY_PORT"]) == port and env["TTS_GATEWAY_HOST"] == "0.0.0.0"
    # a user of the pipeline, never a writer of answers: its own principal and password Secret
    assert env["TTS_KAFKA_SASL_USERNAME"] == PRINCIPALS["user"]
    vols = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
    assert vols["kafka-password"]["secret"]["secretName"] == PRINCIPALS["user"]
    assert any(x.get("kind") == "Secret" and x["metadata"]["name"] == PRINCIPALS["user"] for x in DOCS)
    # the key file is mounted where the setting points, from a Secret that holds valid JSON
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    keys = vols["api-keys"]["secret"]
    assert env["TTS_GATEWAY_KEYS_FILE"] == f"{mounts['api-keys']}/{keys['items'][0]['path']}"
    json.loads(_one("Secret", keys["secretName"])["stringData"][keys["items"][0]["key"]])
    served = _probe_paths(sorted((ROOT / "streams" / "gateway").glob("*.py")))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] in served, probe
    svc = _one("Service", "ttsflow-gateway")
    assert svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]
    assert d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > DEFAULTS.gateway.gateway_wait_s
