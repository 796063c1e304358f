"""The README is a front door, the docs site builds in strict mode, and its generated pages come from the code.

``mkdocs build --strict`` fails on a broken link or anchor, a missing page and a page left out of
the nav (``validation`` in mkdocs.yml); this test runs it, so ``make test`` (and CI) builds the site.
The benchmark renderer and the recorder are tested on a fixture run (``tests/fixtures``), never on
real measurements.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FIXTURE = ROOT / "tests" / "fixtures" / "bench-run-latency.json"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ttsflow_docs_hook", DOCS / "hooks" / "ttsflow_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the README ---------------------------------------------------------------------------------

def test_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250, "README.md grew past 250 lines: move the detail into docs/"
    for must in ("make demo", "make test", "murmur2_random", "read_committed", "tts.requests", "tts.completed",
                 "/v1/audio/speech"):
        assert must in text, must
    # the block tests/integration/test_gateway_readme.py runs as written
    m = re.search(r"<!-- gateway-curl-examples -->\n```sh\n(.*?)```", text, re.S)
    assert m and m.group(1).count("curl ") == 4


def test_readme_links_point_at_docs_pages_that_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links, "the README should link into the docs"
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert missing == []


# --- the site -----------------------------------------------------------------------------------

def _nav_paths(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_paths(item)]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in _nav_paths(v)]
    return []


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_paths(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)
    assert sorted(set(nav)) == pages
    assert len(nav) == len(set(nav)), "a page is listed twice"
    assert config["strict"] is True and config["hooks"] == ["docs/hooks/ttsflow_docs.py"]


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs and mkdocs-material are in the dev extra")
    pytest.importorskip("material", reason="mkdocs-material is in the dev extra")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "WARNING" not in out, out
    config = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "TTS_BOOTSTRAP_SERVERS" in config and "TTS_GATEWAY_LOOKUP_S" in config
    wire = (tmp_path / "site" / "reference" / "wire" / "index.html").read_text(encoding="utf-8")
    assert "tts.worker.done" in wire and "sample_rate" in wire


# --- generated reference pages ------------------------------------------------------------------

def test_the_configuration_page_lists_every_setting() -> None:
    from streams.settings import describe

    md = _hook().settings_markdown()
    fields = list(describe())
    for fd in fields:
        assert f"`{fd.env}`" in md, fd.env
    for section in {fd.section for fd in fields}:  # one table per section of the settings
        assert f"## {section}" in md, section
    assert md.startswith("## ")


def test_the_wire_page_covers_every_schema_and_topic() -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    md = _hook().wire_markdown(ROOT / "schemas")
    for path in (ROOT / "schemas" / "json").glob("*.schema.json"):
        assert f"`schemas/json/{path.name}`" in md, path.name
        for name, d in json.loads(path.read_text())["$defs"].items():
            assert f"### {name} " in md
            for field in d.get("properties", {}):
                assert f"`{field}`" in md
    for topic in yaml.safe_load((ROOT / "schemas" / "asyncapi.yaml").read_text())["channels"]:
        assert f"| `{topic}` |" in md, topic


# --- benchmark tables and the recorder ----------------------------------------------------------

def test_a_recorded_run_renders_as_a_dated_table(tmp_path: Path) -> None:
    hook = _hook()
    shutil.copy(FIXTURE, tmp_path / "latency-20260131-1234.json")
    runs = hook.load_runs(tmp_path)
    assert [r["name"] for r in runs] == ["latency"]
    md = hook.bench_markdown("latency", runs)
    assert "2026-01-31 12:34 UTC" in md
    assert "Fixture CPU 9000, 2 cores, 7.7 GiB, no GPU" in md
    assert "`0123456789ab`" in md and "`ttsflow bench latency --quick --json`" in md
    assert "| ttsflow | 0.5 | 5.0 | 4.98 | 4.95 | yes | 111.1 | 222.2 | 333.3 | 77.7 | 88.8 |" in md
    assert "| baseline | 0.5 | 4.0 | 3.99 | 3.97 | yes | 123.4 | 234.5 | 345.6 | - | - |" in md
    assert "[latency-20260131-1234.json](data/latency-20260131-1234.json)" in md
    assert "No run recorded yet" not in md


def test_a_benchmark_without_runs_says_so_and_how_to_record_one() -> None:
    hook = _hook()
    for name, (_title, command, _render) in hook.BENCHES.items():
        md = hook.bench_markdown(name, [])
        assert "No run recorded yet" in md
        assert f"python -m streams.bench.record {name} -- {command}" in md
    assert "No run of another benchmark" in hook.other_runs_markdown([])


def test_unknown_benchmarks_and_odd_shapes_fall_back_to_flattened_rows(tmp_path: Path) -> None:
    hook = _hook()
    run = json.loads(FIXTURE.read_text())
    run.update(name="mystery", result={"a": {"b": 1, "c": [1, 2]}, "rows": [{"x": "p|q"}], "logs": "/tmp/x"})
    (tmp_path / "mystery-20260131-1234.json").write_text(json.dumps(run))
    md = hook.other_runs_markdown(hook.load_runs(tmp_path))
    assert "| a.b | 1 |" in md and "| a.c | 1, 2 |" in md and "| rows[0].x | p\\|q |" in md
    assert "/tmp/x" not in md
    # every known renderer survives an empty result (a benchmark that failed early)
    for name in hook.BENCHES:
        hook.bench_markdown(name, [{**run, "name": name, "result": {}, "_file": "x.json"}])


def test_a_file_that_is_not_a_run_fails_the_build(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"name": "latency"}))
    with pytest.raises(ValueError, match="not a ttsflow-bench-run/1 run file"):
        _hook().load_runs(tmp_path)


def test_the_recorder_wraps_a_commands_json_in_the_envelope(tmp_path: Path) -> None:
    script = "import json; print('warming up'); print(json.dumps({'p50_ms': 12.5, 'ok': True}))"
    run = subprocess.run([sys.executable, "-m", "streams.bench.record", "tiny", "--out", str(tmp_path), "--",
                          sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    [path] = tmp_path.glob("tiny-*.json")
    assert re.fullmatch(r"tiny-\d{8}-\d{4}\.json", path.name)
    doc = json.loads(path.read_text())
    assert doc["format"] == "ttsflow-bench-run/1" and doc["name"] == "tiny" and doc["exit_code"] == 0
    assert doc["result"] == {"p50_ms": 12.5, "ok": True}
    assert doc["command"] == [sys.executable, "-c", script]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["recorded_at"])
    assert set(doc["machine"]) >= {"cpu_model", "cores", "memory_gib", "gpu"} and doc["machine"]["cores"] >= 1
    assert set(doc["git"]) == {"commit", "dirty", "changed_during_run"}
    assert _hook().load_runs(tmp_path)[0]["name"] == "tiny"


def test_the_recorder_keeps_the_checkout_as_the_run_started_and_says_when_it_changed_meanwhile(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "code.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "code.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    docs: list[dict[str, object]] = []
    for name, script in (("quiet", "print('{}')"),
                         ("edited", "open('code.py', 'w').write('x = 2'); print('{}')")):  # an edit while it runs
        run = subprocess.run([sys.executable, "-m", "streams.bench.record", name, "--out", str(tmp_path), "--",
                              sys.executable, "-c", script], cwd=repo, env=env, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        [path] = tmp_path.glob(f"{name}-*.json")
        docs.append(json.loads(path.read_text())["git"])
    assert docs == [{"commit": head, "dirty": False, "changed_during_run": False},
                    {"commit": head, "dirty": False, "changed_during_run": True}]


def test_the_recorder_writes_nothing_without_json(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "streams.bench.record", "tiny", "--out", str(tmp_path), "--",
                          sys.executable, "-c", "print('no json here')"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "nothing recorded" in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_recorder_keeps_a_failing_runs_json_and_its_status(tmp_path: Path) -> None:
    script = "import json, sys; print(json.dumps({'lost': 1})); sys.exit(1)"
    run = subprocess.run([sys.executable, "-m", "streams.bench.record", "chaos", "--out", str(tmp_path), "--",
                          sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    [path] = tmp_path.glob("chaos-*.json")
    assert json.loads(path.read_text())["exit_code"] == 1
