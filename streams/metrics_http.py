"""What every ttsflow process serves besides its metrics: ``/healthz`` and ``/readyz``.

:class:`ProbedMetrics` is the shared half of ``StageMetrics`` and ``WorkerMetrics``: a
Prometheus registry served over HTTP with a liveness probe (the process's loop went round
within ``stall_s``: ``heartbeat()``) and a readiness probe (``ready(True)`` and alive).
``/readyz`` also names the process (``identify``: its group, transactional id or member
id), one ``key=value`` line each after ``ready`` / ``not ready``.
Port 0 collects but serves nothing.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["ProbedMetrics"]

_log = logging.getLogger("ttsflow.metrics")
_PORT_TRIES = 16


class ProbedMetrics:
    """Subclasses create their metrics on ``self.registry``, then call ``_start``."""

    registry: CollectorRegistry
    _ready: Gauge

    def _start(self, port: int, host: str, stall_s: float) -> None:
        self.stall_s = stall_s
        self._last_beat = time.monotonic()
        self._is_ready = False
        self._identity: dict[str, str] = {}
        self._server: ThreadingHTTPServer | None = None
        if not port:
            return
        # Several ttsflow processes on one machine (a stage and two workers started by hand)
        # share the default port: the next free one is taken and logged rather than crashing
        # the process. In Kubernetes each pod has its own, so the configured port is used.
        for candidate in range(port, min(port + _PORT_TRIES, 65536)):
            try:
                self._serve(host, candidate)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                continue
            if candidate != port:
                _log.warning("event=metrics_port_in_use configured=%d serving=%d", port, candidate)
            else:
                _log.info("event=metrics_serving port=%d", candidate)
            return
        raise OSError(errno.EADDRINUSE, f"metrics ports {port}-{port + _PORT_TRIES - 1} are all in use")

    def heartbeat(self) -> None:
        self._last_beat = time.monotonic()

    def identify(self, **names: str) -> None:
        """What this process answers to (``transactional_id=...``, ``group=...``), for ``/readyz``."""
        self._identity = {k: str(v) for k, v in names.items()}

    def readiness(self, ok: bool) -> str:
        """The first line of ``/readyz``."""
        return "ready" if ok else "not ready"

    def readyz_body(self, ok: bool) -> bytes:
        head = self.readiness(ok)
        return "".join([head + "\n", *(f"{k}={v}\n" for k, v in self._identity.items())]).encode()

    def ready(self, ok: bool) -> None:
        self._is_ready = ok
        self._ready.set(1 if ok else 0)

    # -- reading ---------------------------------------------------------------------
    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 if absent)."""
        v = self.registry.get_sample_value(name, labels or {})
        return float(v) if v is not None else 0.0

    @property
    def alive(self) -> bool:
        return time.monotonic() - self._last_beat < self.stall_s

    @property
    def is_ready(self) -> bool:
        return self._is_ready and self.alive

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # -- HTTP ------------------------------------------------------------------------
    def _serve(self, host: str, port: int) -> None:
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, metrics.exposition(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = metrics.alive
                    self._send(200 if ok else 503, b"ok\n" if ok else b"stalled\n")
                elif path == "/readyz":
                    ok = metrics.is_ready
                    self._send(200 if ok else 503, metrics.readyz_body(ok))
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True).start()

    @property
    def port(self) -> int | None:
        return self._server.server_address[1] if self._server else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
