"""SSML mark times through the worker: a part's marks beside its audio, a request's placed in its joined audio.

Invariants (docs/using/pronunciation.md):

* **A part keeps the marks it was made with.** A part whose segment holds SSML marks is made only
  once its marks object (:class:`PartMarks`: the part's length in samples and each mark's time in
  the part, as the engine timed it) is in S3 beside its audio (``part/<id>.marks.json``). The
  object is written even when the voice times no marks (piper, chattts: an empty list), so a cache
  hit of such a part answers like the miss that made it. A segment's hash covers its marks (they
  are spans), so every segment that maps to a part with marks has them.
* **Placed like words.** A mark's time in the request is its part's start in the joined audio
  (the earlier parts and the 150 ms pause between each two, :func:`engine.audio.part_starts`)
  plus its time in the part; on a chunk it keeps its time in the chunk's own audio (the chunk's
  ``offset_s`` says where that starts), as a chunk's words do.
* **Inline.** Marks are few (the stage refuses a document of more than 1,000, names over 256
  characters), so they travel in the completion and the chunk themselves, not in an object.
* **Read back after a restart.** The last segment lists the segments that hold marks
  (``Segment.marked``); a worker that did not make one of them reads its marks object from S3,
  and the length of each earlier part from its memory or the part's object (HEAD).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from engine.audio import part_starts
from schemas import MarkTime, Segment

__all__ = ["PartMarks", "decode_part_marks", "has_marks", "part_marks", "part_marks_key", "request_marks"]

GAP_MS = 150.0  # the pause the join puts between two parts (as streams.worker.timings)


class PartMarks(msgspec.Struct, frozen=True, kw_only=True):
    """A part's marks object in S3: its length and each mark's time in it (seconds)."""

    samples: int
    sample_rate: int
    marks: list[MarkTime]


_decoder = msgspec.json.Decoder(PartMarks)


def has_marks(seg: Segment) -> bool:
    """Whether ``seg``'s spans hold an SSML mark."""
    return bool(seg.spans) and any(s.mark is not None for s in seg.spans or ())


def part_marks_key(audio_key: str) -> str:
    """The marks object's key beside a part's audio key (``.../<id>.wav`` -> ``.../<id>.marks.json``)."""
    stem, dot, _ext = audio_key.rpartition(".")
    return (stem if dot else audio_key) + ".marks.json"


def part_marks(marks: Sequence[tuple[str, float]] | None, samples: int, sample_rate: int) -> PartMarks:
    """The marks object of a part of ``samples`` samples from the engine's (name, seconds) pairs."""
    end = samples / sample_rate
    return PartMarks(samples=int(samples), sample_rate=int(sample_rate),
                     marks=[MarkTime(name=n, time_s=round(min(max(0.0, t), end), 4)) for n, t in marks or ()])


def decode_part_marks(data: bytes) -> PartMarks | None:
    """A part's marks object, or None if it does not read."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def request_marks(lengths: Sequence[int], sample_rate: int, marked: Mapping[int, PartMarks]) -> list[MarkTime]:
    """Every mark of the parts in ``marked`` (by seq) placed in the joined audio; ``lengths``: the
    samples of parts 0..k at ``sample_rate``, k at least the last marked seq."""
    starts = part_starts(lengths, sample_rate, GAP_MS)
    out: list[MarkTime] = []
    for seq in sorted(marked):
        pm = marked[seq]
        t0 = starts[seq]
        out += [MarkTime(name=m.name, time_s=round(t0 + m.time_s, 4)) for m in pm.marks]
    return out
