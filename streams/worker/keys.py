"""Content addresses of the worker's objects: a part by its segment hash and the model that spoke it,
a request's audio by its parts, format, model and sample rate. Same inputs, same key, on any
worker: a redone request finds its audio already stored."""

from __future__ import annotations

import hashlib

from schemas import request_hash

__all__ = ["PART_FORMAT", "part_id", "request_digest"]

PART_FORMAT = "wav"  # parts are kept lossless at the engine's rate; requests get their format


def part_id(segment_hash: str, identity: str) -> str:
    """The content address of a part: the stage's segment hash and the model's identity."""
    return hashlib.sha256(f"ttsflow-part-v1\0{segment_hash}\0{identity}".encode()).hexdigest()


def request_digest(parts: list[str], fmt: str, identity: str, sample_rate: int) -> str:
    return hashlib.sha256(
        f"ttsflow-req-v1\0{request_hash(parts, format=fmt)}\0{identity}\0{sample_rate}".encode()).hexdigest()
