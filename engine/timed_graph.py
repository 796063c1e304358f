"""A voice's graph with its duration tensor as an output, made once per model file of the store.

The duration-based voices (hibari, kokoro, piper) time their words with the frames their duration
predictor gives each phoneme (:mod:`engine.timing`); their shipped graphs do not output that tensor,
so a backend adds it as an output before it makes its session (graph surgery with the ``onnx``
package). Importing ``onnx`` alone took 0.8 s of the 2.5 s between a worker's SIGKILL and its next
answer on the 2-core machine (most of it ``ml_dtypes``), at every start.

Invariants:

* A model of the versioned store (a directory holding its ``manifest.json``) keeps the result beside
  its ONNX file: ``.timed.onnx`` (the graph with the output added) and ``.timed.json`` (the source's
  name, size and mtime, the tensor's name, the precision), both written atomically, the facts last.
  A later load whose source still has that name, size and mtime reads them without importing
  ``onnx``; any other (a replaced file, a cache from another format) does the surgery again and
  rewrites them. The store checks the source's SHA-256 against its manifest before a load
  (:meth:`engine.store.ModelStore.verify`), so the cache follows the file it was made from.
* Anywhere else (a model file given by path, a wheel's file, a store that cannot be written), the
  surgery runs at every load, as before; a failure to write the cache is logged, never raised.
* The graph loaded is the same either way: the cached bytes are the surgery's serialized graph.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["TimedGraph", "timed_graph"]

_log = logging.getLogger("ttsflow.engine")

GRAPH_NAME = ".timed.onnx"
FACTS_NAME = ".timed.json"
_FORMAT = 1
_MANIFEST = "manifest.json"  # engine.store.MANIFEST_NAME (not imported: the store imports the backends' registry)


@dataclasses.dataclass(frozen=True)
class TimedGraph:
    """What a backend makes its session from: a path or serialized bytes, the duration output's name
    (None: the graph predicts none), and the graph's precision."""

    model: Path | bytes
    durations: str | None
    precision: str


def _key(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"format": _FORMAT, "source": path.name, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cached(path: Path, precision: str | None) -> TimedGraph | None:
    try:
        facts = json.loads((path.parent / FACTS_NAME).read_text(encoding="utf-8"))
        if facts.get("key") != _key(path):
            return None
        durations = facts["durations"]
        graph = path.parent / GRAPH_NAME
        if durations is not None and not graph.is_file():
            return None
        return TimedGraph(graph if durations is not None else path, durations, precision or str(facts["precision"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_atomic(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f"{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _keep(path: Path, data: bytes, durations: str | None, precision: str) -> None:
    """Write the cache beside a store version's ONNX file (best effort)."""
    try:
        if durations is not None:
            _write_atomic(path.parent / GRAPH_NAME, data)
        facts = {"key": _key(path), "durations": durations, "precision": precision}
        _write_atomic(path.parent / FACTS_NAME, json.dumps(facts, sort_keys=True).encode())
    except OSError as e:
        _log.warning("event=timed_graph_not_kept path=%s error=%s", path, e)


def _expose_durations(model: Any) -> str | None:
    from engine.convert.files import expose_durations

    return expose_durations(model)


def timed_graph(path: Path, precision: str | None = None,
                expose: Callable[[Any], str | None] = _expose_durations) -> TimedGraph:
    """``path``'s graph with its duration tensor added as an output by ``expose`` (which edits an
    ``onnx.ModelProto`` in place and returns the tensor's name, or None; it may raise), from the
    store's cache where there is one. ``precision`` None: detected from the graph."""
    path = Path(path)
    in_store = (path.parent / _MANIFEST).is_file()
    if in_store and (hit := _cached(path, precision)) is not None:
        return hit
    import onnx

    from engine.providers import detect_precision

    graph = onnx.load(str(path))
    precision = precision or detect_precision(graph)
    durations = expose(graph)
    data = graph.SerializeToString()
    del graph
    if in_store:
        _keep(path, data, durations, precision)
    return TimedGraph(data, durations, precision)
