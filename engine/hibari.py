"""The hibari voice (``hibari-tts``, Apache-2.0): the default backend.

The front end is hibari's own: its sentence splitter (``Hibari.split_sentences``), its
misaki-style G2P (``hibari.g2p.G2P``, with its OOV net) and its phoneme vocabulary; long
sentences are cut at clause punctuation at hibari's ``MAX_PHONEMES`` exactly as
``Hibari.phonemize`` does. The model predicts spectral frames; hibari's numpy DSP
(``hibari.dsp.synth``) turns them into a waveform. That DSP runs in ``postprocess`` so a
worker can run it on another thread while the model works on the next batch.

Guarantees: only the voice shipped in the wheel (``heart``) is offered; the others would
be downloaded at run time. The graph has batch size 1 baked in, so ``infer`` runs the
items of a batch one by one (``native_batching`` is False). Output is deterministic for a
given text and speed: the DSP's noise generator is seeded from the phoneme ids.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import zlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from engine import pron
from engine.base import Backend, ModelInfo, Prepared, SynthItem
from engine.engine import pow2_bucket
from engine.errors import BackendError, ItemError, ModelLoadError, UnknownVoice
from engine.providers import make_session
from engine.timed_graph import timed_graph
from engine.timing import Word, WordPhonemes, plan_words, word_times

__all__ = ["HibariBackend"]

_log = logging.getLogger("ttsflow.engine")

VOICE = "heart"
# The decoder's audio runs this many duration units (25 ms) ahead of its durations: the offset
# Kokoro's reference pipeline takes off the first pad (``KPipeline.join_timestamps``: pred_dur[0] - 3);
# hibari is distilled from Kokoro and measured to lead by the same (``ttsflow bench align``).
_LEAD_UNITS = 3
_CLAUSE = re.compile(r"(?<=[,;:—])\s+")  # hibari's clause cut for over-long sentences


def _shipped_model() -> Path:
    from hibari.voices import voice_path

    return Path(voice_path(VOICE, download_missing=False))


def _hibari_version() -> str:
    import hibari

    return str(hibari.__version__)


class HibariBackend(Backend):
    """hibari ``heart`` (American English, female), 24 kHz."""

    native_batching = False
    spans = True
    voices = (VOICE,)
    default_voice = VOICE

    def __init__(self, model_path: Path | None = None, *, providers: Sequence[str] | str | None = None,
                 threads: int = 0, precision: str | None = None, version: str | None = None,
                 config_path: Path | None = None) -> None:
        # config_path is accepted for a uniform constructor; hibari's vocabulary ships in its package.
        del config_path
        try:
            import hibari
            from hibari import dsp
            from hibari.g2p import G2P
            from hibari.tts import ASSETS, MAX_PHONEMES, SAMPLE_RATE
        except ImportError as e:  # pragma: no cover - hibari-tts is a core dependency
            raise ModelLoadError(f"hibari: the hibari-tts package is not installed ({e})") from e
        path = Path(model_path) if model_path is not None else _shipped_model()
        if not path.is_file():
            raise ModelLoadError(f"hibari: model file not found: {path}")
        # G2P's dictionaries (~0.3 s of JSON) are read on a thread while onnxruntime builds the session,
        # which lets go of the GIL: a worker restarted after a crash is back ~0.1 s sooner
        loader = ThreadPoolExecutor(1, thread_name_prefix="hibari-g2p")
        g2p: Future[Any] = loader.submit(G2P, british=False)
        loader.shutdown(wait=False)  # the thread ends with its one task
        # the frames of each phoneme as an output: word timings, at no extra cost (engine.timed_graph)
        timed = timed_graph(path, precision)
        precision, durations = timed.precision, timed.durations
        self._session, provider = make_session(timed.model, providers=providers or "auto",
                                               threads=threads, name="hibari")
        del timed
        outputs = [o.name for o in self._session.get_outputs()]
        self._out_frames = [i for i, n in enumerate(outputs) if n != durations][:6]
        self._out_dur = outputs.index(durations) if durations in outputs else None
        self.timestamps = self._out_dur is not None
        precision = getattr(self._session, "precision", precision)  # what runs: the torch provider runs an int8 graph as fp32
        self._input_names = {i.name for i in self._session.get_inputs()}
        if not {"ids", "speed"} <= self._input_names:
            raise ModelLoadError(f"hibari: {path} does not have hibari's inputs (ids, speed): {sorted(self._input_names)}")
        self._dsp = dsp
        self._max_phonemes = MAX_PHONEMES
        self._split_sentences = hibari.Hibari.split_sentences
        self._g2p = g2p.result()
        self._word_phonemes = WordPhonemes(lambda w: str(self._g2p(w)))  # one word alone, for timings
        with open(os.path.join(ASSETS, "vocab.json"), encoding="utf-8") as f:
            self._vocab: dict[str, int] = json.load(f)
        self.sample_rate = int(SAMPLE_RATE)
        self.model_path = path
        self.info = ModelInfo(name="hibari", version=version or _hibari_version(), precision=precision,
                              provider=provider)

    # -- 1. front end ---------------------------------------------------------------
    def _phonemize(self, text: str) -> list[str]:
        """Phoneme strings, one per sentence, long ones cut at clauses (as ``Hibari.phonemize``)."""
        chunks: list[str] = []
        for sent in self._split_sentences(text):
            ps = self._g2p(sent)
            if ps:
                chunks += self._fit(ps)
        return chunks

    def _fit(self, ps: str) -> list[str]:
        """One sentence's phonemes cut at clauses to at most hibari's ``MAX_PHONEMES``."""
        if len(ps) <= self._max_phonemes:
            return [ps]
        chunks: list[str] = []
        cur = ""
        for part in _CLAUSE.split(ps):
            if cur and len(cur) + len(part) + 1 > self._max_phonemes:
                chunks.append(cur)
                cur = part
            else:
                cur = f"{cur} {part}" if cur else part
        if cur:
            chunks.append(cur)
        return chunks

    def _read(self, span: Any) -> str:
        """A span's phonemes: IPA converted, anything else (text, or pinyin hibari cannot say) read."""
        if span.ph is not None and span.alphabet == "ipa":
            return pron.ipa_to_misaki(span.ph)
        if span.ph is not None and span.alphabet == "x-voice":
            return str(span.ph)
        return str(self._g2p(span.text)) if span.text.strip() else ""

    def _fit_run(self, ps: str) -> list[str]:
        out: list[str] = []
        for piece in re.split(r"(?<=[.!?])\s+", ps):
            out += self._fit(piece) if piece.strip() else []
        return out

    def prepare(self, item: SynthItem) -> Prepared:
        if item.voice and item.voice != VOICE:
            raise UnknownVoice(f"unknown voice {item.voice!r} for hibari; available: {VOICE}")
        if not item.text.strip() and not item.spans:
            raise ItemError("empty text")
        shape = None
        try:
            if item.spans:
                chunks, shape = pron.chunked(item.spans, self._read, self._fit_run)
            else:
                chunks = self._phonemize(item.text)
        except Exception as e:  # the G2P is third-party code; a crash there is this item's problem
            raise ItemError(f"hibari front end failed on this text: {type(e).__name__}: {e}") from e
        keep = [sum(c in self._vocab for c in ps) >= 1 for ps in chunks]
        if shape is not None:
            shape = pron.keep(shape, keep)
        chunks = [ps for ps, k in zip(chunks, keep, strict=True) if k]
        ids = [np.asarray([0, *[self._vocab[c] for c in ps if c in self._vocab], 0], np.int64) for ps in chunks]
        if not ids:
            raise ItemError("nothing speakable in the text")
        words = None
        if item.timestamps and self.timestamps:  # (a span item: the words of its text, read as its spans say)
            plan = plan_words(item.text, chunks, self._word_phonemes)
            # model units: the pad, the chunk's phonemes the vocabulary knows, the pad
            words = plan.kept(chunks, lambda c: c in self._vocab)  # model units: a pad, known phonemes, a pad
        return Prepared(item=item, payload=ids, length=int(sum(len(a) for a in ids)), words=words,
                        shape=None if shape is None else (shape, tuple(chunks)))

    def bucket_of(self, prepared: Prepared) -> int:
        """Power-of-two length class (hibari runs items one by one, so this only orders work)."""
        return pow2_bucket(prepared.length)

    # -- 2. model -------------------------------------------------------------------
    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        out: list[Any] = []
        for p in batch:
            frames = []
            for k, ids in enumerate(p.payload):
                rate = p.shape[0].rates[k] if p.shape is not None else 1.0
                speed = np.asarray([min(pron.MAX_RATE, max(pron.MIN_RATE, p.item.speed * rate))], np.float32)
                try:
                    res = self._session.run(None, {"ids": ids[None, :], "speed": speed})
                except Exception as e:  # onnxruntime's errors are untyped; the whole batch fails
                    raise BackendError(f"hibari model failed: {e}") from e
                step: list[np.ndarray] = [np.asarray(res[k][0], np.float32) for k in self._out_frames]
                if self._out_dur is not None:  # frames per phoneme, for word timings
                    step.append(np.asarray(res[self._out_dur], np.int64).reshape(-1))
                frames.append(step)
            out.append(frames)
        return out

    # -- 3. DSP ---------------------------------------------------------------------
    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        return self.postprocess_marked(raw, prepared)[0]

    def postprocess_spans(self, raw: Any, prepared: Prepared
                          ) -> tuple[np.ndarray, tuple[tuple[str, float], ...], tuple[int, ...]]:
        seed = zlib.crc32(b"".join(a.tobytes() for a in prepared.payload)) ^ zlib.crc32(
            f"{prepared.item.speed:.4f}".encode())
        rng = np.random.default_rng(seed)
        parts = [self._dsp.synth(*step[:6], rng) for step in raw]
        marks: tuple[tuple[str, float], ...] = ()
        starts: list[int] = []
        if prepared.shape is not None:  # a span item: pauses where its breaks stand
            shape, chunks = prepared.shape
            wav, starts = pron.join(parts, shape, self.sample_rate, 0.0)
            marks = pron.mark_times(shape, chunks, starts, [len(p) for p in parts], self.sample_rate)
        else:
            wav = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if not np.all(np.isfinite(wav)):
            raise ItemError("hibari produced non-finite audio for this text")
        return np.clip(wav, -1.0, 1.0).astype(np.float32, copy=False), marks, tuple(starts)

    def word_times(self, raw: Any, prepared: Prepared, samples: int,
                   starts: Sequence[int] = ()) -> tuple[Word, ...]:
        # one duration unit is two spectral frames of hop 300: 600 samples at 24 kHz
        assert prepared.words is not None
        hop = 2 * self._dsp.HOP
        units = [step[6] * hop for step in raw]
        if not starts:  # chunks back to back (a span item's come from its join: its pauses)
            starts = list(itertools.accumulate((int(u.sum()) for u in units[:-1]), initial=0))
        return word_times(prepared.words, prepared.words.owners, units, starts, self.sample_rate, samples,
                          lead_samples=_LEAD_UNITS * hop)

    def close(self) -> None:
        self._session = None
