
"""Japanese intelligibility: what Whisper base hears from a voice, scored on readings.

The recognizer is :mod:`streams.bench.asr_zh`'s (faster-whisper, Whisper base int8 from its
PyPI wheels), asked for Japanese. Whisper writes the same words in kanji, kana or digits as
it likes (今日/きょう, 3時/三時), so both sides are scored on their **katakana readings**
(:func:`engine.ja_text.kana_reading`: OpenJTalk, after the same normalization the voice
gets), punctuation and spaces dropped, long vowels as OpenJTalk writes them (``ー``): the
character error is then an error of what was heard, not of spelling. A homophone written
with other kanji is not an error; a misheard mora is.

``python -m streams.bench.asr_ja [--voice V ...]`` prints one JSON line per voice: corpus
character error over :data:`SENTENCES`, per-sentence min/max, and the real-time factor.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence

import numpy as np

__all__ = ["SENTENCES", "char_error", "corpus_cer", "reading", "recognize"]

# Twenty Japanese sentences: customer service, news, numbers (dates, times, money, counters), loanwords.
SENTENCES: tuple[str, ...] = (
    "お電話ありがとうございます。ご用件をお伺いします。",
    "ご注文の商品は明日の午後に届く予定です。",
    "ご不便をおかけして、大変申し訳ございません。",
    "会議は3月15日の午後3時から始まります。",
    "この商品の価格は¥1,299で、今なら15%オフです。",
    "明日の東京は晴れのち曇り、最高気温は18度の予想です。",
    "新しい駅は来年の春に開業する見込みです。",
    "りんごを3個と、牛乳を2本買ってきてください。",
    "電車が遅れているため、到着は10:30になります。",
    "図書館は毎週月曜日が休館日です。",
    "桜の花が咲いて、公園はたくさんの人でにぎわっています。",
    "パスワードは8文字以上で設定してください。",
    "私たちは2024年4月1日に新しいオフィスへ移転しました。",
    "お客様の順番は5番目です。少々お待ちください。",
    "週末は家族と一緒に温泉へ行く予定です。",
    "このアプリでは、音声で天気を確認できます。",
    "山田さんは毎朝7時に起きて、30分ほど散歩します。",
    "今年の売上は前年より12%増えました。",
    "子どもたちが元気に校庭で遊んでいます。",
    "ご質問があれば、いつでもお気軽にお問い合わせください。",
)

_PUNCT = re.compile(r"[\s\W_]+", re.UNICODE)


def recognize(audio: np.ndarray, sample_rate: int, language: str = "ja") -> str:
    """What Whisper base hears in float mono audio (any sample rate), as ``language`` (default Japanese)."""
    from engine.audio import resample
    from streams.bench.asr_zh import _model

    x = resample(np.asarray(audio, np.float32), sample_rate, 16000)
    segments, _ = _model().transcribe(x, language=language, beam_size=1, vad_filter=False,
                                      condition_on_previous_text=False)
    return "".join(s.text for s in segments)


def reading(text: str) -> str:
    """The katakana reading of ``text`` without punctuation or spaces (what is scored)."""
    from engine.ja_text import kana_reading

    return _PUNCT.sub("", kana_reading(text))


def char_error(audio: np.ndarray, sample_rate: int, reference: str) -> float:
    """Character error of the reading of what Whisper hears against the reference's (1.0: nothing heard)."""
    import jiwer

    hyp = reading(recognize(audio, sample_rate))
    if not hyp:
        return 1.0
    return float(jiwer.cer(reading(reference), hyp))


def corpus_cer(references: Sequence[str], heard: Sequence[str]) -> float:
    """Corpus character error on readings: total edits over total reference characters."""
    import jiwer

    return float(jiwer.cer([reading(r) for r in references], [reading(h) or "?" for h in heard]))


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json
    import time

    from engine.base import Audio, SynthItem
    from engine.reload import open_engine
    from engine.store import ModelStore

    ap = argparse.ArgumentParser(prog="python -m streams.bench.asr_ja")
    ap.add_argument("--voice", action="append", default=None, help="kokoro voice (repeatable; default jf_alpha)")
    ap.add_argument("--model-dir", default=None, help="model store (default: a temporary one)")
    ap.add_argument("--first", type=int, default=len(SENTENCES), help="only the first N sentences")
    ap.add_argument("--show", action="store_true", help="also print what was heard, per sentence (stderr)")
    args = ap.parse_args(argv)
    import sys

    with tempfile.TemporaryDirectory() as tmp:
        store = ModelStore(args.model_dir or tmp)
        mv = store.current("kokoro")
        engine = open_engine(mv, threads=1)
        try:
            for voice in args.voice or ["jf_alpha"]:
                sents = SENTENCES[: args.first]
                t0 = time.perf_counter()
                out = engine.synthesize([SynthItem(s, voice) for s in sents])
                synth_s = time.perf_counter() - t0
                audios = [o.samples for o in out if isinstance(o, Audio)]
                heard = [recognize(a, 24_000) for a in audios]
                per = [corpus_cer([s], [h]) for s, h in zip(sents, heard, strict=True)]
                if args.show:
                    for s, h, e in zip(sents, heard, per, strict=True):
                        print(f"{voice} {e:.2f} {s} -> {h}", file=sys.stderr)
                audio_s = sum(len(a) for a in audios) / 24_000
                print(json.dumps({"version": mv.version, "voice": voice, "sentences": len(sents),
                                  "corpus_cer": round(corpus_cer(sents, heard), 4),
                                  "min": round(min(per), 4), "max": round(max(per), 4),
                                  "rtf": round(synth_s / audio_s, 3), "loadavg_1m": round(os.getloadavg()[0], 2)}),
                      flush=True)
        finally:
            engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
