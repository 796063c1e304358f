"""A request's completion, built from what the ledger knows about it. Pure: the caller passes the time."""

from __future__ import annotations

from datetime import datetime

import msgspec

from schemas import AudioRef, Completion, ErrorInfo, ModelInfo, Timings
from streams.worker.ledger import Request
from streams.worker.timings import RequestTimings

__all__ = ["build_completion"]


def build_completion(req: Request, *, status: str, model_info: ModelInfo, now: datetime,
                     audio: AudioRef | None = None, error: ErrorInfo | None = None,
                     words: RequestTimings | None = None) -> tuple[Completion, float | None]:
    """The completion of ``req`` and its end-to-end latency (None when the request's start is unknown).
    ``model`` names the serving model and the voice that spoke the request; ``words``: its word
    timings and captions (or why there are none), when it asked for timestamps, and its SSML marks."""
    start = (req.first.created_at or req.first.enqueued_at) if req.first is not None else req.start
    e2e_s = (now - start).total_seconds() if start is not None else None
    cached = sum(1 for p in req.parts.values() if p.cached)
    seg = req.last or req.first
    model = model_info if seg is None else msgspec.structs.replace(model_info, voice=seg.voice)
    c = Completion(
        request_id=req.request_id, user_id=req.user_id, status=status,  # type: ignore[arg-type]
        audio=audio, segments=req.total, cached_segments=cached, model=model,
        timings=Timings(e2e_ms=round(max(0.0, e2e_s or 0.0) * 1000, 3), synth_ms=round(req.synth_s * 1000, 3),
                        queue_ms=round(req.queue_s * 1000, 3), **_path(req, now.timestamp())),
        error=error, completed_at=now, lexicons=req.last.lexicons if req.last is not None else None)
    if words is not None and status == "ok":
        c = msgspec.structs.replace(c, words=words.words, captions=words.captions, words_count=words.count,
                                    words_reason=words.reason, marks=words.marks or None)
    return c, e2e_s


def _path(req: Request, now: float) -> dict[str, float]:
    """Where the time of ``req`` went along its last part made (see :class:`~schemas.Timings`), in ms;
    empty for a request answered without parts (failed early)."""
    s = req.last_made
    if s is None or not s.read_at:
        return {}
    enq = (req.first.enqueued_at or req.first.created_at) if req.first is not None else None

    def ms(a: float, b: float) -> float:
        return round(max(0.0, b - a) * 1000, 3)

    out = {"read_ms": ms(s.written_at, s.read_at), "join_ms": ms(req.made_at, now)}
    if enq is not None:
        out["stage_ms"] = ms(enq.timestamp(), s.written_at)
    if s.started_at:  # made here (a cached part was never synthesized)
        out.update(wait_ms=ms(s.read_at, s.started_at), model_ms=round(s.model_s * 1000, 3),
                   upload_ms=ms(s.started_at + s.model_s, s.uploaded_at), collect_ms=ms(s.uploaded_at, req.made_at))
    else:
        out["collect_ms"] = ms(s.read_at, req.made_at)
    return out
