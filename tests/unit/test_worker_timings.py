# ruff: noqa: RUF001 - full-width letters are the subject here
"""Word timings through the worker, the pure parts: where a segment came from, words placed in the
request, chunk offsets, the completion's references, and the answer for a voice without durations."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.audio import decode, encode, part_starts
from engine.timing import Word, segment_sources
from engine.voices import NO_TIMESTAMPS_REASON
from schemas import ErrorInfo, SegmentSource, decode_segment, decode_word_timings
from storage.s3 import content_key
from streams.settings import Settings
from streams.stage.core import StageCore
from streams.stage.text import normalize, split_segments
from streams.worker.joiner import Joiner
from streams.worker.ledger import Part
from streams.worker.timings import (
    GAP_MS,
    chunk_offset,
    chunk_words,
    encode_part_words,
    part_object,
    part_words,
    part_words_key,
    request_timings,
)
from tests.support.memstore import MemStore

SR = 24000


def _maps_back(original: str, normalized_char: str, source_char: str) -> bool:
    return normalized_char in unicodedata.normalize("NFKC", source_char) or \
        (normalized_char.isspace() and source_char.isspace())


@pytest.mark.parametrize("text", [
    "Ｈｅｌｌｏ  there… On 3/4,\n\n42 people paid $9.99 each.",
    "The\u200b answer   is 42. Next one…",
    "plain ascii text. Two sentences.",
])
def test_every_character_of_a_segment_maps_to_the_character_it_came_from(text: str) -> None:
    norm = normalize(text)
    segs = split_segments(norm, 16)
    for seg, (start, bps) in zip(segs, segment_sources(text, norm, segs), strict=True):
        src = SegmentSource(start=start, map=bps or None)
        for k, ch in enumerate(seg):
            assert _maps_back(text, ch, text[src.offset(k)]), (seg, k, ch, text[src.offset(k)])
        assert [src.offset(k) for k in range(len(seg))] == sorted(src.offset(k) for k in range(len(seg)))


def test_a_verbatim_segment_carries_no_breakpoints() -> None:
    text = "Plain text. Nothing changes here."
    norm = normalize(text)
    assert [m for _, m in segment_sources(text, norm, split_segments(norm, 16))] == [[], [], []]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["Ｈｅｌｌｏ", "word", "…", "  ", " ", "\u200b", "42", ".", ",", "\n", "ｗｏｒｌｄ!"]),
                min_size=1, max_size=30))
def test_offsets_always_point_at_a_source_character_that_holds_the_normalized_one(pieces: list[str]) -> None:
    text = "".join(pieces)
    norm = normalize(text)
    segs = split_segments(norm, 12)
    for seg, (start, bps) in zip(segs, segment_sources(text, norm, segs), strict=True):
        src = SegmentSource(start=start, map=bps or None)
        assert all(_maps_back(text, ch, text[src.offset(k)]) for k, ch in enumerate(seg))


def _part(text: str, spans: list[tuple[int, int, float, float]], samples: int) -> Any:
    return encode_part_words(text, [Word(text[s:e], s, e, a, b) for s, e, a, b in spans], samples, SR)


def test_words_are_placed_at_their_parts_start_and_their_source_offsets() -> None:
    text = "Ｈｅｌｌｏ there.  Second part here."
    norm = normalize(text)
    segs = split_segments(norm, 14)
    assert segs == ["Hello there.", "Second part", "here."]
    sources = [SegmentSource(start=a, map=m or None) for a, m in segment_sources(text, norm, segs)]
    parts = [_part(segs[0], [(0, 5, 0.1, 0.4), (6, 11, 0.5, 0.9)], SR),
             _part(segs[1], [(0, 6, 0.05, 0.3), (7, 11, 0.35, 0.6)], SR // 2),
             _part(segs[2], [(0, 4, 0.0, 0.2)], SR // 4)]
    doc, vtt, srt = request_timings(parts, sources, 2.0)
    starts = part_starts([SR, SR // 2, SR // 4], SR, GAP_MS)
    assert starts[1] == pytest.approx(1.15) and starts[2] == pytest.approx(1.8)
    assert [(text[w.start:w.end], w.word) for w in doc.words] == [
        ("Ｈｅｌｌｏ", "Hello"), ("there", "there"), ("Second", "Second"), ("part", "part"), ("here", "here")]
    assert [w.start_s for w in doc.words] == pytest.approx([0.1, 0.5, 1.2, 1.5, 1.8])
    assert [w.end_s for w in doc.words] == pytest.approx([0.4, 0.9, 1.45, 1.75, 2.0])
    assert vtt.startswith("WEBVTT\n\n00:00:00.100 --> ") and "Hello there." in vtt
    assert srt.startswith("1\n00:00:00,100 --> ")
    # a chunk's words: the same offsets, times in its own audio
    cw = chunk_words(parts[1], sources[1])
    assert [(w.start, w.end) for w in cw] == [(w.start, w.end) for w in doc.words[2:4]]
    assert [w.start_s for w in cw] == pytest.approx([w.start_s - starts[1] for w in doc.words[2:4]])


def test_a_chunk_offset_needs_every_earlier_part() -> None:
    assert chunk_offset({}, 0, SR) == 0.0
    assert chunk_offset({0: 1.0, 1: 0.5}, 2, SR) == pytest.approx(1.0 + 0.5 + 2 * GAP_MS / 1000)
    assert chunk_offset({0: 1.0}, 2, SR) is None  # a worker that restarted mid-request: unknown, not guessed


def _last(voice: str, total: int) -> Any:
    body = {"request_id": "r", "user_id": "u", "seq": total - 1, "total": total, "text": "Hello there.",
            "hash": "a" * 64, "request_hash": "b" * 64, "voice": voice, "timestamps": True,
            "source": {"start": 0}, "sources": [{"start": 13 * k} for k in range(total)]}
    return decode_segment(json.dumps(body))


def test_the_request_words_and_captions_are_stored_content_addressed_and_referenced() -> None:
    store = MemStore()
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        pw0 = _part("Hello there.", [(0, 5, 0.1, 0.4), (6, 11, 0.5, 0.9)], SR)
        pw1 = _part("Hello there.", [(0, 5, 0.0, 0.3), (6, 11, 0.4, 0.8)], SR)
        # part 1 is read back from S3: its words ride in its WAV (a RIFF chunk that readers skip)
        audio_key = content_key("", "part", "c" * 64, "wav")
        wav = encode(np.zeros(SR, np.float32), SR)
        store.put(audio_key, part_object(wav, pw1))
        assert decode(store.objects[audio_key])[0].shape == (SR,) and part_words(wav) is None
        parts = {0: Part("k0", None, cached=False, words=pw0), 1: Part(audio_key, None, cached=True)}
        t = joiner._timings(["d" * 64, "e" * 64], parts, ["id"], _last("heart", 2), 2.15)
        # a part an older worker made: plain WAV, its words in a JSON object beside it
        old_key = content_key("", "part", "f" * 64, "wav")
        store.put(old_key, wav)
        store.put(part_words_key(old_key), json.dumps({"text": pw1.text, "samples": pw1.samples,
                                                       "sample_rate": SR, "words": [
                                                           {"word": w.word, "start": w.start, "end": w.end,
                                                            "start_s": w.start_s, "end_s": w.end_s}
                                                           for w in pw1.words]}).encode())
        old = joiner._timings(["d" * 64, "e" * 64], {**parts, 1: Part(old_key, None, cached=True)}, ["id"],
                              _last("heart", 2), 2.15)
        assert old.words == t.words
    assert t.reason is None and t.count == 4 and t.words is not None and t.captions is not None
    data = store.objects[t.words.key]
    assert t.words.key == content_key("", "words", hashlib.sha256(data).hexdigest(), "json")
    assert t.words.sha256 == hashlib.sha256(data).hexdigest() and t.words.bytes == len(data)
    doc = decode_word_timings(data)
    assert [(w.start, w.end) for w in doc.words] == [(0, 5), (6, 11), (13, 18), (19, 24)]
    assert [w.start_s for w in doc.words] == pytest.approx([0.1, 0.5, 1.15, 1.55])
    assert store.objects[t.captions["vtt"].key].startswith(b"WEBVTT")
    assert set(t.captions) == {"vtt", "srt"}


def test_a_restarted_worker_reads_every_part_and_its_words_in_one_get() -> None:
    from streams.worker.joiner import JoinSpec
    from streams.worker.keys import part_id

    store = MemStore()
    pw0 = _part("Hello there.", [(0, 5, 0.1, 0.4), (6, 11, 0.5, 0.9)], SR)
    pw1 = _part("Hello there.", [(0, 5, 0.0, 0.3), (6, 11, 0.4, 0.8)], SR)
    hashes = ["d" * 64, "e" * 64]
    # part 0 was made before the restart: only its object in S3 (under the timed address) knows its words
    store.put(content_key("", "part", part_id(hashes[0], "id", True), "wav"),
              part_object(encode(np.zeros(SR, np.float32), SR), pw0))
    gets: list[str] = []
    get = store.get

    def counted(key: str) -> bytes:
        gets.append(key)
        return get(key)

    store.get = counted  # type: ignore[method-assign]
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        spec = JoinSpec(key=content_key("", "req", "a" * 64, "wav"), fmt="wav", sr_in=SR, sr_out=SR, max_audio_s=60)
        audio, t = joiner._join_all(spec, hashes, {1: Part("k1", np.zeros(SR, np.float32), cached=False, words=pw1)},
                                    ["id"], _last("heart", 2))
    assert not isinstance(audio, ErrorInfo) and audio.duration_s == pytest.approx(2.15)
    assert t is not None and t.reason is None and t.count == 4 and t.words is not None
    assert [w.start_s for w in decode_word_timings(store.objects[t.words.key]).words] == \
        pytest.approx([0.1, 0.5, 1.15, 1.55])
    assert len(gets) == 1  # the part's audio and its words: one object, one GET


def test_a_voice_without_durations_answers_with_the_reason_and_no_words() -> None:
    store = MemStore()
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        t = joiner._timings(["d" * 64], {0: Part("k", None, cached=False)}, ["id"], _last("chattts", 1), 1.0)
        assert t.words is None and t.reason == NO_TIMESTAMPS_REASON and not store.objects
        # a timing voice whose part words are gone: a reason too, never invented times
        gone = joiner._timings(["d" * 64], {0: Part("k.wav", None, cached=True)}, ["id"], _last("heart", 1), 1.0)
        assert gone.words is None and gone.reason is not None and "segment 0" in gone.reason


def test_the_stage_says_where_each_segment_came_from_only_when_asked() -> None:
    s = Settings().replace(max_segment_chars=16)
    core = StageCore(s.stage, s.kafka, s.engine, voices=("heart",), clock=lambda: 1e9)
    text = "Ｈｅｌｌｏ  there… Second sentence here."

    def segments(**extra: Any) -> list[Any]:
        body = json.dumps({"request_id": "r", "user_id": "u", "text": text, **extra}).encode()
        out = core.handle(b"u", body, partition=0, offset=0, timestamp_ms=None, seen={})
        return [decode_segment(r.value) for r in out.records]

    plain = segments()
    assert all(x.source is None and x.sources is None and not x.timestamps for x in plain)
    timed = segments(timestamps=True)
    assert all(x.timestamps and x.source is not None for x in timed)
    assert timed[-1].sources == [x.source for x in timed] and all(x.sources is None for x in timed[:-1])
    assert [x.hash for x in timed] == [x.hash for x in plain]  # the same audio: timings do not change the key
    for x in timed:
        assert x.source is not None
        assert all(_maps_back(text, ch, text[x.source.offset(k)]) for k, ch in enumerate(x.text))


def test_offsets_skip_the_foreign_words_the_stage_drops() -> None:
    from streams.stage.core import backend_voices

    s = Settings().replace(max_segment_chars=40)
    core = StageCore(s.stage, s.kafka, s.engine, voices=backend_voices("hibari"), clock=lambda: 1e9)
    text = "Hello 你好 world, this is a fairly long English sentence with many words in it."
    out = core.handle(b"u", json.dumps({"request_id": "r", "user_id": "u", "text": text, "timestamps": True}).encode(),
                      partition=0, offset=0, timestamp_ms=None, seen={})
    first = decode_segment(out.records[0].value)
    assert first.text == "Hello world," and first.source is not None
    assert "".join(text[first.source.offset(k)] for k in range(len(first.text))) == "Hello world,"
    assert first.source.offset(first.text.index("world")) == text.index("world")


def _in_memory_parts() -> tuple[list[str], dict[int, Part]]:
    pw0 = _part("Hello there.", [(0, 5, 0.1, 0.4), (6, 11, 0.5, 0.9)], SR)
    pw1 = _part("Hello there.", [(0, 5, 0.0, 0.3), (6, 11, 0.4, 0.8)], SR)
    return ["d" * 64, "e" * 64], {0: Part("k0", np.zeros(SR, np.float32), cached=False, words=pw0),
                                  1: Part("k1", np.zeros(SR, np.float32), cached=False, words=pw1)}


def test_captions_of_parts_in_memory_are_put_beside_the_join_and_are_the_same_objects() -> None:
    import threading

    from streams.worker.joiner import JoinSpec

    hashes, parts = _in_memory_parts()
    store = MemStore()
    words_put = threading.Event()
    put = store.put

    def put_(key: str, data: bytes, content_type: str = "") -> str:
        if "/words/" in f"/{key}":
            words_put.set()
        return put(key, data, content_type)

    def put_file(key: str, f: Any, content_type: str = "", *, metadata: Any = None) -> tuple[str, int]:
        # the audio's PUT waits for the words object's: they run at the same time, not one after the other
        assert words_put.wait(10), "the word-timing object was not PUT beside the join"
        f.seek(0)
        data = f.read()
        return put(key, data), len(data)

    store.put = put_  # type: ignore[method-assign]
    store.put_file = put_file  # type: ignore[method-assign]
    spec = JoinSpec(key=content_key("", "req", "a" * 64, "wav"), fmt="wav", sr_in=SR, sr_out=16000, max_audio_s=60)
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        audio, t = joiner._join_all(spec, hashes, parts, ["id"], _last("heart", 2))
        # the same objects the join makes after its audio when a part is not in memory
        after = joiner._timings(hashes, parts, ["id"], _last("heart", 2), audio.duration_s)  # type: ignore[union-attr]
    assert not isinstance(audio, ErrorInfo) and audio.duration_s == pytest.approx(2.15)
    assert t is not None and t.words is not None and t.captions is not None and t.count == 4
    assert t.words == after.words and t.captions == after.captions
    doc = decode_word_timings(store.objects[t.words.key])
    assert doc.duration_s == audio.duration_s
    assert [w.start_s for w in doc.words] == pytest.approx([0.1, 0.5, 1.15, 1.55])


def test_a_stored_request_object_of_another_length_has_its_words_timed_again() -> None:
    from streams.worker.joiner import JoinSpec

    class Stored(MemStore):
        def head(self, key: str) -> dict[str, Any] | None:  # an older worker's object: its own length
            return None if key not in self.objects else \
                {"bytes": len(self.objects[key]), "sha256": "f" * 64, "metadata": {"duration_s": "2.2"}}

    hashes, parts = _in_memory_parts()
    store = Stored()
    spec = JoinSpec(key=content_key("", "req", "a" * 64, "wav"), fmt="wav", sr_in=SR, sr_out=SR, max_audio_s=60)
    store.put(spec.key, b"old")
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        audio, t = joiner._join_all(spec, hashes, parts, ["id"], _last("heart", 2))
    assert not isinstance(audio, ErrorInfo) and audio.duration_s == 2.2
    assert t is not None and t.words is not None
    assert decode_word_timings(store.objects[t.words.key]).duration_s == 2.2  # the completion's length, not 2.15


def test_a_failed_join_answers_its_error_and_no_words_though_its_captions_were_put() -> None:
    from streams.worker.joiner import JoinSpec

    hashes, parts = _in_memory_parts()
    store = MemStore()
    spec = JoinSpec(key=content_key("", "req", "a" * 64, "mp3"), fmt="mp3", sr_in=SR, sr_out=SR, max_audio_s=60)
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        audio, t = joiner._join_all(spec, hashes, parts, ["id"], _last("heart", 2))
    assert isinstance(audio, ErrorInfo) and audio.code == "unsupported_format" and t is None
    assert any(k.startswith("words/") for k in store.objects)  # orphans, content-addressed, harmless


def test_a_join_that_raises_still_reads_its_started_caption_puts_and_raises_its_own_error() -> None:
    from storage.errors import S3Unavailable, StorageConfigError
    from streams.worker.joiner import JoinSpec

    waited: list[int] = []

    class Pending:
        def __init__(self, digests: list[str]) -> None:
            self.digests = digests

        def wait(self) -> list[str]:
            waited.append(len(self.digests))
            raise S3Unavailable("the captions' answers: the same outage")

    class Starting(MemStore):
        def start_many(self, objects: list[tuple[str, bytes, str]], digests: list[str] | None = None) -> Pending:
            return Pending(list(digests or []))

        def put_file(self, *_a: Any, **_k: Any) -> tuple[str, int]:
            raise StorageConfigError("s3 put_object: AccessDenied")

    hashes, parts = _in_memory_parts()
    store = Starting()
    spec = JoinSpec(key=content_key("", "req", "a" * 64, "wav"), fmt="wav", sr_in=SR, sr_out=SR, max_audio_s=60)
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        with pytest.raises(StorageConfigError, match="AccessDenied"):  # the join's error, not the captions'
            joiner._join_all(spec, hashes, parts, ["id"], _last("heart", 2))
    assert waited == [3]  # the three caption PUTs were started, and their answers read on the way out
