"""The gateway's Prometheus metrics, on its own registry, served at ``/metrics`` of its HTTP port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE", "GatewayMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter("ttsflow_gateway_requests_total", "Speech requests answered, by HTTP status and format.",
                                 ["status", "format"], registry=self.registry)
        self._latency = Histogram("ttsflow_gateway_request_duration_seconds",
                                  "Time from a speech request's arrival to its last byte, by format and outcome.",
                                  ["format", "outcome"], buckets=_BUCKETS, registry=self.registry)
        self._first_byte = Histogram("ttsflow_gateway_first_byte_seconds",
                                     "Time from a speech request's arrival to its first audio byte.",
                                     ["format"], buckets=_BUCKETS, registry=self.registry)
        self._inflight = Gauge("ttsflow_gateway_in_flight_requests", "Speech requests being answered now.",
                               registry=self.registry)
        self._retries = Counter("ttsflow_gateway_idempotent_hits_total",
                                "Requests with an Idempotency-Key answered from a completion found (memory or topic).",
                                ["where"], registry=self.registry)

    def started(self) -> None:
        self._inflight.inc()

    def finished(self, status: int, fmt: str, seconds: float) -> None:
        self._inflight.dec()
        self._requests.labels(str(status), fmt).inc()
        self._latency.labels(fmt, "ok" if status < 400 else "error").observe(seconds)

    def first_byte(self, fmt: str, seconds: float) -> None:
        self._first_byte.labels(fmt).observe(seconds)

    def idempotent_hit(self, where: str) -> None:
        self._retries.labels(where).inc()

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
