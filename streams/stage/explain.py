"""What a voice will say for a text: the stage's own per-record logic, then the voice's front end.

:func:`explain` sends a text through :class:`streams.stage.core.StageCore` (normalization, SSML, the
lexicons named, voice choice, segments) and each segment through an engine's ``prepare_many`` (G2P,
phoneme spans, chunks), and returns, as data, each segment's text and the phonemes of each chunk the
model reads, with the pauses and rates between them. No Kafka, no model call. Used by
``ttsflow phonemize`` and the gateway's ``POST /dev/phonemize``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["explain"]


def explain(core: Any, engine: Any, text: str, *, voice: str | None, user: str = "cli", ssml: bool = False,
            lexicons: list[str] | None = None, speed: float = 1.0,
            voices: dict[str, str] | None = None) -> dict[str, Any]:
    """The stage's segments of ``text`` and each one's phonemes by ``engine``'s front end (as data);
    ``voices``: a per-language voice map, as a request's."""
    from engine.base import Failure, SynthItem
    from schemas import decode_segment, decode_segment_event

    body = {"request_id": "phonemize", "user_id": user, "text": text, "voice": voice, "speed": speed,
            "text_type": "ssml" if ssml else "text", "lexicons": lexicons, "voices": voices}
    out = core.handle(user.encode(), json.dumps({k: v for k, v in body.items() if v is not None}).encode(),
                      partition=0, offset=0, timestamp_ms=None, seen={})
    if out.kind != "segments":
        ev = decode_segment_event(out.records[0].value) if out.records else None
        err = getattr(ev, "error", None)
        return {"error": {"code": getattr(err, "code", out.code), "message": getattr(err, "message", out.kind)}}
    segs = [decode_segment(r.value) for r in out.records]
    rows = []
    backend = getattr(engine, "backend", None)
    for seg in segs:
        (p,) = engine.prepare_many([SynthItem(seg.text, seg.voice, seg.speed,
                                              spans=tuple(seg.spans) if seg.spans else None, lang=seg.lang)])
        row: dict[str, Any] = {"text": seg.text, "voice": seg.voice, **({"lang": seg.lang} if seg.lang else {})}
        if isinstance(p, Failure):
            row["error"] = {"code": p.code, "message": p.message}
        else:
            row["phonemes"] = backend.phonemes(p) if backend is not None else []
            if p.shape is not None:
                shape = p.shape[0]
                row["pauses_ms"], row["rates"] = list(shape.pauses), list(shape.rates)
                if shape.trail_ms is not None:
                    row["trailing_pause_ms"] = shape.trail_ms
        rows.append(row)
    return {"segments": rows, "lexicons": segs[-1].lexicons or []}
