"""A request's per-language voice map (``voices``): checked, and its text cut into runs that one
voice each speaks. Pure: no Kafka, no model.

Guarantees:

- :func:`check` accepts a map only if every language is one the stage tells apart
  (:data:`engine.languages.LANGUAGES`: ``zh``, ``ja``, ``en``) and every voice is served (a mix
  checked part by part, returned in its one spelling, :mod:`engine.mix`) and speaks its language;
  otherwise it raises ``ContentError`` with a stable code and a message naming the language and
  the voice: ``unsupported_language`` (a language the stage does not cut by, or a voice that does
  not speak its language), ``unknown_voice`` (a voice not served, or a bad mix).
- :func:`runs` cuts the text where its language changes (:func:`engine.languages.language_runs`,
  the same cut the kokoro front end makes) and gives each run the map's voice for its language, or
  None (the request's voice, or the one the stage chooses for the run).
- :func:`join` joins neighbouring runs that the same voice speaks (one model call where the
  backend allows, no pause inside a sentence); a joined run of several languages has no ``lang``
  (the voice's front end tells them apart, as without a map).
- Nothing is lost or reordered: the texts of the runs, joined, are the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine import mix as engine_mix
from engine import voices as engine_voices
from engine.languages import LANGUAGES, language_runs
from schemas.errors import ContentError

__all__ = ["Run", "check", "join", "primary_for", "runs"]

_NAMES = {"zh": "Mandarin", "ja": "Japanese", "en": "English"}


@dataclass(frozen=True, slots=True)
class Run:
    """Text of one language (``lang``; None: several, after :func:`join`) and the voice that speaks
    it (None: not chosen yet)."""

    text: str
    lang: str | None
    voice: str | None


def _speaks(info: engine_voices.VoiceInfo, lang: str) -> bool:
    return any(tag.split("-")[0].lower() == lang for tag in info.languages)


def check(voices: Mapping[str, str], *, served: tuple[str, ...] | None) -> dict[str, str]:
    """The map with each voice in its one spelling; raises ``ContentError`` (see the module docstring).
    ``served``: the voices the workers serve (None: not known here, names are not checked)."""
    out: dict[str, str] = {}
    for lang, voice in voices.items():
        where = f"voices.{lang}"
        if lang not in LANGUAGES:
            raise ContentError(f"{where}: the stage cuts a text into {', '.join(LANGUAGES)} runs; "
                               f"{lang!r} is not one of them", field="voices", code="unsupported_language")
        try:
            info = (engine_voices.mix_info(voice, served=served) if engine_mix.is_mix(voice)
                    else engine_voices.voice_info(voice))
        except engine_mix.MixError as e:
            raise ContentError(f"{where}: {e}", field="voices", code="unknown_voice") from e
        if served is not None and not engine_mix.is_mix(voice) and voice not in served:
            raise ContentError(f"{where}: voice {voice!r} is not one of {', '.join(served)}",
                               field="voices", code="unknown_voice")
        if info is not None and not _speaks(info, lang):
            raise ContentError(f"{where}: voice {info.voice!r} speaks {', '.join(info.languages)}, not "
                               f"{_NAMES[lang]}", field="voices", code="unsupported_language")
        out[lang] = info.voice if info is not None else voice
    return out


def primary_for(language: str) -> str:
    """The language a clause of Han characters alone is read in when no neighbour tells: the
    request voice's own (``language``) if it is Mandarin or Japanese, else Mandarin."""
    return language if language in ("zh", "ja") else "zh"


def runs(text: str, voices: Mapping[str, str], primary: str) -> list[Run]:
    """``text`` cut where its language changes, each run with the map's voice for its language."""
    return [Run(t, lang, voices.get(lang)) for t, lang in language_runs(text, primary)]


def join(chosen: list[Run]) -> list[Run]:
    """Neighbouring runs of one voice as one run (several languages: ``lang`` None)."""
    out: list[Run] = []
    for r in chosen:
        if out and out[-1].voice == r.voice:
            prev = out[-1]
            out[-1] = Run(prev.text + r.text, prev.lang if prev.lang == r.lang else None, r.voice)
        else:
            out.append(r)
    return out
