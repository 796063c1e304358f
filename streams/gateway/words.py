"""Word timings as the gateway's callers read them: pure shapes, no I/O.

* ``/v1/audio/speech`` with ``"timestamps": true`` (OpenAI SDK: ``extra_body``): ttsflow's own
  word shape (:func:`ours`): ``word``, ``start``/``end`` (character offsets into ``input``),
  ``start_s``/``end_s`` (seconds in the returned audio).
* ``/dev/captioned_speech``: Kokoro-FastAPI's (:func:`kokoro`): ``word``, ``start_time``,
  ``end_time`` (seconds).
* Streamed: a chunk's words move from the chunk's audio to the answer's (:func:`in_request`): the
  gateway's streamed answer puts the chunks' audio end to end (no pause between them, unlike the
  joined audio), so a chunk starts where the earlier chunks' audio ends. An encoder may hold a
  chunk's audio back (mp3 frames); :class:`Carry` keeps the words until a piece of audio goes out
  with them; so do the chunks' SSML marks (:meth:`Carry.take_marks`).
"""

from __future__ import annotations

from typing import Any

from schemas import Chunk, WordSpan

__all__ = ["Carry", "in_request", "kokoro", "ours"]


def ours(words: list[WordSpan]) -> list[dict[str, Any]]:
    return [{"word": w.word, "start": w.start, "end": w.end, "start_s": w.start_s, "end_s": w.end_s} for w in words]


def kokoro(words: list[WordSpan]) -> list[dict[str, Any]]:
    return [{"word": w.word, "start_time": w.start_s, "end_time": w.end_s} for w in words]


def in_request(ch: Chunk, at_s: float) -> list[WordSpan]:
    """``ch``'s words with times in an answer where the chunk's audio starts at ``at_s``."""
    return [WordSpan(word=w.word, start=w.start, end=w.end, start_s=round(w.start_s + at_s, 4),
                     end_s=round(w.end_s + at_s, 4)) for w in ch.words or []]


class Carry:
    """Words waiting for audio: each chunk's words are added, and leave with the next piece sent."""

    def __init__(self) -> None:
        self.running_s = 0.0
        self._held: list[WordSpan] = []
        self._marks: list[dict[str, Any]] = []
        self.reason: str | None = None

    def add(self, ch: Chunk) -> None:
        """The chunk whose audio goes out next (end to end after the earlier ones)."""
        self._held += in_request(ch, self.running_s)
        self._marks += [{"name": m.name, "time_s": round(m.time_s + self.running_s, 4)} for m in ch.marks or ()]
        self.reason = self.reason or ch.words_reason
        self.running_s += ch.audio.duration_s

    def take(self) -> list[WordSpan]:
        out, self._held = self._held, []
        return out

    def take_marks(self) -> list[dict[str, Any]]:
        """The SSML marks of the chunks added since the last call (``name``, ``time_s`` in the answer)."""
        out, self._marks = self._marks, []
        return out
