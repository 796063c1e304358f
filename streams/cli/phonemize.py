"""``ttsflow phonemize TEXT --voice V``: what a voice will say, after the stage and the front end.

The text goes through the stage's own per-record logic (:class:`streams.stage.core.StageCore`:
normalization, SSML, the lexicons named, read from their topics, voice choice, segmentation), then
through the voice's front end (``Backend.prepare``: G2P, phoneme spans, chunks); printed per segment:
its text, the phonemes of each chunk the model reads, the pauses and rates between them. No Kafka
unless lexicons are named; no model call.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from streams.stage.explain import explain

__all__ = ["main"]


def _load_lexicons(settings: Any, names: list[str] | None) -> Any:
    from streams.stage.lexicons import LexiconReader, lexicon_store

    store = lexicon_store(settings.stage)
    if names:
        reader = LexiconReader(settings.kafka, store)
        reader.start(wait_s=20.0)
        reader.stop()
    return store


def _engine_for(settings: Any, voice: str | None) -> Any:
    from engine import voices as engine_voices
    from engine.registry import load_engine

    info = engine_voices.voice_info(voice) if voice else None
    backend = info.backend if info is not None else settings.engine.backend
    if backend == "kokoro":
        from engine.reload import open_engine
        from engine.store import ModelStore

        return open_engine(ModelStore(settings.effective_model_dir).current("kokoro"), threads=1)
    return load_engine(backend, threads=1, warm_up=False)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow phonemize", description=__doc__.split("\n\n")[0])
    ap.add_argument("text", help="the text (- for stdin)")
    ap.add_argument("--voice", default=None, help="the voice (default: the stage's choice)")
    ap.add_argument("--ssml", action="store_true", help="TEXT is an SSML document")
    ap.add_argument("--lexicon", action="append", default=None, metavar="NAME", help="apply this lexicon (repeatable)")
    ap.add_argument("--user", default="cli", help="whose lexicons")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    from engine.errors import EngineError
    from streams.settings import load_settings
    from streams.stage.core import StageCore, served_voices

    settings = load_settings()
    text = sys.stdin.read() if a.text == "-" else a.text
    try:
        engine = _engine_for(settings, a.voice)
    except EngineError as e:
        print(f"ttsflow phonemize: {e}", file=sys.stderr)
        return 1
    voices = served_voices(settings.engine) or tuple(engine.voices)
    if a.voice and a.voice not in voices:
        voices = (*voices, a.voice)
    core = StageCore(settings.stage, settings.kafka, settings.engine, voices=voices,
                     lexicons=_load_lexicons(settings, a.lexicon))
    res = explain(core, engine, text, voice=a.voice, user=a.user, ssml=a.ssml, lexicons=a.lexicon)
    if a.json:
        print(json.dumps(res, ensure_ascii=False))
    elif "error" in res:
        print(f"ttsflow phonemize: {res['error']['code']}: {res['error']['message']}", file=sys.stderr)
    else:
        for i, row in enumerate(res["segments"]):
            print(f"[{i}] {row['voice']}: {row['text']}")
            for k, ph in enumerate(row.get("phonemes", [])):
                pause = (row.get("pauses_ms") or [None] * (k + 1))[k]
                print(f"    {f'(pause {pause} ms) ' if pause is not None else ''}{ph}")
            if "error" in row:
                print(f"    error {row['error']['code']}: {row['error']['message']}")
        if res["lexicons"]:
            print("lexicons: " + ", ".join(res["lexicons"]))
    return 1 if "error" in res else 0
