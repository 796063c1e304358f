"""A request's completion, built from what the ledger knows about it. Pure: the caller passes the time."""

from __future__ import annotations

from datetime import datetime

import msgspec

from schemas import AudioRef, Completion, ErrorInfo, ModelInfo, Timings
from streams.worker.ledger import Request

__all__ = ["build_completion"]


def build_completion(req: Request, *, status: str, model_info: ModelInfo, now: datetime,
                     audio: AudioRef | None = None, error: ErrorInfo | None = None) -> tuple[Completion, float | None]:
    """The completion of ``req`` and its end-to-end latency (None when the request's start is unknown).
    ``model`` names the serving model and the voice that spoke the request."""
    start = (req.first.created_at or req.first.enqueued_at) if req.first is not None else req.start
    e2e_s = (now - start).total_seconds() if start is not None else None
    cached = sum(1 for p in req.parts.values() if p.cached)
    seg = req.last or req.first
    model = model_info if seg is None else msgspec.structs.replace(model_info, voice=seg.voice)
    c = Completion(
        request_id=req.request_id, user_id=req.user_id, status=status,  # type: ignore[arg-type]
        audio=audio, segments=req.total, cached_segments=cached, model=model,
        timings=Timings(e2e_ms=round(max(0.0, e2e_s or 0.0) * 1000, 3), synth_ms=round(req.synth_s * 1000, 3),
                        queue_ms=round(req.queue_s * 1000, 3)),
        error=error, completed_at=now, lexicons=req.last.lexicons if req.last is not None else None)
    return c, e2e_s
