"""Voice mixes: ``"zf_xiaobei(2)+zm_yunjian(1)"``, a weighted sum of style vectors. Pure.

Kokoro-FastAPI's syntax: parts joined by ``+``, each a voice name with an optional weight in
parentheses (1 when absent). Guarantees:

- A mix has 1 to :data:`MAX_PARTS` parts, each weight a finite number > 0; a name given twice
  has its weights added. Anything else raises :class:`MixError` naming the bad part.
- :func:`canonical` is the one spelling of a mix that names it everywhere (the segment's
  voice, so its cache key, and a completion's ``model.voice``): parts in the order given,
  spaces dropped, each weight written ``%g`` (``"zf_xiaobei(2)+zm_yunjian(1)"``); a single
  voice of weight 1 is its plain name (``"zf_xiaobei(1)"`` is ``"zf_xiaobei"``). Two spellings
  of the same proportions (``a(2)+b(1)``, ``a(4)+b(2)``) stay two names: the same audio,
  cached twice, never wrong.
- :func:`weights` are normalized to sum to 1 (the mix's style is the weighted mean of its
  parts' styles, so a mix is as loud and as fast as its parts).
- Which parts may mix is the backend's business: :mod:`engine.voices` says every part must be
  a known voice of one backend that mixes (kokoro); a backend checks its own styles.
"""

from __future__ import annotations

import math
import re

from engine.errors import UnknownVoice

__all__ = ["MAX_PARTS", "MixError", "canonical", "is_mix", "parse", "weights"]

MAX_PARTS = 4
_PART = re.compile(r"^([A-Za-z0-9_.-]+)(?:\(([^()]*)\))?$")


class MixError(UnknownVoice):
    """A voice mix that cannot be spoken; ``part`` is the bad part (the whole text if none)."""

    def __init__(self, message: str, part: str) -> None:
        super().__init__(message)
        self.part = part


def is_mix(voice: str | None) -> bool:
    """True when ``voice`` is written as a mix (has ``+`` or a weight), even of one part."""
    return bool(voice) and ("+" in voice or "(" in voice)  # type: ignore[operator]


def parse(voice: str) -> tuple[tuple[str, float], ...]:
    """The parts of a mix as ``(name, weight)`` in the order given (repeated names added)."""
    raw = [p.strip() for p in voice.replace(" ", "").split("+")]
    if len(raw) > MAX_PARTS:
        raise MixError(f"voice mix {voice!r} has {len(raw)} parts; at most {MAX_PARTS}", voice)
    out: dict[str, float] = {}
    for p in raw:
        m = _PART.match(p)
        if not p or m is None:
            raise MixError(f"voice mix {voice!r}: part {p!r} is not name or name(weight)", p)
        w = 1.0
        if m.group(2) is not None:
            try:
                w = float(m.group(2))
            except ValueError:
                raise MixError(f"voice mix {voice!r}: part {p!r} has a weight that is not a number", p) from None
        if not math.isfinite(w) or w <= 0:
            raise MixError(f"voice mix {voice!r}: part {p!r} needs a weight > 0", p)
        out[m.group(1)] = out.get(m.group(1), 0.0) + w
    return tuple(out.items())


def canonical(voice: str) -> str:
    """The one spelling of ``voice`` (a plain name is returned as it is)."""
    if not is_mix(voice):
        return voice
    parts = parse(voice)
    if len(parts) == 1 and parts[0][1] == 1.0:
        return parts[0][0]
    return "+".join(f"{name}({w:g})" for name, w in parts)


def weights(voice: str) -> tuple[tuple[str, float], ...]:
    """The parts of ``voice`` with weights normalized to sum to 1 (a plain name: itself, 1)."""
    if not is_mix(voice):
        return ((voice, 1.0),)
    parts = parse(voice)
    total = sum(w for _, w in parts)
    return tuple((name, w / total) for name, w in parts)
