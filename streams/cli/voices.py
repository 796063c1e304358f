"""``ttsflow voices [--json]``: every installed voice, its backend, languages and sample rate.

Nothing is loaded: the list is :func:`engine.voices.installed_voices` (a voice is installed
when its backend's package can be imported). ``--json`` prints one JSON object per line
(:meth:`engine.voices.VoiceInfo.as_dict`: ``voice``, ``backend``, ``languages``,
``sample_rate``, ``scripts`` and the measured speaking rates).
"""

from __future__ import annotations

import argparse
import json

__all__ = ["main"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow voices", description="List the installed voices.")
    ap.add_argument("--json", action="store_true", help="one JSON object per voice and line")
    args = ap.parse_args(argv)
    from engine.voices import installed_voices

    voices = installed_voices()
    if args.json:
        for v in voices:
            print(json.dumps(v.as_dict(), ensure_ascii=False))
        return 0
    width = max((len(v.voice) for v in voices), default=5)
    print(f"{'voice':<{width}}  {'backend':<8}  {'languages':<14}  sample_rate")
    for v in voices:
        print(f"{v.voice:<{width}}  {v.backend:<8}  {','.join(v.languages):<14}  {v.sample_rate}")
    return 0
