"""Reading a running process's ``/metrics`` in integration tests."""

from __future__ import annotations

import urllib.request


def scrape(port: int, *, timeout: float = 2.0) -> str:
    """The text exposition served on ``127.0.0.1:port/metrics`` (raises ``OSError`` when it does not answer)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return str(r.read().decode())


def metric_sum(port: int, name: str, *, timeout: float = 2.0, unreachable: float | None = 0.0) -> float:
    """The sum over every sample whose line starts with ``name`` (all label sets). A process that
    does not answer counts ``unreachable`` (None: the ``OSError`` is raised)."""
    try:
        body = scrape(port, timeout=timeout)
    except OSError:
        if unreachable is None:
            raise
        return unreachable
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith(name) and not line.startswith("#"))
