"""engine/ is pure compute: it must not pull in Kafka, S3, Redis or Prometheus."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

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


def test_no_engine_source_imports_a_service_client() -> None:
    offenders = []
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                names = [str(node.args[0].value)]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("streams", "storage")]
    assert offenders == []


def test_the_check_would_catch_an_offender(tmp_path: Path) -> None:
    """The subprocess check really sees a forbidden module when one is imported."""
    code = f"import json, sys, redis; print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "redis" in json.loads(out.stdout)
