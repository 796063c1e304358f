"""Word timings through the worker: a part's words beside its audio, a request's placed, captioned and stored.

Invariants (docs/concepts/timing.md):

* **A part keeps the timings it was made with, in the same object.** A part made for a segment
  that asked for timestamps carries its words (:class:`PartWords`: the segment's text, the
  part's length and every word with its offsets in the segment and its times in the part)
  inside its WAV file, as a RIFF chunk after the samples (:func:`part_object`; WAV readers
  skip it), so one PUT stores both and the part is made only when both are in S3. Such a part
  has its own content address (:func:`streams.worker.keys.part_id` with ``words=True``); a
  cached one counts for a timed segment only if its words read back (:func:`part_words`),
  else it is made again. So a cache hit is as captioned as a miss, and a restarted worker
  reads every part's words from the part it reads for the join.
* **Placed, never estimated.** A word's character offsets map through its segment's
  :class:`~schemas.SegmentSource` (written by the stage) into the request's text as sent;
  its time moves by its part's start in the joined audio (:func:`engine.audio.part_starts`:
  the earlier parts and a 150 ms pause between each two), so the speed and the pauses are
  counted. A chunk's words keep times in the chunk's own audio (``offset_s`` says where the
  chunk starts in the request's).
* **Referenced, never inlined.** A completion points at three content-addressed objects (the
  word-timing JSON, WebVTT and SRT; their keys are their SHA-256): a two-hour request has
  ~20,000 words, far past a Kafka record. Caption lines are at most 42 characters, 2 lines
  a cue, cut at word boundaries (:mod:`engine.captions`).
* **Nothing invented.** A voice without durations (ChatTTS) answers ok audio with words
  absent and ``words_reason`` (:data:`engine.voices.NO_TIMESTAMPS_REASON`); a part whose
  words object is gone gives a reason too, never made-up times.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from engine import voices as engine_voices
from engine.audio import part_starts, read_chunk, with_chunk
from engine.captions import cues, to_srt, to_vtt
from engine.timing import Word
from schemas import MarkTime, ObjectRef, SegmentSource, WordSpan, WordTimings, encode
from storage.errors import StorageError

__all__ = ["GAP_MS", "NO_SOURCE_REASON", "WORDS_CHUNK", "PartWords", "RequestTimings", "chunk_offset", "chunk_words",
           "decode_part_words", "encode_part_words", "no_words_reason", "part_object", "part_words", "part_words_key",
           "placed_words", "request_timings", "shown_text", "start_timing_objects", "store_request_timings",
           "timing_objects", "upload_timing_objects", "voice_times"]

GAP_MS = 150.0  # the pause the join puts between two parts (engine.audio.join's default)
# why a timed request's segments carry no source: a stage before 2026-12-02 (session 10) mapped plain
# text only; a stage since maps SSML and lexicons too (engine.spoken), all but a voice map's lexicon aliases
NO_SOURCE_REASON = "word timings of text a lexicon rewrote under a per-language voice map are not offered"
_JSON = "application/json"
WORDS_CHUNK = b"wrds"  # the RIFF chunk of a part's WAV that holds its words (PartWords as JSON)


class PartWords(msgspec.Struct, frozen=True, kw_only=True):
    """A part's words object in S3: segment-relative (offsets into ``text``, times in the part)."""

    text: str
    samples: int
    sample_rate: int
    words: list[WordSpan]


_part_decoder = msgspec.json.Decoder(PartWords)


@dataclass(frozen=True, slots=True)
class RequestTimings:
    """What a completion says about its words (the objects, or why there are none) and its marks."""

    words: ObjectRef | None = None
    captions: dict[str, ObjectRef] | None = None
    count: int | None = None
    reason: str | None = None
    marks: list[MarkTime] | None = None  # its SSML marks in the joined audio (streams.worker.marks)


def part_object(wav: bytes, words: PartWords) -> bytes:
    """A part's stored object: its WAV with its words in a RIFF chunk after the samples."""
    return with_chunk(wav, WORDS_CHUNK, msgspec.json.encode(words))


def part_words(data: bytes) -> PartWords | None:
    """The words a part's object carries, or None (made without them, or unreadable)."""
    payload = read_chunk(data, WORDS_CHUNK)
    return decode_part_words(payload) if payload is not None else None


def part_words_key(audio_key: str) -> str:
    """Where a worker before 2026-12-02 (session 9) stored a part's words: a JSON object beside its
    audio (``.../<id>.wav`` -> ``.../<id>.json``). Read only, as a fallback for a request one of
    those workers started."""
    stem, dot, _ext = audio_key.rpartition(".")
    return (stem if dot else audio_key) + ".json"


def _span(w: Word) -> WordSpan:
    return WordSpan(word=w.text, start=w.start, end=w.end, start_s=w.start_s, end_s=w.end_s,
                    chars=[_span(c) for c in w.chars] or None)


def encode_part_words(text: str, words: Sequence[Word], samples: int, sample_rate: int) -> PartWords:
    return PartWords(text=text, samples=int(samples), sample_rate=int(sample_rate), words=[_span(w) for w in words])


def decode_part_words(data: bytes) -> PartWords | None:
    """A part's words object, or None if it does not read (an object from another version)."""
    try:
        return _part_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def no_words_reason(voice: str, engine_times: bool = True) -> str:
    """Why a segment asking for timestamps got no words from ``voice``."""
    info = engine_voices.voice_info(voice)
    if (info is not None and not info.timestamps) or (info is None and not engine_times):
        return engine_voices.NO_TIMESTAMPS_REASON
    return "the voice returned no word durations for this text"


def voice_times(voice: str, engine_times: bool) -> bool:
    """Whether ``voice`` times its words (the voice registry; the engine's word for unknown voices)."""
    info = engine_voices.voice_info(voice)
    return info.timestamps if info is not None else engine_times


def _moved(w: WordSpan, source: SegmentSource | None, seconds: float) -> WordSpan:
    if source is None:
        s, e = w.start, w.end
    else:
        s, e = source.offset(w.start), source.offset(max(w.start, w.end - 1)) + (1 if w.end > w.start else 0)
    return WordSpan(word=w.word, start=s, end=e,
                    start_s=round(w.start_s + seconds, 4) if seconds else w.start_s,
                    end_s=round(w.end_s + seconds, 4) if seconds else w.end_s,
                    chars=None if w.chars is None else [_moved(c, source, seconds) for c in w.chars])


def chunk_words(part: PartWords, source: SegmentSource | None) -> list[WordSpan]:
    """A chunk's words: times in the chunk's audio, offsets into the request's text."""
    return [w for w, _, _ in placed_words(part, source, 0.0)]


def _written(text: str, a: int, b: int, groups: Sequence[tuple[int, int, int, int, str]]) -> tuple[str, int]:
    """Segment characters ``a..b`` as written (each group's stretch replaced by its text), and how
    much longer that is than ``b - a``."""
    out: list[str] = []
    at = a
    for i, j, _s, _e, t in groups:
        if j <= a or i >= b:
            continue
        out.append(text[at:max(at, i)])
        out.append(t)
        at = max(at, j)
    out.append(text[at:b] if at < b else "")
    w = "".join(out)
    return w, len(w) - (b - a)


def placed_words(part: PartWords, source: SegmentSource | None, seconds: float) -> list[tuple[WordSpan, int, int]]:
    """A part's words moved into the request (offsets through ``source``, times by ``seconds``), each
    with its ``[start, end)`` in the part's text as written (:func:`shown_text`). The words of a
    stretch read otherwise than written (``source.groups``: ``<sub alias>``, ``say-as``, a
    ``phoneme``, a lexicon's entry) are one word: the written text, its offsets, from its first
    spoken word's start to its last's end (a word glued to the stretch, ``WWW's``, joins it)."""
    groups = sorted(source.groups) if source is not None and source.groups else []
    if not groups:
        return [(_moved(w, source, seconds), w.start, w.end) for w in part.words]
    assert source is not None
    ends = [g[1] for g in groups]
    out: list[tuple[WordSpan, int, int]] = []
    run: list[Any] = []  # [a, b, first group, last group, start_s, end_s]

    def shift(k: int) -> int:  # where segment offset k (not inside a group) is in the written text
        return k + sum(len(g[4]) - (g[1] - g[0]) for g in groups if g[1] <= k)

    def close() -> None:
        a, b, g0, g1, t0, t1 = run
        gs = groups[g0:g1 + 1]
        word, _ = _written(part.text, a, b, gs)
        start = min(gs[0][2], source.offset(a)) if a < gs[0][0] else gs[0][2]
        end = max(gs[-1][3], source.offset(b - 1) + 1) if b > gs[-1][1] else gs[-1][3]
        sa = shift(a) if a < gs[0][0] else shift(gs[0][0])
        out.append((WordSpan(word=word, start=start, end=max(start, end), start_s=round(t0 + seconds, 4),
                             end_s=round(t1 + seconds, 4)), sa, sa + len(word)))
        run.clear()

    for w in part.words:
        g0 = bisect.bisect_right(ends, w.start)  # the first group that ends after the word starts
        hit: list[int] = []  # the groups the word overlaps
        while g0 < len(groups) and groups[g0][0] < max(w.end, w.start + 1):
            hit.append(g0)
            g0 += 1
        if not hit:
            if run:
                close()
            out.append((_moved(w, source, seconds), shift(w.start), shift(w.end)))
            continue
        if run and hit[0] <= run[3]:  # the same stretch (or one glued to it): one word
            run[1], run[3], run[5] = max(run[1], w.end), max(run[3], hit[-1]), max(run[5], w.end_s)
            continue
        if run:
            close()
        run.extend([min(w.start, groups[hit[0]][0]), max(w.end, groups[hit[-1]][1]), hit[0], hit[-1],
                    w.start_s, w.end_s])
    if run:
        close()
    return out


def shown_text(part: PartWords, source: SegmentSource | None) -> str:
    """A part's text as written: each stretch read otherwise (``source.groups``) as its written text."""
    if source is None or not source.groups:
        return part.text
    return _written(part.text, 0, len(part.text), sorted(source.groups))[0]


def chunk_offset(durations: Mapping[int, float], seq: int, sample_rate: int) -> float | None:
    """Where part ``seq`` starts in the joined audio, from the earlier parts' durations (None when
    one of them is not known here: a worker that restarted mid-request)."""
    if any(k not in durations for k in range(seq)):
        return None
    lengths = [round(durations[k] * sample_rate) for k in range(seq)] + [0]
    return round(part_starts(lengths, sample_rate, GAP_MS)[seq], 4)


class _Timed:
    """A word in the request's normalized text (what the caption lines show), timed in the request."""

    __slots__ = ("end", "end_s", "start", "start_s")

    def __init__(self, start: int, end: int, start_s: float, end_s: float) -> None:
        self.start, self.end, self.start_s, self.end_s = start, end, start_s, end_s


def request_timings(parts: Sequence[PartWords], sources: Sequence[SegmentSource | None],
                    duration_s: float) -> tuple[WordTimings, str, str]:
    """Every part's words placed in the request (its word-timing object) and its captions (WebVTT,
    SRT). Caption lines show the text as the voice read it (the segments, joined by a space), a
    stretch read otherwise than written (SSML ``sub``, ``say-as``, a lexicon's alias) as written."""
    starts = part_starts([p.samples for p in parts], parts[0].sample_rate if parts else 24000, GAP_MS)
    words: list[WordSpan] = []
    timed: list[_Timed] = []
    shown: list[str] = []
    at = 0
    for p, src, t0 in zip(parts, sources, starts, strict=True):
        for w, a, b in placed_words(p, src, t0):
            if words and src is not None and src.groups and (w.start, w.end) == (words[-1].start, words[-1].end) \
                    and w.start < w.end and w.word == words[-1].word:  # one stretch cut into two segments
                words[-1] = msgspec.structs.replace(words[-1], end_s=max(words[-1].end_s, w.end_s))
                timed[-1].end_s = words[-1].end_s
                continue
            words.append(w)
            timed.append(_Timed(at + a, at + b, w.start_s, w.end_s))
        text = shown_text(p, src)
        shown.append(text)
        at += len(text) + 1
    text = " ".join(shown)
    cs = cues(text, timed)
    return WordTimings(duration_s=duration_s, words=words), to_vtt(cs), to_srt(cs)


def timing_objects(store: Any, parts: Sequence[PartWords], sources: Sequence[SegmentSource | None],
                   duration_s: float) -> tuple[list[tuple[str, bytes, str, str, str]], int]:
    """A request's word-timing object and captions, built (no S3 call): ``(name, data, content type,
    key, SHA-256)`` of each (content-addressed: a key is its bytes' SHA-256) and the number of words."""
    doc, vtt, srt = request_timings(parts, sources, duration_s)
    objects = []
    for name, data, ctype in (("words", encode(doc), _JSON), ("vtt", vtt.encode(), "text/vtt; charset=utf-8"),
                              ("srt", srt.encode(), "application/x-subrip; charset=utf-8")):
        sha = hashlib.sha256(data).hexdigest()
        objects.append((name, data, ctype, store.key("words" if name == "words" else "captions", sha,
                                                     "json" if name == "words" else name), sha))
    return objects, len(doc.words)


def upload_timing_objects(store: Any, objects: Sequence[tuple[str, bytes, str, str, str]], count: int) -> RequestTimings:
    """PUT the objects of :func:`timing_objects` (at once where the store can) and name them; returns
    once S3 acknowledged every one. S3 errors are raised."""
    return start_timing_objects(store, objects, count)()


def start_timing_objects(store: Any, objects: Sequence[tuple[str, bytes, str, str, str]],
                         count: int) -> Callable[[], RequestTimings]:
    """The PUTs of :func:`timing_objects` sent now (``storage.s3.AudioStore.start_many``; a store that
    cannot start them makes them now, one after the other); the returned call waits for S3's
    acknowledgements and names the objects. S3 errors are raised by that call, which the caller
    must make, also on its own error path (it ends the connections)."""
    start = getattr(store, "start_many", None)
    if start is not None:
        pending = start([(key, data, ctype) for _, data, ctype, key, _ in objects], [sha for *_, sha in objects])
        return lambda: _named(store, objects, pending.wait(), count)
    try:
        digests = [store.put(key, data, ctype) for _, data, ctype, key, _ in objects]
    except StorageError as e:
        failed = e

        def fail() -> RequestTimings:
            raise failed

        return fail
    return lambda: _named(store, objects, digests, count)


def _named(store: Any, objects: Sequence[tuple[str, bytes, str, str, str]], digests: Sequence[str],
           count: int) -> RequestTimings:
    refs: dict[str, ObjectRef] = {}
    for (name, data, ctype, key, _), sha in zip(objects, digests, strict=True):
        url = store.presigned_url(key) if getattr(store, "presign_ttl_s", 0) else None
        refs[name] = ObjectRef(uri=store.uri(key), bucket=store.bucket, key=key, content_type=ctype,
                               bytes=len(data), sha256=sha, url=url)
    return RequestTimings(words=refs["words"], captions={"vtt": refs["vtt"], "srt": refs["srt"]}, count=count)


def store_request_timings(store: Any, parts: Sequence[PartWords], sources: Sequence[SegmentSource | None],
                          duration_s: float) -> RequestTimings:
    """Build and upload a request's word-timing object and captions (content-addressed: a key is
    its bytes' SHA-256, so a redone request writes the same objects). S3 errors are raised."""
    return upload_timing_objects(store, *timing_objects(store, parts, sources, duration_s))
