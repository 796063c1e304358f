"""The stage's Prometheus metrics and probe endpoints; the only stage module that imports
prometheus_client.

The stage calls small hooks (``consumed``, ``segments``, ``failed``, ``dead_letter``,
``duplicate``, ``processed``, ``foreign_dropped``) and never touches a metric object. The metrics live in
their own registry and are served with ``/healthz`` (the event loop went round within
``stall_s``) and ``/readyz`` (the faust app has partitions assigned or is waiting for
them after start) on the port given (``settings.metrics_port`` unless ``ttsflow stage
--metrics-port`` overrides it). ``StageMetrics(0)`` collects but serves nothing.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.metrics_http import ProbedMetrics

__all__ = ["StageMetrics"]


class StageMetrics(ProbedMetrics):
    def __init__(self, port: int = 0, *, stall_s: float = 60.0, host: str = "0.0.0.0") -> None:
        r = self.registry = CollectorRegistry()
        self._consumed = Counter("ttsflow_stage_requests_consumed_total", "Request records consumed.", registry=r)
        self._accepted = Counter("ttsflow_stage_requests_accepted_total", "Requests split into segments.",
                                 registry=r)
        self._segments = Counter("ttsflow_stage_segments_produced_total", "Segment events produced.", registry=r)
        self._failed = Counter("ttsflow_stage_requests_failed_total",
                               "Requests answered with a failed completion, by error code.", ["code"], registry=r)
        self._dlq = Counter("ttsflow_stage_dead_letters_total", "Records sent to the dead-letter topic, by reason.",
                            ["reason"], registry=r)
        self._dups = Counter("ttsflow_stage_duplicates_total", "Requests dropped as repeated request ids.",
                             registry=r)
        self._foreign = Counter("ttsflow_stage_foreign_units_dropped_total",
                                "Spoken units (words; characters of syllabic scripts; emoji) cut from accepted "
                                "requests because their voice cannot speak that script, by script.",
                                ["script"], registry=r)
        self._seconds = Histogram("ttsflow_stage_processing_seconds",
                                  "Time to validate, normalize, split and hash one request.",
                                  buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5, 1),
                                  registry=r)
        self._lag = Histogram("ttsflow_stage_request_age_seconds",
                              "Request record timestamp to the moment its segments were handed to the producer.",
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 30),
                              registry=r)
        self._pieces = Counter("ttsflow_stage_pieces_total", "Records of requests sent in pieces, by outcome: piece "
                               "(held or cut), closed (final), failed, repeated (a piece seen before, or after the "
                               "final), tick (the stage's timer records).", ["outcome"], registry=r)
        self._open = Gauge("ttsflow_stage_open_requests", "Requests sent in pieces this stage holds open.", registry=r)
        self._ready = Gauge("ttsflow_stage_ready", "1 when the stage's faust app is running.", registry=r)
        self._start(port, host, stall_s)

    # -- hooks the stage calls -------------------------------------------------------
    def consumed(self) -> None:
        self._consumed.inc()

    def segments(self, n: int) -> None:
        self._accepted.inc()
        self._segments.inc(n)

    def piece(self, outcome: str, segments: int = 0) -> None:
        self._pieces.labels(outcome).inc()
        self._segments.inc(segments)

    def open_requests(self, n: int) -> None:
        self._open.set(n)

    def failed(self, code: str) -> None:
        self._failed.labels(code).inc()

    def dead_letter(self, reason: str) -> None:
        self._dlq.labels(reason).inc()

    def foreign_dropped(self, script: str, units: int) -> None:
        self._foreign.labels(script).inc(units)

    def duplicate(self) -> None:
        self._dups.inc()

    def processed(self, seconds: float) -> None:
        self._seconds.observe(seconds)

    def request_age(self, seconds: float) -> None:
        if seconds >= 0:
            self._lag.observe(seconds)
