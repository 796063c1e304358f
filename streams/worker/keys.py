"""Content addresses of the worker's objects: a part by its segment hash and the model that spoke it,
a request's audio by its parts, format, model and sample rate. Same inputs, same key, on any
worker: a redone request finds its audio already stored.

A part made for a segment that asked for timestamps carries its words inside its object
(:func:`streams.worker.timings.part_object`), so its bytes differ from the same audio made
without them: it has an address of its own (``words=True``). One key never holds two
different contents, so a chunk's sha256 stays true whoever makes the part next."""

from __future__ import annotations

import hashlib

from schemas import request_hash

__all__ = ["PART_FORMAT", "part_id", "request_digest"]

PART_FORMAT = "wav"  # parts are kept lossless at the engine's rate; requests get their format


def part_id(segment_hash: str, identity: str, words: bool = False) -> str:
    """The content address of a part: the stage's segment hash and the model's identity (and whether
    the object carries the part's words)."""
    tag = "ttsflow-part-words-v2" if words else "ttsflow-part-v1"
    return hashlib.sha256(f"{tag}\0{segment_hash}\0{identity}".encode()).hexdigest()


def request_digest(parts: list[str], fmt: str, identity: str, sample_rate: int) -> str:
    return hashlib.sha256(
        f"ttsflow-req-v1\0{request_hash(parts, format=fmt)}\0{identity}\0{sample_rate}".encode()).hexdigest()
