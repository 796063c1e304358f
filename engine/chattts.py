"""The ChatTTS backend (``chattts`` 0.2.5 on torch) for users who bring ChatTTS weights.

Licences: ChatTTS's code is AGPL-3.0 and its weights CC BY-NC 4.0. ttsflow ships
neither: ``chattts`` is an optional extra (``pip install 'ttsflow[chattts]'``) and the
weights are read from a local directory the user names (``TTS_CHATTTS_ASSET_DIR``), laid
out as ``Chat.load(source="custom", custom_path=DIR)`` expects::

    DIR/asset/{Decoder,DVAE,Embed,Vocos}.safetensors
    DIR/asset/gpt/{config.json,model.safetensors}
    DIR/asset/tokenizer/{tokenizer.json,tokenizer_config.json,special_tokens_map.json}

(``DIR`` may also be the ``asset`` folder itself.) Official weights go through
``Chat.load``, which checks every file's sha256 against the package's map and refuses a
mismatch. A directory holding ``ttsflow-chattts.json`` declares its own architecture
(``make_tiny_assets`` writes one for tests and ``ttsflow bench engine``); its files cannot
match the official hashes, so it is loaded with ``Chat._load`` after the config overrides
are applied, and a warning says the check was skipped.

Guarantees:

* One speaker per backend: a fixed speaker embedding (the string ChatTTS's
  ``sample_random_speaker()`` prints, or a file holding it), or, when none is set, one
  drawn once from the model's speaker statistics with ``seed``. Every segment of every
  user sounds the same, so a user's segments can be synthesized in any batch.
* Seeded sampling: ``manual_seed=seed`` on every call. The same batch gives the same
  audio; an item's audio may differ with the other items of its batch (the sampler draws
  for the whole batch at once).
* Real batching (``native_batching``): ``infer`` makes ONE padded ``GPT.generate`` call
  for the whole batch. Read from ``chattts`` 0.2.5's source: ``Chat.infer(texts,
  split_text=False, skip_refine_text=True)`` also makes one ``generate`` call (its
  default ``split_text=True`` first synthesizes text 0 alone to sample a reference voice,
  then concatenates all texts into ONE waveform), but it then decodes the whole batch
  padded to the longest item, so a shorter item's waveform carries the decode of the zero
  padding as a tail, and it drops every sample with ``|x| <= 1e-5`` anywhere in the
  waveform, which shortens quiet passages mid-utterance. We therefore run the two steps
  ``Chat.infer`` is made of ourselves (``Chat._infer_code`` once for the batch, then
  ``Chat._decode_to_wavs`` per item at its own token count), so each item's audio is the
  decode of its own tokens only (2 mel frames x 256 samples per token).
* The ``|x| <= 1e-5`` trim is corrected, not kept: only leading and trailing runs of such
  samples are removed; quiet samples inside an utterance stay.
* Precision: FP16 on CUDA (the Llama transformer, which is the autoregressive bulk of the
  work, runs in half; embeddings, heads, the DVAE decoder and Vocos stay FP32, as
  ChatTTS itself casts hidden states back to float for the heads), FP32 on CPU. FP16 on
  CPU and int8 are refused with a ``ModelLoadError``.
* Numbers are read, not dropped: ChatTTS's own normalizer deletes every character outside
  letters, CJK and ``,.`` (digits included) unless a number normalizer is registered, so
  ``prepare`` first spells digits out (English words from hibari's number reader; Chinese
  numerals for Chinese text), with ``%`` and a leading ``$``; hyphens and commas are left
  out of the words, since ChatTTS turns ``-`` into a pause.
* ``max_new_token`` caps the audio tokens per item (about 21.5 per second of audio), so a
  model that never emits its end token stops.

The private methods used (``_infer_code``, ``_decode_to_wavs``, ``_load``) are those of
``chattts==0.2.5``, which the extra pins; the unit test exercises all three.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.base import Backend, ModelInfo, Prepared, SynthItem
from engine.errors import BackendError, ItemError, ModelLoadError, UnknownVoice

__all__ = ["TINY_CONFIG_FILE", "VOICE", "ChatTTSBackend", "make_tiny_assets"]

_log = logging.getLogger("ttsflow.engine")

VOICE = "chattts"
SAMPLE_RATE = 24_000
TINY_CONFIG_FILE = "ttsflow-chattts.json"
_QUIET = np.float32(1e-5)  # chattts's own silence threshold
_FILES = ("Decoder.safetensors", "DVAE.safetensors", "Embed.safetensors", "Vocos.safetensors",
          "gpt/config.json", "gpt/model.safetensors", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json")


def _import() -> Any:
    try:
        import ChatTTS
        import torch  # noqa: F401
    except ImportError as e:
        raise ModelLoadError(f"chattts: the chattts extra is not installed ({e}); pip install 'ttsflow[chattts]'") from e
    return ChatTTS


def _resolve_root(asset_dir: Path | str | None) -> Path:
    """The directory that holds ``asset/`` (what ``Chat.load(custom_path=...)`` wants)."""
    if asset_dir is None or str(asset_dir) == "":
        raise ModelLoadError("chattts: no asset directory; set TTS_CHATTTS_ASSET_DIR to a local copy of the ChatTTS "
                             "weights (asset/gpt, asset/tokenizer, *.safetensors); they are never downloaded")
    d = Path(asset_dir).expanduser()
    if (d / "asset").is_dir():
        root = d
    elif d.name == "asset" and (d / "gpt").is_dir():
        root = d.parent
    else:
        raise ModelLoadError(f"chattts: {d} has no asset/ folder (expected asset/gpt, asset/tokenizer, "
                             "Decoder/DVAE/Embed/Vocos .safetensors)")
    missing = [f for f in _FILES if not (root / "asset" / f).is_file()]
    if missing:
        raise ModelLoadError(f"chattts: {root / 'asset'} lacks {', '.join(missing)}")
    return root


def _apply(obj: Any, overrides: dict[str, Any], where: str = "config") -> None:
    """Set nested dataclass fields of chattts's ``Config`` from a JSON object."""
    for key, value in overrides.items():
        if not hasattr(obj, key):
            raise ModelLoadError(f"chattts: {TINY_CONFIG_FILE}: unknown field {where}.{key}")
        cur = getattr(obj, key)
        if isinstance(value, dict) and dataclasses.is_dataclass(cur):
            _apply(cur, value, f"{where}.{key}")
        else:
            setattr(obj, key, tuple(value) if isinstance(value, list) else value)


def _pick_device(device: str, providers: Any) -> Any:
    import torch

    want = (device or "auto").lower()
    if want == "auto" and providers not in (None, "", "auto"):
        names = [providers] if isinstance(providers, str) else list(providers)
        names = [n for part in names for n in str(part).split(",") if n.strip()]
        if names and all("cpu" in n.lower() for n in names):
            want = "cpu"
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"chattts: device {want!r} asked for but torch sees no CUDA device")
    try:
        return torch.device(want)
    except RuntimeError as e:
        raise ModelLoadError(f"chattts: bad device {device!r}: {e}") from e


def _file_digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()


_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])(\$)?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(%)?")
_ZH_DIGITS = "零一二三四五六七八九"


def _zh_below_10k(n: int) -> str:
    out, gap = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d = n // value % 10
        if d == 0:
            gap = gap or bool(out)
        else:
            out += ("零" if gap else "") + _ZH_DIGITS[d] + unit
            gap = False
    return out


def _zh_int(n: int) -> str:
    """Chinese reading of a non-negative integer: 35 -> 三十五, 10005 -> 一万零五."""
    if n == 0:
        return "零"
    if n >= 10**16:
        return "".join(_ZH_DIGITS[int(c)] for c in str(n))
    groups = []
    while n:
        n, g = divmod(n, 10_000)
        groups.append(g)
    out, gap = "", False
    for i in reversed(range(len(groups))):
        g = groups[i]
        if g == 0:
            gap = bool(out)
            continue
        if out and (gap or g < 1000):
            out += "零"
        out += _zh_below_10k(g) + ("", "万", "亿", "万亿")[i]
        gap = False
    return out[1:] if out.startswith("一十") else out


def _spell_numbers(text: str, lang: str) -> str:
    """Digits to words (ChatTTS would delete them): English, or Chinese numerals for ``zh``."""
    from hibari.g2p.numbers import ONES, cardinal, ordinal, year

    def en(m: re.Match[str]) -> str:
        dollar, whole, frac, pct = m.groups()
        n = int(whole.replace(",", ""))
        if n >= 10**15:
            words = " ".join(ONES[int(c)] for c in whole if c.isdigit())
        elif not (dollar or frac or pct or "," in whole) and len(whole) == 4 and 1100 <= n <= 2099:
            words = year(n)
        else:
            words = cardinal(n)
        if frac:
            words += " point " + " ".join(ONES[int(c)] for c in frac[1:])
        words += " percent" if pct else ""
        words += " dollars" if dollar else ""
        return f" {words.replace('-', ' ').replace(',', '')} "

    def zh(m: re.Match[str]) -> str:
        dollar, whole, frac, pct = m.groups()
        if len(whole) == 4 and not (dollar or frac or pct) and m.string[m.end():m.end() + 1] == "年":
            return "".join(_ZH_DIGITS[int(c)] for c in whole)  # years are read digit by digit
        words = _zh_int(int(whole.replace(",", "")))
        if frac:
            words += "点" + "".join(_ZH_DIGITS[int(c)] for c in frac[1:])
        words = ("百分之" + words) if pct else words
        return words + ("美元" if dollar else "")

    if lang != "zh":
        text = re.sub(r"\b(\d{1,15})(?:st|nd|rd|th)\b", lambda m: f" {ordinal(int(m.group(1))).replace('-', ' ').replace(',', '')} ", text)
    return _NUMBER.sub(zh if lang == "zh" else en, text)


class ChatTTSBackend(Backend):
    """ChatTTS (2Noise), 24 kHz, one fixed speaker, batched on one padded ``generate``."""

    native_batching = True
    timestamps = False  # autoregressive: no duration per token, so no word times (engine.voices.NO_TIMESTAMPS_REASON)
    voices = (VOICE,)
    default_voice = VOICE
    sample_rate = SAMPLE_RATE

    def __init__(self, asset_dir: Path | str | None = None, *, device: str = "auto", precision: str | None = None,
                 speaker: str = "", seed: int = 0, max_new_token: int = 2048, min_new_token: int = 1,
                 temperature: float = 0.3, top_p: float = 0.7, top_k: int = 20, threads: int = 0,
                 providers: Any = None, version: str | None = None) -> None:
        chattts = _import()
        import torch

        if max_new_token < 1 or min_new_token < 0 or min_new_token > max_new_token:
            raise ModelLoadError(f"chattts: need 0 <= min_new_token ({min_new_token}) <= max_new_token ({max_new_token})")
        root = _resolve_root(asset_dir)
        dev = _pick_device(device, providers)
        prec = None if precision in (None, "", "auto") else precision
        if prec is None:
            prec = "fp16" if dev.type == "cuda" else "fp32"
        if prec not in ("fp16", "fp32") or (prec == "fp16" and dev.type != "cuda"):
            raise ModelLoadError(f"chattts: precision {prec} on {dev.type} is not supported (fp16 on CUDA, fp32 anywhere)")
        if threads > 0:
            torch.set_num_threads(threads)

        chat = chattts.Chat(logging.getLogger("ttsflow.engine.chattts"))
        # Config's nested defaults are shared class-level instances: never mutate them in place.
        chat.config = copy.deepcopy(chat.config)
        tiny = root / "asset" / TINY_CONFIG_FILE
        try:
            if tiny.is_file():
                _apply(chat.config, json.loads(tiny.read_text(encoding="utf-8")))
                _log.warning("event=chattts_custom_assets dir=%s sha256_check=skipped "
                             "reason='%s declares a non-official architecture'", root, TINY_CONFIG_FILE)
                paths = {k: str(root / v) for k, v in dataclasses.asdict(chat.config.path).items()}
                ok = chat._load(device=dev, compile=False, **paths)
                files = sorted(p for p in (root / "asset").rglob("*") if p.is_file())
                assets = _file_digest(files)
            else:
                ok = chat.load(source="custom", custom_path=str(root), device=dev, compile=False)
                # Chat.load verified every file against these hashes, so they name the weights.
                assets = hashlib.sha256("".join(sorted(chat.sha256_map.values())).encode()).hexdigest()
        except ModelLoadError:
            raise
        except Exception as e:  # torch/transformers/safetensors raise many kinds on bad files
            raise ModelLoadError(f"chattts: loading {root} failed: {type(e).__name__}: {e}") from e
        if not ok:
            raise ModelLoadError(f"chattts: {root} did not load (a file failed chattts's sha256 check against the "
                                 "official weights, or a part is missing); see the ttsflow.engine.chattts log")
        # transformers 5 loads a checkpoint in its stored dtype: set the GPT's precision explicitly either way
        # (Embed, DVAE, Decoder and Vocos are fp32 modules that load_state_dict casts into).
        chat.gpt.gpt.to(torch.float16 if prec == "fp16" else torch.float32)

        hidden = int(chat.config.gpt.hidden_size)
        spk = self._speaker(chat, speaker, seed, hidden)
        self._chat = chat
        self._torch = torch
        self._device = dev
        self._spk = spk
        self._seed = int(seed)
        self._params = dict(max_new_token=int(max_new_token), min_new_token=int(min_new_token),
                            temperature=float(temperature), top_P=float(top_p), top_K=int(top_k))
        self._samples_per_token = 2 * int(chat.config.vocos.head.init_args.hop_length)
        self._tok = chat.tokenizer._tokenizer
        self.asset_root = root
        self.generate_calls = 0  # padded GPT.generate calls made (one per infer)
        gen_digest = hashlib.sha256(json.dumps([spk, self._seed, self._params], sort_keys=True).encode()).hexdigest()
        self.info = ModelInfo(name="chattts", version=version or f"{chattts_version()}-{assets[:10]}-{gen_digest[:8]}",
                              precision=prec, provider=dev.type)

    @staticmethod
    def _speaker(chat: Any, speaker: str, seed: int, hidden: int) -> str:
        """The speaker embedding string: given, read from a file, or drawn once with ``seed``."""
        import torch

        s = (speaker or "").strip()
        if s and len(s) < 4096:
            p = Path(s).expanduser()
            try:
                if p.is_file():
                    s = p.read_text(encoding="utf-8").strip()
            except OSError:
                pass
        if not s:
            g = torch.Generator(device="cpu").manual_seed(int(seed))
            std = chat.speaker.std.detach().to("cpu", torch.float32)
            mean = chat.speaker.mean.detach().to("cpu", torch.float32)
            emb = torch.randn(hidden, generator=g, dtype=torch.float32) * std + mean
            return str(chat.speaker._encode(emb))
        try:
            vec = chat.speaker._decode(s)
        except Exception as e:  # lzma / base16384 errors on a mangled string
            raise ModelLoadError(f"chattts: TTS_CHATTTS_SPEAKER is not a ChatTTS speaker string ({e})") from e
        if vec.shape != (hidden,) or not np.all(np.isfinite(vec)):
            raise ModelLoadError(f"chattts: speaker embedding has {vec.size} values, the model needs {hidden}")
        return s

    # -- 1. front end ---------------------------------------------------------------
    def prepare(self, item: SynthItem) -> Prepared:
        if item.voice and item.voice != VOICE:
            raise UnknownVoice(f"unknown voice {item.voice!r} for chattts; available: {VOICE}")
        if not item.text.strip():
            raise ItemError("empty text")
        if not (item.speed > 0 and math.isfinite(item.speed)):
            raise ItemError(f"speed must be a positive number, not {item.speed}")
        try:
            norm = self._chat.normalizer
            text = _spell_numbers(item.text, norm._detect_language(item.text))
            text = norm(" ".join(text.split()), True, True, None).strip()
        except Exception as e:  # third-party normalizer (numba); its failure is this item's
            raise ItemError(f"chattts text normalizer failed: {type(e).__name__}: {e}") from e
        # Control tags ChatTTS uses to build its prompt would let text override the speaker.
        for tag in ("[Stts]", "[Ptts]", "[spk_emb]", "[empty_spk]"):
            text = text.replace(tag, "")
        tokens = [t for t in self._tok.tokenize(text) if t != self._tok.unk_token]
        if not tokens:
            raise ItemError("nothing speakable in the text for chattts")
        level = min(9, max(0, round(5 * item.speed)))  # ChatTTS speaks speed_0..speed_9, speed_5 is normal
        return Prepared(item=item, payload=f"[speed_{level}]{text}", length=len(tokens))

    # -- 2. model -------------------------------------------------------------------
    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        if not batch:
            return []
        chat, torch = self._chat, self._torch
        params = chat.InferCodeParams(prompt="", spk_emb=self._spk, manual_seed=self._seed, show_tqdm=False,
                                      ensure_non_empty=False, **self._params)
        texts = [p.payload for p in batch]  # _infer_code rewrites the list in place: a fresh one
        try:
            with torch.inference_mode():
                chat.context.set(False)
                result = next(chat._infer_code(texts, False, self._device, True, params))  # ONE padded generate
                self.generate_calls += 1
                hiddens = list(result.hiddens)
                out: list[Any] = []
                for h in hiddens:
                    n = int(h.size(0))
                    if n == 0:
                        out.append(np.zeros(0, np.float32))
                        continue
                    wav = chat._decode_to_wavs([h], True)[0]  # this item's tokens only: no padding
                    out.append(np.asarray(wav[: n * self._samples_per_token], np.float32))
                del hiddens, result
        except Exception as e:  # torch raises RuntimeError for OOM, device and shape errors alike
            raise BackendError(f"chattts model failed: {type(e).__name__}: {e}") from e
        return out

    # -- 3. trimming ----------------------------------------------------------------
    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        wav = np.asarray(raw, np.float32).reshape(-1)
        if wav.size and not np.all(np.isfinite(wav)):
            raise ItemError("chattts produced non-finite audio for this text")
        loud = np.flatnonzero(np.abs(wav) > _QUIET)
        if loud.size == 0:
            raise ItemError("chattts produced no audio for this text (end token first)")
        wav = wav[loud[0]: loud[-1] + 1]  # edges only: quiet samples inside the utterance stay
        return np.clip(wav, -1.0, 1.0).astype(np.float32, copy=False)

    def close(self) -> None:
        chat = getattr(self, "_chat", None)
        self._chat = None
        if chat is not None and self._device.type == "cuda":
            del chat
            self._torch.cuda.empty_cache()


def chattts_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return str(version("chattts"))
    except PackageNotFoundError:
        return "unknown"


def make_tiny_assets(root: Path | str, *, seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """Write a tiny random-weight ChatTTS asset directory (same classes, small sizes); return ``root``.

    For tests and ``ttsflow bench engine --backend chattts`` without the real weights: the
    audio is noise, but every stage (tokenizer with ChatTTS's special tokens, Embed, the
    Llama GPT, speaker statistics, the DVAE decoder, Vocos) runs with chattts's own code.
    ``ttsflow-chattts.json`` records the architecture so ``ChatTTSBackend`` can build it.
    """
    _import()
    import pybase16384 as b14
    import torch
    from ChatTTS.config import Config
    from ChatTTS.model import DVAE, Embed
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import BertTokenizerFast, LlamaConfig, LlamaModel  # type: ignore[attr-defined]
    from vocos import Vocos
    from vocos.pretrained import instantiate_class

    if hidden % 8:
        raise ValueError("hidden must be a multiple of 8")
    root = Path(root)
    asset = root / "asset"
    (asset / "gpt").mkdir(parents=True, exist_ok=True)
    (asset / "tokenizer").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)

    # A WordPiece BERT tokenizer over printable ASCII plus ChatTTS's control tokens.
    special = ["[Stts]", "[Ptts]", "[spk_emb]", "[empty_spk]", "[Sbreak]", "[Pbreak]", "[Ebreak]", "[break_0]",
               "[uv_break]", "[laugh_0]", "[lbreak]"] + [f"[speed_{i}]" for i in range(10)]
    chars = [chr(c) for c in range(33, 127)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + c for c in chars)]
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    bert = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]")
    bert.add_special_tokens({"additional_special_tokens": special})
    bert.save_pretrained(str(asset / "tokenizer"))
    n_text = len(bert)

    half = hidden // 2
    std = torch.rand(hidden) * 0.5 + 0.5
    mean = torch.randn(hidden) * 0.1
    overrides: dict[str, Any] = {
        "gpt": {"hidden_size": hidden, "intermediate_size": 2 * hidden, "num_attention_heads": 4,
                "num_hidden_layers": layers, "max_position_embeddings": 4096, "num_text_tokens": n_text},
        "embed": {"hidden_size": hidden, "num_text_tokens": n_text},
        "decoder": {"idim": half, "odim": half, "hidden": 32, "n_layer": layers, "bn_dim": 16},
        "dvae": {"encoder": {"idim": 32, "odim": 64, "hidden": 32, "n_layer": layers, "bn_dim": 16},
                 "decoder": {"idim": 32, "odim": 32, "hidden": 32, "n_layer": layers, "bn_dim": 16},
                 "vq": {"dim": 64}},
        "vocos": {"backbone": {"init_args": {"dim": 32, "intermediate_dim": 64, "num_layers": layers}},
                  "head": {"init_args": {"dim": 32}}},
        # the speaker statistic (std, mean) regenerated for this hidden size
        "spk_stat": b14.encode_to_string(torch.cat([std, mean]).to(torch.float16).numpy().tobytes()),
    }
    cfg = copy.deepcopy(Config())
    _apply(cfg, overrides)

    def save(module: Any, path: Path) -> None:
        save_file({k: v.detach().contiguous() for k, v in module.state_dict().items()}, str(path))

    gpt = LlamaModel(LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4,
                                 num_key_value_heads=4, num_hidden_layers=layers, max_position_embeddings=4096,
                                 vocab_size=8))
    gpt.save_pretrained(str(asset / "gpt"), safe_serialization=True)
    save(Embed(hidden, cfg.embed.num_audio_tokens, n_text, cfg.embed.num_vq), asset / "Embed.safetensors")
    save(DVAE(decoder_config=dataclasses.asdict(cfg.dvae.decoder), encoder_config=dataclasses.asdict(cfg.dvae.encoder),
              vq_config=dataclasses.asdict(cfg.dvae.vq), dim=cfg.dvae.decoder.idim), asset / "DVAE.safetensors")
    save(DVAE(decoder_config=dataclasses.asdict(cfg.decoder), dim=cfg.decoder.idim), asset / "Decoder.safetensors")
    v = cfg.vocos
    save(Vocos(feature_extractor=instantiate_class(args=(), init=dataclasses.asdict(v.feature_extractor)),
               backbone=instantiate_class(args=(), init=dataclasses.asdict(v.backbone)),
               head=instantiate_class(args=(), init=dataclasses.asdict(v.head))), asset / "Vocos.safetensors")
    (asset / TINY_CONFIG_FILE).write_text(json.dumps(overrides, indent=1), encoding="utf-8")
    return root
