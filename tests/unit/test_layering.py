"""The layers of STYLE.md, checked on the source.

* engine/ is pure compute: it must not pull in Kafka, S3, Redis or Prometheus.
* The product rooms of streams/ (stage, worker, kafka, client, gateway) never import the tools
  (streams.bench, streams.devstack, streams.cli).
* streams/kafka is the bottom room of streams/: it imports no other room (the others build on it).
* Only streams/kafka, stage, worker, client and ops talk to confluent_kafka or faust, and of the
  tools only bench/plain.py (the benchmarks' plain publisher and topic reader, which no product
  room may use); the gateway reaches Kafka only through streams.client (its one producer and reader).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import engine

FORBIDDEN = ("confluent_kafka", "aiokafka", "faust", "boto3", "botocore", "redis", "prometheus_client")
ENGINE_DIR = Path(engine.__file__).parent


def _engine_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages([str(ENGINE_DIR)], prefix="engine."))


def test_importing_every_engine_module_loads_no_service_client() -> None:
    modules = _engine_modules()
    assert {"engine.hibari", "engine.piper", "engine.engine", "engine.audio"} <= set(modules)
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ImportError as e:\n"  # an optional extra missing is fine; a forbidden import is not
        "        print('skip', m, e, file=sys.stderr)\n"
        f"print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ENGINE_DIR.parent, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at the top or inside a function, ``importlib`` included."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            names += [str(node.args[0].value)]
    return names


def test_no_engine_source_imports_a_service_client() -> None:
    offenders = []
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        names = _imports(path)
        offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
        offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("streams", "storage")]
    assert offenders == []


STREAMS_DIR = ENGINE_DIR.parent / "streams"
PRODUCT_ROOMS = ("stage", "worker", "kafka", "client", "gateway")
TOOL_ROOMS = ("bench", "devstack", "cli")
KAFKA_ROOMS = ("kafka", "stage", "worker", "client", "ops")
KAFKA_LIBS = ("confluent_kafka", "faust", "aiokafka")
KAFKA_TOOL_FILES = ("bench/plain.py",)  # the tools' one Kafka client module


def _room_files(room: str) -> list[Path]:
    return sorted((STREAMS_DIR / room).rglob("*.py"))


def test_every_room_exists_and_streams_has_no_loose_modules_beyond_the_shared_ones() -> None:
    for room in (*PRODUCT_ROOMS, *TOOL_ROOMS, "ops"):
        assert (STREAMS_DIR / room / "__init__.py").is_file(), room
    loose = sorted(p.name for p in STREAMS_DIR.glob("*.py"))
    assert loose == ["__init__.py", "errors.py", "identity.py", "metrics_http.py", "settings.py"]


@pytest.mark.parametrize("room", PRODUCT_ROOMS)
def test_product_rooms_never_import_the_tools(room: str) -> None:
    tools = tuple(f"streams.{t}" for t in TOOL_ROOMS)
    offenders = [f"{p.relative_to(STREAMS_DIR)}: {n}" for p in _room_files(room) for n in _imports(p)
                 if any(n == t or n.startswith(t + ".") for t in tools)]
    assert offenders == []


def test_the_kafka_room_imports_no_room_above_it() -> None:
    above = ("stage", "worker", "gateway", "client", "bench", "devstack", "cli", "ops")
    offenders = [f"{p.relative_to(STREAMS_DIR)}: {n}" for p in _room_files("kafka") for n in _imports(p)
                 if any(n == f"streams.{r}" or n.startswith(f"streams.{r}.") for r in above)]
    assert offenders == []


def test_only_the_kafka_rooms_import_confluent_kafka_or_faust() -> None:
    offenders = []
    for path in sorted(STREAMS_DIR.rglob("*.py")):
        rel = path.relative_to(STREAMS_DIR)
        if rel.parts[0] in KAFKA_ROOMS or rel.as_posix() in KAFKA_TOOL_FILES:
            continue
        offenders += [f"{rel}: {n}" for n in _imports(path) if n.split(".")[0] in KAFKA_LIBS]
    assert offenders == []


def test_the_gateway_reaches_kafka_only_through_the_client() -> None:
    names = [n for p in _room_files("gateway") for n in _imports(p)]
    assert "streams.client" in {n.split(".client")[0] + ".client" for n in names if n.startswith("streams.client")}
    assert [n for n in names if n.split(".")[0] in KAFKA_LIBS or n.startswith("streams.kafka")] == []


def test_the_source_checks_would_catch_an_offender(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from streams.devstack.stack import stack_up\n    import faust\n")
    assert {"streams.devstack.stack", "faust"} <= set(_imports(bad))


def test_the_check_would_catch_an_offender(tmp_path: Path) -> None:
    """The subprocess check really sees a forbidden module when one is imported."""
    code = f"import json, sys, redis; print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "redis" in json.loads(out.stdout)
