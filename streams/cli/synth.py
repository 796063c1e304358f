"""``ttsflow synth TEXT -o out.wav``: speak text into a file with the engine directly, no Kafka.

For a person trying a voice. The text is normalized and split into sentences the way the
stage does it, synthesized as one batch, joined with short pauses and written as
wav/flac/ogg. Anything a person can fix (empty text, unknown voice or backend, text over
``max_text_chars``, a model that is not there) is one line on stderr and exit status 2;
a synthesis failure is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from schemas import TtsflowError

__all__ = ["main"]


class _Usage(TtsflowError):
    """A mistake in the command line: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Usage(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ttsflow synth", description="Speak TEXT into an audio file (engine only, no Kafka).")
    p.add_argument("text", help="text to speak; '-' reads standard input")
    p.add_argument("-o", "--output", required=True, help="output file (.wav, .flac or .ogg)")
    p.add_argument("--voice", default=None, help="voice name (default: the backend's default voice)")
    p.add_argument("--backend", default=None, help="hibari (default), piper (extra 'piper') or kokoro (extra 'kokoro': Mandarin and English)")
    p.add_argument("--precision", default=None, help="auto, fp32, fp16 or int8 (default: the shipped model)")
    p.add_argument("--model", default=None, help="path of an ONNX model to load instead of the shipped one")
    p.add_argument("--format", default=None, help="wav, flac or ogg (default: from the output's extension)")
    p.add_argument("--speed", type=float, default=1.0, help="speaking rate multiplier, 0.25..4")
    p.add_argument("--sample-rate", type=int, default=None, help="resample the output to this rate (Hz)")
    p.add_argument("--threads", type=int, default=None, help="engine intra-op threads (0 = all cores)")
    p.add_argument("--captions", default=None, metavar="FILE",
                   help="also write captions timed by the voice: FILE.vtt (WebVTT) or FILE.srt")
    p.add_argument("--words", default=None, metavar="FILE",
                   help="also write each word's times as JSON: [{word, start, end, start_s, end_s}, ...]")
    return p


def _split(text: str, max_chars: int) -> tuple[str, list[str]]:
    """The normalized text and its segments, as the stage makes them."""
    from streams.stage.text import normalize, split_segments

    norm = normalize(text)
    return norm, split_segments(norm, max_chars)


def _run(argv: list[str]) -> int:
    from engine import SynthItem, encode, join, load_engine, resample
    from engine.audio import FORMATS
    from engine.base import Failure
    from engine.errors import EngineError
    from engine.registry import BACKENDS
    from streams.settings import SettingsError, load_settings

    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as e:
        raise _Usage(str(e)) from None
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        raise _Usage("the text is empty")
    if len(text) > settings.stage.max_text_chars:
        raise _Usage(f"the text has {len(text)} characters, over the limit of {settings.stage.max_text_chars} (TTS_MAX_TEXT_CHARS)")
    backend = args.backend or settings.engine.backend
    if backend not in BACKENDS:
        raise _Usage(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    out = Path(args.output)
    fmt = (args.format or out.suffix.lstrip(".") or "wav").lower()
    if fmt not in FORMATS:
        raise _Usage(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if not 0.25 <= args.speed <= 4.0:
        raise _Usage(f"speed {args.speed} is outside 0.25..4")
    if args.sample_rate is not None and not 8000 <= args.sample_rate <= 192_000:
        raise _Usage(f"sample rate {args.sample_rate} is outside 8000..192000")
    captions = Path(args.captions) if args.captions else None
    if captions is not None and captions.suffix.lower() not in (".vtt", ".srt"):
        raise _Usage(f"captions go to a .vtt or .srt file, not {captions.name!r}")
    timestamps = captions is not None or args.words is not None
    normalized, segments = _split(text, settings.stage.max_segment_chars)
    if not segments:
        raise _Usage("the text is empty after normalization")

    t0 = time.perf_counter()
    try:
        threads = settings.engine.threads if args.threads is None else args.threads
        if backend == "kokoro" and args.model is None:  # no single shipped file: the store joins its wheels
            from engine.reload import open_engine
            from engine.store import ModelStore

            engine = open_engine(ModelStore(settings.effective_model_dir).current("kokoro"),
                                 providers=settings.engine.providers, threads=threads)
        else:
            engine = load_engine(backend, model_path=args.model, precision=args.precision or settings.engine.precision,
                                 providers=settings.engine.providers, threads=threads)
    except EngineError as e:
        raise _Usage(str(e)) from None
    voice = args.voice or settings.engine.voice or engine.default_voice
    if voice not in engine.voices:
        raise _Usage(f"unknown voice {voice!r} for {backend}; available: {', '.join(engine.voices)}")
    if timestamps and not engine.timestamps:
        from engine.voices import NO_TIMESTAMPS_REASON

        raise _Usage(f"{backend} cannot time words ({NO_TIMESTAMPS_REASON}); drop --captions/--words or pick another backend")
    results = engine.synthesize([SynthItem(s, voice, args.speed, timestamps) for s in segments])
    engine.close()
    for seg, r in zip(segments, results, strict=True):
        if isinstance(r, Failure):
            print(f"ttsflow synth: {r.code}: {r.message} (in: {seg[:60]!r})", file=sys.stderr)
            return 1
    sr = engine.sample_rate
    audios = [r for r in results if not isinstance(r, Failure)]
    samples = join([r.samples for r in audios], sr)
    if timestamps:
        _write_timings(text, normalized, segments, audios, sr, captions, args.words)
    if args.sample_rate and args.sample_rate != sr:
        samples, sr = resample(samples, sr, args.sample_rate), args.sample_rate
    data = encode(samples, sr, fmt)
    try:
        out.write_bytes(data)
    except OSError as e:
        raise _Usage(f"cannot write {out}: {e.strerror or e}") from None
    info = engine.info
    print(f"wrote {out}: {len(samples) / sr:.2f} s of {fmt} at {sr} Hz, {len(segments)} segment(s), "
          f"{info.name} {info.precision} on {info.provider}, {time.perf_counter() - t0:.2f} s "
          f"(cold start {engine.cold_start_s or 0:.2f} s)", file=sys.stderr)
    return 0


def _write_timings(text: str, normalized: str, segments: list[str], audios: list[Any], sr: int,
                   captions: Path | None, words_path: str | None) -> None:
    """Every word placed in the joined audio and in the text as given; captions and/or JSON written."""
    import json

    from engine.audio import part_starts
    from engine.captions import cues, to_srt, to_vtt
    from engine.timing import in_request

    starts = part_starts([len(a.samples) for a in audios], sr)
    words = in_request(text, normalized, segments, [a.words or () for a in audios], starts)
    try:
        if captions is not None:
            cs = cues(text, words)
            captions.write_text(to_vtt(cs) if captions.suffix.lower() == ".vtt" else to_srt(cs), encoding="utf-8")
        if words_path is not None:
            def row(w: Any) -> dict[str, Any]:
                d = {"word": w.text, "start": w.start, "end": w.end, "start_s": w.start_s, "end_s": w.end_s}
                return d | ({"chars": [row(c) for c in w.chars]} if w.chars else {})

            rows = [row(w) for w in words]
            Path(words_path).write_text(json.dumps(rows, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as e:
        raise _Usage(f"cannot write timings: {e.strerror or e}") from None


def main(argv: list[str]) -> int:
    try:
        return _run(argv)
    except _Usage as e:
        print(f"ttsflow synth: {e}", file=sys.stderr)
        return 2
