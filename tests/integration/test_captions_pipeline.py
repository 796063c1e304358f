# ruff: noqa: RUF001 - full-width letters are the subject here
"""Word timings through the real pipeline (stage, worker, S3, Redis; hibari): ``"timestamps": true``.

One stage and one worker for the module (hibari, segments of at most 64 characters so short
texts make several). Checked: every written word is timed, in order, inside the audio, its
offsets pointing at the text as sent (through normalization and splitting); a chunk's words
are the completion's, moved by the chunk's ``offset_s``; the captions keep to 2 lines of 42
characters; a cached part answers with the timings it was made with, and a part made without
them is made again with them; a 3,000-character request (about 60 segments) keeps its times
right to its end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from engine import decode
from engine.timing import words_of
from schemas import Chunk, Completion, WordSpan
from streams.bench.align import voiced_end_s
from streams.bench.corpus import ASR_SENTENCES
from streams.bench.harness import isolated
from streams.client import TTSClient
from streams.devstack.procs import Supervisor
from streams.devstack.stack import ensure_topics
from streams.settings import Settings
from streams.stage.text import normalize, split_segments
from tests.integration.conftest import TEST_PARTITIONS, _cleanup
from tests.support.stack import require_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Ｈｅｌｌｏ  there… On 3/4, 42 people paid $9.99 each. The third sentence ends the request."
MAX_SEGMENT = 64


@dataclass
class Rig:
    settings: Settings
    client: TTSClient


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    unique = f"cap-{uuid.uuid4().hex[:8]}"
    s = isolated(require_stack(), unique).replace(partitions=TEST_PARTITIONS, max_segment_chars=MAX_SEGMENT)
    ensure_topics(s, partitions=TEST_PARTITIONS)
    try:
        with Supervisor(tmp_path_factory.mktemp("cap-logs")) as sup:
            sup.stage("stage", s)
            sup.worker("worker", s)
            sup.wait_ready("stage", timeout=240)
            sup.wait_ready("worker", timeout=300)
            with TTSClient(s) as client:
                yield Rig(s, client)
            sup.check_alive()
    finally:
        _cleanup(s, unique)


def _expected_spans(text: str) -> int:
    """How many words the stage's segments of ``text`` hold (what the worker times)."""
    return sum(len(words_of(seg)) for seg in split_segments(normalize(text), MAX_SEGMENT))


def _check_words(text: str, words: list[WordSpan], duration_s: float) -> None:
    assert len(words) == _expected_spans(text)
    starts = [w.start_s for w in words]
    assert starts == sorted(starts), "starts never decrease"
    assert all(0 <= w.start_s <= w.end_s <= duration_s + 1e-3 for w in words), "inside the audio"
    offsets = [w.start for w in words]
    assert offsets == sorted(offsets) and all(w.start < w.end <= len(text) for w in words)
    # each word points at what the user wrote: the stage's normalization of that stretch is the word read
    assert all(normalize(text[w.start:w.end]).replace(" ", "") == w.word.replace(" ", "") for w in words), \
        [(text[w.start:w.end], w.word) for w in words]


@pytest.mark.timeout(900)
def test_chunks_and_completion_carry_the_same_words_and_a_cache_hit_keeps_them(rig: Rig) -> None:
    client = rig.client
    seen = list(client.stream(TEXT, "alice", timeout=300, timestamps=True))
    c = seen[-1]
    assert isinstance(c, Completion) and c.status == "ok" and c.segments >= 3
    chunks = [x for x in seen if isinstance(x, Chunk)]
    assert c.audio is not None and c.words is not None and c.captions is not None and c.words_reason is None
    words = client.words(c)
    assert c.words_count == len(words)
    _check_words(TEXT, words, c.audio.duration_s)
    assert TEXT[words[0].start:words[0].end] == "Ｈｅｌｌｏ" and words[0].word == "Hello"
    assert [TEXT[w.start:w.end] for w in words if w.word in ("42", "$9.99", "3/4")] == ["3/4", "42", "$9.99"]

    # a chunk's words are the completion's: same offsets, times moved by where the chunk starts
    flat = [(ch, w) for ch in chunks for w in ch.words or []]
    assert len(flat) == len(words) and all(ch.words is not None for ch in chunks)
    for (ch, cw), w in zip(flat, words, strict=True):
        assert ch.offset_s is not None and (cw.start, cw.end, cw.word) == (w.start, w.end, w.word)
        assert abs(ch.offset_s + cw.start_s - w.start_s) < 0.002 and 0 <= cw.start_s <= ch.audio.duration_s
    assert chunks[0].offset_s == 0.0

    for fmt in ("vtt", "srt"):
        cap = client.captions(c, fmt)
        assert cap.startswith("WEBVTT\n\n") if fmt == "vtt" else cap.startswith("1\n00:00:")
        blocks = [b.splitlines() for b in cap.strip().split("\n\n")[1 if fmt == "vtt" else 0:]]
        text_lines = [ln for b in blocks for ln in b[(1 if fmt == "vtt" else 2):]]
        assert all(len(b) <= (3 if fmt == "vtt" else 4) for b in blocks) and all(len(ln) <= 42 for ln in text_lines)
        assert "Hello there..." in " ".join(text_lines)

    # the same text again: every part from the cache, with the timings it was made with
    again = client.wait(client.submit(TEXT, "alice", timestamps=True), 300)
    assert again.cached_segments == again.segments == c.segments
    assert client.words(again) == words and again.words == c.words

    # a part made without timings is made again with them (same audio, same key), never a word-less hit
    plain = f"Sentence {uuid.uuid4().int % 10**6} is first spoken without timings, then with them."  # new audio
    first = client.wait(client.submit(plain, "bob"), 300)
    assert first.words is None and first.words_reason is None
    timed = client.wait(client.submit(plain, "bob", timestamps=True), 300)
    assert timed.cached_segments == 0 and timed.audio is not None and first.audio is not None
    assert timed.audio.sha256 == first.audio.sha256
    _check_words(plain, client.words(timed), timed.audio.duration_s)


def _sentences(chars: int) -> str:
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < chars:
        out.append(ASR_SENTENCES[len(out) % len(ASR_SENTENCES)])
    return " ".join(out)


@pytest.mark.timeout(1200)
def test_a_3000_character_request_keeps_its_times_to_the_end(rig: Rig) -> None:
    text = _sentences(3000)
    c = rig.client.wait(rig.client.submit(text, "carol", timestamps=True), 900)
    assert c.audio is not None and c.segments >= 40
    words = rig.client.words(c)
    assert [(w.start, w.end) for w in words] == words_of(text)
    _check_words(text, words, c.audio.duration_s)
    samples, sr = decode(rig.client.fetch(c))
    # ~60 parts, 150 ms between each two: an error in any part's start would move the last word
    assert abs(words[-1].end_s - voiced_end_s(samples, sr)) < 0.1, (words[-1], voiced_end_s(samples, sr))
    assert c.words is not None
    print(f"\n3000 chars: {c.segments} segments, {len(words)} words, {c.audio.duration_s:.1f} s of audio, "
          f"word-timing object {c.words.bytes} bytes")
