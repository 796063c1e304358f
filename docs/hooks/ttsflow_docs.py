"""mkdocs hook: the docs' reference pages and benchmark tables, generated at build time.

A page asks for generated content with a marker line; nothing the markers produce is typed by hand:

* ``<!-- ttsflow:settings -->``: one table per settings section, from ``streams.settings.describe()``.
* ``<!-- ttsflow:wire -->``: the topics from ``schemas/asyncapi.yaml`` and one section per event
  from ``schemas/json/*.schema.json``.
* ``<!-- ttsflow:bench NAME -->``: the recorded runs of benchmark NAME (``docs/benchmarks/data/*.json``,
  written by ``python -m streams.bench.record``), newest first; ``<!-- ttsflow:bench-other -->``: runs
  whose name has no page of its own, as flattened tables.

The hook imports this checkout's ``streams`` (the repository root goes first on ``sys.path``), so the
tables always match the code being documented. The pure renderers are tested in
``tests/unit/test_docs.py``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "benchmarks" / "data"
FORMAT = "ttsflow-bench-run/1"
_MARKER = re.compile(r"^<!-- ttsflow:(settings|wire|bench-other|bench ([a-z0-9_-]+)) -->$", re.M)

Table = tuple[str, list[str], list[list[Any]]]  # caption, header, rows


# --- mkdocs events ------------------------------------------------------------------------------

def on_config(config: Any) -> Any:
    if str(ROOT) not in sys.path[:1]:
        sys.path.insert(0, str(ROOT))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) == "settings":
            return settings_markdown()
        if m.group(1) == "wire":
            return wire_markdown(ROOT / "schemas")
        runs = load_runs(DATA)
        if m.group(1) == "bench-other":
            return other_runs_markdown(runs)
        name = m.group(2)
        if name not in BENCHES:
            raise ValueError(f"{page.file.src_uri}: no benchmark {name!r} (known: {', '.join(BENCHES)})")
        return bench_markdown(name, [r for r in runs if r["name"] == name])
    return _MARKER.sub(sub, markdown)


# --- markdown helpers ---------------------------------------------------------------------------

def cell(value: Any) -> str:
    """A table cell: None as a dash, lists joined, ``|`` and ``<`` escaped, one line."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) if value else "-"
    if isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False)
    text = " ".join(str(value).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def code(value: Any) -> str:
    text = str(value)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table(header: list[str], rows: Iterable[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c if isinstance(c, _Raw) else cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class _Raw(str):
    """Markdown put into a cell as it is (a link, a code span)."""


# --- settings -----------------------------------------------------------------------------------

def _field_docs() -> list[Any]:
    from streams.settings import describe

    return list(describe())


def _bounds(fd: Any) -> str:
    if fd.choices:
        return " \\| ".join(code(c) for c in fd.choices)
    lo, hi = fd.lo, fd.hi
    def num(x: Any) -> str:
        return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)
    if lo is not None and hi is not None:
        return f"{num(lo)} to {num(hi)}"
    if lo is not None:
        return f"&ge; {num(lo)}"
    if hi is not None:
        return f"&le; {num(hi)}"
    return ""


def settings_markdown(fields: list[Any] | None = None) -> str:
    """One ``## section`` and table per settings section, fields in declaration order."""
    fields = _field_docs() if fields is None else fields
    home = str(Path.home())
    sections: dict[str, list[Any]] = {}
    for fd in fields:
        sections.setdefault(fd.section, []).append(fd)
    out = []
    for section, fds in sections.items():
        rows = []
        for fd in fds:
            default = str(fd.default).replace(home, "~", 1) if home != "/" else str(fd.default)
            rows.append([_Raw(code(fd.env)), fd.type, _Raw(code(default) if default != "" else "(empty)"),
                         _Raw(_bounds(fd)), fd.doc])
        out.append(f"## {section}\n\n" + table(["variable", "type", "default", "bounds", "meaning"], rows))
    return "\n\n".join(out) + "\n"


# --- wire contract ------------------------------------------------------------------------------

_SCHEMA_ORDER = ("request", "segment", "rejection", "completion", "chunk", "words", "done", "dead_letter")


def _schema_files(schema_dir: Path) -> list[Path]:
    files = sorted((schema_dir / "json").glob("*.schema.json"))
    def rank(p: Path) -> tuple[int, str]:
        stem = p.name.split(".")[0]
        return (_SCHEMA_ORDER.index(stem) if stem in _SCHEMA_ORDER else len(_SCHEMA_ORDER), p.name)
    return sorted(files, key=rank)


def _anchor(*parts: str) -> str:
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts)


def _type(prop: dict[str, Any], event: str) -> str:
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(event, name)})"
    if "anyOf" in prop:
        return " or ".join(_type(p, event) for p in prop["anyOf"])
    if "enum" in prop:
        return "string (enum)" if all(isinstance(v, str) for v in prop["enum"]) else "enum"
    t = prop.get("type", "any")
    if t == "array" and "prefixItems" in prop:  # a tuple
        return "[" + ", ".join(_type(p, event) for p in prop["prefixItems"]) + "]"
    if t == "array":
        return f"array of {_type(prop.get('items', {}), event)}"
    if t == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"object of {_type(prop['additionalProperties'], event)}"
    return " or ".join(t) if isinstance(t, list) else str(t)


_CONSTRAINTS = (("minimum", "&ge; {}"), ("exclusiveMinimum", "&gt; {}"), ("maximum", "&le; {}"),
                ("exclusiveMaximum", "&lt; {}"), ("minLength", "length &ge; {}"), ("maxLength", "length &le; {}"),
                ("minItems", "items &ge; {}"), ("maxItems", "items &le; {}"), ("format", "format {}"))


def _constraints(prop: dict[str, Any]) -> str:
    parts: list[str] = []
    for alt in [prop, *prop.get("anyOf", [])]:
        for key, fmt in _CONSTRAINTS:
            if key in alt:
                parts.append(fmt.format(alt[key]))
        if "pattern" in alt:
            parts.append("pattern " + code(alt["pattern"]))
        if "enum" in alt:
            parts.append("one of " + ", ".join(code(json.dumps(v)) for v in alt["enum"]))
        if "const" in alt:
            parts.append("always " + code(json.dumps(alt["const"])))
    return "; ".join(parts).replace("|", "\\|")


def _description(prop: dict[str, Any]) -> str:
    texts = [prop.get("description", "")] + [a.get("description", "") for a in prop.get("anyOf", [])]
    return " ".join(t for t in texts if t)


def _rst_to_md(text: str) -> str:
    return text.replace("``", "`")


def schema_markdown(path: Path) -> str:
    """One ``##`` section per event schema: its main type first, then the types it refers to."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    event = path.name.removesuffix(".schema.json")  # e.g. request.v1
    title = event.replace(".", " ")
    defs = doc.get("$defs", {})
    main = doc.get("$ref", "").rsplit("/", 1)[-1] or next(iter(defs), "")
    out = [f"## {title} {{#{_anchor(event)}}}", "", f"Schema file: `schemas/json/{path.name}` (`$id` {code(doc.get('$id', '-'))})."]
    for name in [main, *sorted(n for n in defs if n != main)]:
        d = defs.get(name, doc if name == main else {})
        required = set(d.get("required", []))
        out += ["", f"### {name} {{#{_anchor(event, name)}}}", ""]
        if d.get("description"):
            out += [_rst_to_md(d["description"]), ""]
        rows = []
        for field, prop in d.get("properties", {}).items():
            default = json.dumps(prop["default"]) if "default" in prop else ""
            rows.append([_Raw(code(field)), _Raw(_type(prop, event)), field in required,
                         _Raw(code(default)) if default else "", _Raw(_constraints(prop)),
                         _rst_to_md(_description(prop))])
        out.append(table(["field", "type", "required", "default", "constraints", "description"], rows))
    return "\n".join(out)


def asyncapi_markdown(schema_dir: Path) -> str:
    """The topics: key, messages, partitions, groups, topic config, then each channel's description."""
    import yaml

    doc = yaml.safe_load((schema_dir / "asyncapi.yaml").read_text(encoding="utf-8"))
    messages = doc.get("components", {}).get("messages", {})

    def msg_refs(op: dict[str, Any]) -> list[str]:
        m = op.get("message", {})
        return [x["$ref"].rsplit("/", 1)[-1] for x in (m.get("oneOf") or [m]) if "$ref" in x]

    def link(msg: str) -> str:
        ref = messages.get(msg, {}).get("payload", {}).get("$ref", "")
        event = Path(ref).name.removesuffix(".schema.json")
        return f"[{msg}](#{_anchor(event)})" if event else msg

    rows, details = [], []
    for topic, ch in doc.get("channels", {}).items():
        ops = {k: ch[k] for k in ("publish", "subscribe") if k in ch}
        msgs = list(dict.fromkeys(m for op in ops.values() for m in msg_refs(op)))
        keys = list(dict.fromkeys(
            messages.get(m, {}).get("bindings", {}).get("kafka", {}).get("key", {}).get("description", "")
            for m in msgs))
        groups = [g for op in ops.values()
                  for g in op.get("bindings", {}).get("kafka", {}).get("groupId", {}).get("enum", [])]
        kb = ch.get("bindings", {}).get("kafka", {})
        config = "; ".join(f"{k}={cell(v)}" for k, v in kb.get("topicConfiguration", {}).items())
        rows.append([_Raw(code(topic)), "; ".join(k for k in keys if k), _Raw(", ".join(link(m) for m in msgs)),
                     kb.get("partitions"), groups, config])
        summaries = [f"- **{kind}** ({op.get('operationId', '')}): {op.get('summary', '')}" for kind, op in ops.items()]
        details += [f"### `{topic}` {{#{_anchor('topic', topic)}}}", "", ch.get("description", "").strip(), "",
                    *summaries, ""]
    info = doc.get("info", {})
    out = [f"AsyncAPI {doc.get('asyncapi', '')}, `{info.get('title', '')}` version {info.get('version', '')}, "
           "from `schemas/asyncapi.yaml`.", "", info.get("description", "").strip(), "",
           "## Topics", "",
           table(["topic", "key", "messages", "partitions (local stack)", "consumer groups", "topic config"], rows),
           "", *details]
    examples = [(name, ex) for name, m in messages.items() for ex in m.get("examples", [])[:1]]
    if examples:
        out += ["## Examples", ""]
        for name, ex in examples:
            out += [f"{link(name)}, key `{ex.get('key', '')}`:", "", "```json",
                    json.dumps(ex.get("payload", {}), indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(out)


def wire_markdown(schema_dir: Path) -> str:
    return asyncapi_markdown(schema_dir) + "\n\n" + "\n\n".join(
        schema_markdown(p) for p in _schema_files(schema_dir)) + "\n"


# --- benchmarks ---------------------------------------------------------------------------------

def load_runs(data_dir: Path) -> list[dict[str, Any]]:
    """Every recorded run (``format`` ttsflow-bench-run/1), newest first; a malformed file fails the build."""
    runs = []
    for path in sorted(data_dir.glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        missing = {"format", "name", "recorded_at", "command", "git", "machine", "result"} - set(run)
        if run.get("format") != FORMAT or missing:
            raise ValueError(f"{path}: not a {FORMAT} run file (missing {sorted(missing)})")
        run["_file"] = path.name
        runs.append(run)
    return sorted(runs, key=lambda r: (r["recorded_at"], r["_file"]), reverse=True)


def _get(d: Any, *path: str | int) -> Any:
    for p in path:
        if isinstance(d, dict):
            d = d.get(p)  # type: ignore[call-overload]
        elif isinstance(d, list) and isinstance(p, int) and -len(d) <= p < len(d):
            d = d[p]
        else:
            return None
    return d


def _rows_of(items: Iterable[tuple[str, Any]], cols: list[str]) -> list[list[Any]]:
    return [[label, *(_get(x, *c.split(".")) for c in cols)] for label, x in items]


def _repeated(render: Any) -> Any:
    """A renderer that also reads a ``--repeat N`` result: each figure's median and spread over the
    repeats, then the last repeat's own tables."""
    def wrapped(r: dict[str, Any]) -> list[Table]:
        if "repeats" not in r:
            return render(r) + _breakdowns(r)
        rows = [[k, v.get("n"), v.get("median"), v.get("min"), v.get("max")] for k, v in r["repeats"].items()]
        last = r["runs"][-1] if r.get("runs") else {}
        return [(f"Median and spread over {r.get('repeat')} repeats", ["figure", "n", "median", "min", "max"], rows),
                *[(f"Last repeat: {c}", h, rs) for c, h, rs in render(last) + _breakdowns(last)]]
    return wrapped


def _breakdowns(r: dict[str, Any]) -> list[Table]:
    """Where the time went (``breakdown`` of each open-loop phase): the median requests against the slowest 1%."""
    tables: list[Table] = []
    for name, x in r.get("systems", {}).items():
        phases = [p for p in x.get("rates", []) if p.get("breakdown", {}).get("n")]
        phases += [{**x[k], "label": k} for k in ("at_70", "kill") if isinstance(x.get(k), dict)
                   and x[k].get("breakdown", {}).get("n")]
        for p in phases:
            b = p["breakdown"]
            where = f"{p['fraction']:.0%} load" if "fraction" in p else p.get("label", "")
            parts = list(b["median_ms"])
            tables.append((f"{name} at {where}: where the time went, ms (median requests vs the slowest 1%, "
                           f"n={b['n']})", ["", *parts],
                           [["median", *(b["median_ms"][k] for k in parts)],
                            ["slowest 1%", *(b["slowest_1pct_ms"][k] for k in parts)],
                            ["extra", *(b["excess_ms"][k] for k in parts)]]))
    return tables


def _latency(r: dict[str, Any]) -> list[Table]:
    cols = ["system", "fraction", "offered_rps", "sent_rps", "throughput_rps", "sustained", "p50_ms", "p90_ms",
            "p99_ms", "first_chunk_p50_ms", "first_chunk_p99_ms"]
    how = r.get("capacity", "burst")  # runs before 2026-12-05 took the burst's rate
    what = "the highest rate it sustained on a ramp" if how == "sustained" else "its burst's rate"
    tables: list[Table] = [(f"Completion latency against load (fraction of each system's own capacity: {what})", cols,
                            [[row.get(c) for c in cols] for row in r.get("table", [])])]
    systems = r.get("systems", {})
    tables.append(("Capacity", ["system", "burst req/s", "capacity req/s", "highest sustained of the loads req/s"],
                   [[n, (x.get("burst") or {}).get("throughput_rps"), x.get("capacity_rps"), x.get("sustained_rps")]
                    for n, x in systems.items()]))
    ratios = r.get("ratios", {})
    tables.append(("ttsflow / baseline", ["measure", "ratio"],
                   [[k, v] for k, v in ratios.items() if not isinstance(v, dict)]
                   + [[f"{k} at {f}", v] for k, d in ratios.items() if isinstance(d, dict) for f, v in d.items()]))
    return tables


def _baseline(r: dict[str, Any]) -> list[Table]:
    cols = ["guarantee", "burst.throughput_rps", "max_sustained.requests_per_s", "max_sustained.audio_s_per_s",
            "at_70.p50_ms", "at_70.p99_ms", "kill.lost", "kill.duplicated", "duplicates_without_kills"]
    head = ["system", "guarantee", "burst req/s", "max sustained req/s", "audio s/s", "p50 ms at 70%",
            "p99 ms at 70%", "lost (kill run)", "duplicated (kill run)", "duplicates without kills"]
    return [("ttsflow and the Celery baseline", head, _rows_of(r.get("systems", {}).items(), cols)),
            ("ttsflow / baseline", ["measure", "ratio"], [[k, v] for k, v in r.get("ratios", {}).items()])]


def _engine(r: dict[str, Any]) -> list[Table]:
    cols = ["backend", "precision", "version", "batch", "threads", "provider", "rtf", "audio_s_per_s",
            "batch_p50_ms", "batch_p99_ms", "cold_start_s"]
    tables: list[Table] = [("Real-time factor per configuration", cols,
                            [[row.get(c) for c in cols] for row in r.get("results", [])])]
    if r.get("word_error"):
        tables.append(("Word (kokoro: character) error", ["backend", "precision", "error"],
                       [[b, p, e] for b, d in r["word_error"].items() for p, e in d.items()]))
    if r.get("skipped"):
        tables.append(("Skipped", ["backend", "precision", "reason"],
                       [[s.get("backend"), s.get("precision"), s.get("reason")] for s in r["skipped"]]))
    return tables


def _sweep(r: dict[str, Any]) -> list[Table]:
    cols = ["backend", "precision", "batch", "threads", "audio_s_per_s", "spread", "rtf", "batch_p50_ms", "batch_p99_ms",
            "first_audio_ms", "peak_rss_mib", "error"]
    rows = [[*(row.get(c) for c in cols), "yes" if row.get("pareto") else ""] for row in r.get("results", [])
            if "failed" not in row]
    tables: list[Table] = [("Every point (error: word error for English voices, character error for Mandarin)",
                            [*cols, "on the front"], rows)]
    recs = [[lang, x.get("floor"), " ".join(f"{k}={v}" for k, v in x.get("settings", {}).items()) or x.get("none"),
             x.get("audio_s_per_s"), x.get("error"), x.get("rerun_audio_s_per_s"), x.get("rerun_ratio")]
            for lang, x in r.get("recommendations", {}).items()]
    tables.append(("Recommendation: the fastest point at or under the quality floor, and its rerun",
                   ["language", "floor", "settings", "audio s/s", "error", "rerun audio s/s", "rerun / first"], recs))
    tables.append(("Design", ["backend", "kind", "points", "factors"],
                   [[b, d.get("kind"), d.get("points"), json.dumps(d.get("factors"))] for b, d in r.get("design", {}).items()]))
    failed = [[row.get("backend"), row.get("precision"), row.get("batch"), row.get("threads"), row["failed"]]
              for row in r.get("results", []) if "failed" in row]
    if failed:
        tables.append(("Failed points", ["backend", "precision", "batch", "threads", "why"], failed))
    return tables


def _pipeline(r: dict[str, Any]) -> list[Table]:
    head = ["phase", "requests", "audio s/s", "req/s", "p50 ms", "p99 ms", "max ms"]
    eng, sat, op, cached = (r.get(k) or {} for k in ("engine", "pipeline", "open_loop", "cached"))
    rows = [[f"engine alone ({eng.get('segments')} segments)", None, eng.get("audio_s_per_s"), None, None, None, None],
            ["pipeline, all at once", *(sat.get(k) for k in ("requests", "audio_s_per_s", "requests_per_s", "p50_ms",
                                                             "p99_ms", "max_ms"))],
            [f"open loop at {op.get('load')} of capacity", op.get("requests"), None, op.get("achieved_rps"),
             op.get("p50_ms"), op.get("p99_ms"), op.get("max_ms")],
            ["cached texts", cached.get("requests"), None, cached.get("achieved_rps"), cached.get("p50_ms"),
             cached.get("p99_ms"), cached.get("max_ms")]]
    return [("Pipeline against the bare engine", head, rows),
            ("Ratio", ["engine wall time / pipeline wall time, same texts (1.0: no overhead)"], [[r.get("ratio")]])]


def _bigrequest(r: dict[str, Any]) -> list[Table]:
    big = r.get("big", {})
    lat = [("alone, before", r.get("short_before")), ("during, other partitions", r.get("short_during_other_partitions")),
           ("during, same partition", r.get("short_during_same_partition"))]
    return [("The long request", ["answered", "status", "segments", "audio s", "bytes", "e2e s", "synthesis s"],
             [[big.get(k) for k in ("answered", "status", "segments", "audio_s", "bytes", "e2e_s", "synth_s")]]),
            ("Worker memory (MiB)", ["RSS before", "peak RSS", "VmHWM", "RSS after", "killed at the limit"],
             [[r.get(k) for k in ("worker_rss_before_mib", "worker_peak_rss_mib", "worker_vmhwm_mib",
                                  "worker_rss_after_mib", "worker_killed_at_rss_limit")]]),
            ("Short requests of other users", ["when", "n", "p50 s", "p99 s", "unanswered", "failed"],
             _rows_of(lat, ["n", "p50_s", "p99_s", "unanswered", "failed"]))]


def _streaming_input(r: dict[str, Any]) -> list[Table]:
    loads = [(f"{x.get('fraction', 0):.0%}", x) for x in r.get("loads", [])]
    first = [(f"{lang} {when}", _get(r, f"first_chunk_{lang}", when)) for lang in ("en", "zh")
             for when in ("before", "after") if _get(r, f"first_chunk_{lang}", when) is not None]
    ramp = [(f"{x.get('fraction_of_burst', 0):.0%}", x) for x in r.get("ramp", [])]
    of = (f"word-by-word capacity {r.get('streaming_capacity_sentences_per_s')} sentences/s, from the ramp; "
          if r.get("loads_of") == "streaming_capacity" else "")
    tables: list[Table] = []
    if ramp:
        tables.append((f"The ramp: word-by-word phases at fractions of the burst's {r.get('capacity_sentences_per_s')} "
                       "sentences/s, up to the first not sustained",
                       ["of the burst", "streams/s", "sentences", "first third p50 ms", "last third p50 ms",
                        "p99 ms", "sustained", "loadavg 1m"],
                       _rows_of(ramp, ["streams_per_s", "sentences", "first_third_p50_ms", "last_third_p50_ms",
                                       "sentence_to_audio.p99_ms", "sustained", "loadavg_1m"])))
    return [*tables,
            ("Word by word at 20 words/s: a sentence's last word to its chunk (load: a fraction of the "
             f"{of}burst capacity {r.get('capacity_sentences_per_s')} sentences/s)",
             ["load", "streams", "sentences", "p50 ms", "p99 ms", "tail after final p50 ms", "tail p99 ms",
              "missing", "loadavg 1m"],
             _rows_of(loads, ["streams", "sentences", "sentence_to_audio.p50_ms", "sentence_to_audio.p99_ms",
                              "tail_after_final.p50_ms", "tail_after_final.p99_ms", "missing_chunks", "loadavg_1m"])),
            ("First chunk of a whole streaming request, idle worker (before: first segment a whole sentence)",
             ["language, when", "n", "p50 ms", "p99 ms", "first sentence chars", "segments"],
             _rows_of(first, ["n", "p50_ms", "p99_ms", "first_sentence_chars", "segments"]))]


def _soak(r: dict[str, Any]) -> list[Table]:
    rss = r.get("worker_rss", {})
    return [("Answers", ["requests", "answered", "failed", "duplicated", "worker restarts", "req/s", "wall s"],
             [[r.get(k) for k in ("requests", "answered", "failed", "duplicated", "worker_restarts", "throughput_rps",
                                  "wall_s")]]),
            ("Worker RSS (MiB)", ["after warm-up", "end", "growth %", "limit %", "slope per 1,000 requests", "peak",
                                  "within limit"],
             [[rss.get("rss_after_warmup_mib"), rss.get("rss_end_mib"), rss.get("growth_pct"), rss.get("limit_pct"),
               rss.get("slope_mib_per_1000_requests"), r.get("worker_peak_mib"), rss.get("ok")]])]


def _chaos(r: dict[str, Any]) -> list[Table]:
    k = r.get("kills", {})
    return [("Answers", ["requests", "completed", "lost", "duplicates", "failed", "bad audio", "audio checked",
                         "bad content answered", "bad content wrong"],
             [[r.get(x) for x in ("requests", "completed", "lost", "duplicates", "failed", "bad_audio", "audio_checked")]
              + [f"{r.get('bad_content_answered')}/{r.get('bad_content')}", r.get("bad_content_wrong")]]),
            ("Faults", ["workers", "worker kills", "stage kills", "broker restarts", "crash restarts", "seed",
                        "total s"],
             [[r.get("workers"), k.get("worker"), k.get("stage"), k.get("broker_restarts"), r.get("crash_restarts"),
               r.get("seed"), _get(r, "timings", "total_s")]])]


def _chaos_brokers(r: dict[str, Any]) -> list[Table]:
    stall = r.get("broker_kill_stall", {})
    kills = [[k.get("killed_at_s"), k.get("service"), k.get("kind"), ", ".join(k.get("why", [])),
              ", ".join(str(x) for x in k.get("led_segments_partitions", [])),
              len(k.get("coordinated_transactional_ids", [])), ", ".join(k.get("coordinated_groups", [])),
              k.get("was_controller"), k.get("waited_for_settled_s"), k.get("restart_s"), k.get("down_s"),
              _get(k, "answers", "window_requests"), _get(k, "answers", "p99_s"),
              _get(k, "answers", "max_gap_s"), k.get("error")] for k in r.get("broker_kills", [])]
    return [*_chaos(r),
            ("Broker kills", ["killed at s", "broker", "kind", "why", "segments partitions led",
                              "worker txn ids coordinated", "groups coordinated", "active controller",
                              "waited to settle s", "restart s", "down s", "requests in window",
                              "their p99 s", "longest stall s", "error"], kills),
            ("Stall", ["worst p99 s in a kill window", "worst stall s", "p99 s outside kill windows"],
             [[stall.get("worst_p99_s"), stall.get("worst_gap_s"), stall.get("outside_windows_p99_s")]]),
            ("Stack memory after the run (RSS MiB)", [*r.get("stack_rss_mb", {}), "total"],
             [[*r["stack_rss_mb"].values(), round(sum(v or 0 for v in r["stack_rss_mb"].values()), 1)]]
             if r.get("stack_rss_mb") else [])]


def _demo(r: dict[str, Any]) -> list[Table]:
    return [("Answers", ["records", "ok", "failed", "dead letters", "duplicate completions", "cache-hit requests",
                         "all checks passed"],
             [[r.get(k) for k in ("records_published", "requests_ok", "requests_failed", "dlq_records",
                                  "duplicate_completions", "cache_hit_requests", "ok")]]),
            ("Speed", ["e2e p50 ms", "e2e p99 ms", "audio s", "audio s/s", "req/s", "total s"],
             [[r.get(k) for k in ("e2e_p50_ms", "e2e_p99_ms", "audio_seconds", "audio_s_per_s", "requests_per_s")]
              + [_get(r, "timings", "total_s")]])]


def _gateway(r: dict[str, Any]) -> list[Table]:
    lat = [(k, v) for k, v in r.get("latency", {}).items() if isinstance(v, dict)]
    s = r.get("streaming", {})
    return [("One sentence, gateway (HTTP, wav) against TTSClient", ["path", "n", "p50 ms", "p99 ms"],
             _rows_of(lat, ["n", "p50_ms", "p99_ms"])),
            ("Streaming (pcm, 4 segments)", ["first byte ms", "last byte ms", "unstreamed first byte ms",
                                             "unstreamed last byte ms"],
             [[s.get(k) for k in ("streamed_first_byte_ms", "streamed_last_byte_ms", "unstreamed_first_byte_ms",
                                  "unstreamed_last_byte_ms")]] if s else []),
            ("Load, cached texts, mp3", ["callers", "requests", "errors", "req/s", "p50 ms", "p99 ms"],
             _rows_of(r.get("load", {}).items(), ["requests", "errors", "requests_per_s", "p50_ms", "p99_ms"]))]


def _generic(r: dict[str, Any]) -> list[Table]:
    return [("Result (flattened)", ["key", "value"], flatten(r))]


_SKIP = {"logs", "json", "plot", "out_dir", "files", "events", "curve", "broker", "lost_ids", "duplicate_ids"}


def flatten(d: Any, prefix: str = "", limit: int = 300) -> list[list[Any]]:
    """``[dotted key, scalar]`` rows of a JSON value (paths, logs and long lists left out)."""
    rows: list[list[Any]] = []

    def walk(x: Any, key: str) -> None:
        if len(rows) >= limit:
            return
        if isinstance(x, dict):
            for k, v in x.items():
                if k not in _SKIP:
                    walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(x, list) and any(isinstance(v, dict | list) for v in x):
            for i, v in enumerate(x):
                walk(v, f"{key}[{i}]")
        else:
            rows.append([key, x])

    walk(d, prefix)
    return rows


#: name -> (title, command that prints the JSON, renderer); a name's page is docs/benchmarks/<name>.md
BENCHES: dict[str, tuple[str, str, Callable[[dict[str, Any]], list[Table]]]] = {
    "latency": ("latency against load", "ttsflow bench latency --json", _repeated(_latency)),
    "baseline": ("ttsflow vs the Celery baseline", "ttsflow bench baseline --json", _repeated(_baseline)),
    "engine": ("engine", "ttsflow bench engine --json --wer", _engine),
    "sweep": ("the Pareto sweep", "ttsflow bench sweep --json", _sweep),
    "stage": ("stage", "ttsflow bench stage --json", _generic),
    "pipeline": ("pipeline vs bare engine", "ttsflow bench pipeline --json", _pipeline),
    "bigrequest": ("one request at the text limit", "ttsflow bench bigrequest --chars 99000 --json", _bigrequest),
    "soak": ("worker memory over a long run", "ttsflow bench soak --requests 10000 --json", _soak),
    "gateway": ("gateway", "ttsflow bench gateway --json", _gateway),
    "chaos": ("chaos", "ttsflow chaos --requests 1000 --kill-workers 5 --kill-stage 2 --restart-broker 1 --json",
              _chaos),
    "chaos-3brokers": ("chaos on three brokers", "ttsflow chaos --brokers 3 --requests 1000 --kill-workers 3 "
                       "--kill-stage 1 --kill-brokers 3 --json", _chaos_brokers),
    "demo": ("demo", "ttsflow demo --json", _demo),
    "streaming-input": ("text sent in pieces, word by word; fast first audio", "ttsflow bench streaming-input --json",
                        _streaming_input),
}


def record_command(name: str, command: str) -> str:
    return f"python -m streams.bench.record {name} -- {command}"


def _machine(m: dict[str, Any]) -> str:
    mem = m.get("memory_gib")
    parts = [str(m.get("cpu_model") or "unknown CPU"), f"{m.get('cores')} cores",
             f"{mem} GiB" if mem is not None else "memory unknown", f"GPU {m['gpu']}" if m.get("gpu") else "no GPU"]
    if m.get("loadavg_at_start"):
        parts.append("load " + "/".join(str(x) for x in m["loadavg_at_start"]) + " at start")
    return ", ".join(parts)


def run_header(run: dict[str, Any]) -> str:
    git = run.get("git", {})
    commit = git.get("commit") or "unknown"
    commit_txt = (f"`{commit[:12]}`" + (" (with uncommitted changes)" if git.get("dirty") else "")
                  + (" (the checkout changed while it ran)" if git.get("changed_during_run") else ""))
    cmd = " ".join(run["command"]) if isinstance(run["command"], list) else str(run["command"])
    rows = [["date", run["recorded_at"]], ["machine", _machine(run.get("machine", {}))],
            ["commit", _Raw(commit_txt)], ["command", _Raw(code(cmd))],
            ["exit status", run.get("exit_code")], ["wall time", f"{run.get('wall_s')} s"],
            ["raw data", _Raw(f"[{run['_file']}](data/{run['_file']})")] if "_file" in run else None]
    return table(["run", ""], [r for r in rows if r is not None])


def render_tables(tables: list[Table]) -> str:
    out = []
    for caption, head, rows in tables:
        if rows:
            out += [f"**{caption}**", "", table(head, rows), ""]
    return "\n".join(out)


def bench_markdown(name: str, runs: list[dict[str, Any]]) -> str:
    """A benchmark page's generated part: each recorded run (newest first) or how to record the first."""
    _title, command, render = BENCHES[name]
    how = f"Record a run (from the repository root, on the machine to be measured):\n\n```sh\n{record_command(name, command)}\n```\n"
    if not runs:
        return f"!!! note \"No run recorded yet\"\n    No run of this benchmark is recorded yet, so this page shows no figures.\n\n{how}"
    out = [f"{len(runs)} recorded run{'s' if len(runs) > 1 else ''}, newest first.", ""]
    for run in runs:
        out += [f"## {run['recorded_at'][:16].replace('T', ' ')} UTC", "", run_header(run), "",
                render_tables(render(run["result"]))]
    return "\n".join(out) + "\n" + how


def other_runs_markdown(runs: list[dict[str, Any]]) -> str:
    other = [r for r in runs if r["name"] not in BENCHES]
    if not other:
        return "No run of another benchmark is recorded.\n"
    out = []
    for run in other:
        out += [f"## {run['name']}, {run['recorded_at'][:16].replace('T', ' ')} UTC", "", run_header(run), "",
                render_tables(_generic(run["result"]))]
    return "\n".join(out) + "\n"
