"""SSML mark times from the stage to the completion, the pure parts: the last segment lists the marked
segments, a part's marks placed in the joined audio (from memory or S3, after a restart too), a chunk's
marks in its own audio with its offset, the completion's inline list, and the cache rule (a marked
part counts as a hit only with its marks object)."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor

import msgspec
import numpy as np
import pytest

from schemas import MarkTime, Segment, Span, decode_segment
from streams.settings import Settings
from streams.stage.core import StageCore
from streams.worker.joiner import Joiner
from streams.worker.keys import part_id
from streams.worker.ledger import Part
from streams.worker.marks import GAP_MS, PartMarks, part_marks, part_marks_key, request_marks
from streams.worker.timings import RequestTimings
from tests.support.memstore import MemStore

SR = 24000
MARKED = [Span(text="Hello there."), Span(mark="a"), Span(break_ms=300), Span(text="Bye.")]


def test_the_last_segment_lists_the_segments_that_hold_marks() -> None:
    s = Settings().replace(max_segment_chars=40, dedup_window_s=100)
    core = StageCore(s.stage, s.kafka, s.engine, voices=("heart",), clock=lambda: 1e9)
    doc = ("<speak><p>First part has no mark at all.</p><p>Second one <mark name='m1'/> has one.</p>"
           "<p>Third is plain again, and long enough.</p><p>Fourth <mark name='m2'/>ends.</p></speak>")
    out = core.handle(b"u", json.dumps({"request_id": "r", "user_id": "u", "text": doc, "text_type": "ssml"}).encode(),
                      partition=0, offset=0, timestamp_ms=None, seen={})
    segs = [decode_segment(r.value) for r in out.records]
    holding = [x.seq for x in segs if any(sp.mark for sp in x.spans or ())]
    assert len(segs) >= 3 and holding and segs[-1].marked == holding
    assert all(x.marked is None for x in segs[:-1])
    plain = core.handle(b"u", json.dumps({"request_id": "p", "user_id": "u", "text": "No marks."}).encode(),
                        partition=0, offset=1, timestamp_ms=None, seen={})
    assert decode_segment(plain.records[-1].value).marked is None


def test_a_mark_is_placed_at_its_parts_start_in_the_joined_audio() -> None:
    pm = part_marks([("b", 0.5), ("late", 9.0)], SR, SR)  # a time past the part's end is its end
    assert [m.time_s for m in pm.marks] == [0.5, 1.0]
    got = request_marks([SR, SR // 2, SR], SR, {0: part_marks([("a", 0.25)], SR, SR), 2: pm})
    start2 = 1.0 + 0.5 + 2 * GAP_MS / 1000
    assert [(m.name, m.time_s) for m in got] == [("a", 0.25), ("b", pytest.approx(start2 + 0.5)),
                                                 ("late", pytest.approx(start2 + 1.0))]


def test_after_a_restart_the_marks_and_the_earlier_lengths_are_read_back_from_s3() -> None:
    store = MemStore()
    hashes = [c * 64 for c in "abc"]
    # part 0 (no marks) and part 1 (marked) were made before a restart: only their objects are left
    key0 = store.key("part", part_id(hashes[0], "id"), "wav")
    key1 = store.key("part", part_id(hashes[1], "id"), "wav")
    store.put(key0, b"\0" * (44 + 2 * SR))  # 1 s of 16-bit mono WAV
    store.put(part_marks_key(key1), msgspec.json.encode(part_marks([("m1", 0.2)], SR // 2, SR)))
    mem = part_marks([("m2", 0.1)], SR, SR)
    parts = {2: Part("k2", np.zeros(SR, np.float32), cached=False, marks=mem)}
    with ThreadPoolExecutor(1) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        got = joiner._marks(hashes, parts, ["id"], [1, 2])
    gap = GAP_MS / 1000
    assert [(m.name, m.time_s) for m in got] == [("m1", pytest.approx(1.0 + gap + 0.2)),
                                                 ("m2", pytest.approx(1.0 + gap + 0.5 + gap + 0.1))]


def test_a_chunk_carries_its_marks_in_its_own_audio_and_the_completion_in_the_request() -> None:
    from tests.unit.test_worker_core import core, made, ref

    c = core()  # (8 kHz)
    hashes = [f"m{i:063x}" for i in range(2)]
    works = []
    for i in range(2):
        seg = Segment(request_id="m", user_id="u", seq=i, total=2, text=f"part {i}", hash=hashes[i],
                      request_hash="0" * 64, voice="heart", stream=True, spans=MARKED if i else None,
                      parts=hashes if i else None, marked=[1] if i else None)
        c.ledger.consumed(0, i)
        w, _ = c.ledger.admit(0, i, seg, f"pid-m-{i}", 0.0)
        assert w is not None
        c.ledger.start_waiting(w)
        works.append(w)
    pm = part_marks([("a", 0.05)], 800, 8000)
    c.parts_done([(s, dataclasses.replace(made(s)[1], marks=pm if s.seg.seq else None), 0.05, 0.01) for s in works])
    jobs = c.to_join()
    first = c.take_commit({0})
    c.committed(first)
    c.joined([(jobs[0].req, ref("m"), RequestTimings(marks=[MarkTime(name="a", time_s=0.3)]))])
    done = c.take_commit({0})
    chunks = [msgspec.json.decode(v) for t, _, v, _ in first.records + done.records if t == "chunks"]
    assert [ch["marks"] for ch in chunks] == [None, [{"name": "a", "time_s": 0.05}]]
    assert chunks[1]["offset_s"] == 0.25 and chunks[1]["words"] is None  # 0.1 s part and the 0.15 s pause
    comp = msgspec.json.decode(next(v for t, _, v, _ in done.records if t == "completed"))
    assert comp["status"] == "ok" and comp["marks"] == [{"name": "a", "time_s": 0.3}] and comp["words"] is None


class _Cache:
    def __init__(self, key: str) -> None:
        self.key = key

    def get(self, pid: str) -> str:
        return self.key

    def delete(self, pid: str) -> None:
        raise AssertionError("the audio is there")


class _Metrics:
    def __init__(self) -> None:
        self.hits: list[bool] = []

    def cache(self, hit: bool) -> None:
        self.hits.append(hit)


def test_a_marked_part_is_a_cache_hit_only_with_its_marks_object() -> None:
    from streams.worker.ledger import Seg
    from streams.worker.parts import PartMaker

    store = MemStore()
    key = store.key("part", "f" * 64, "wav")
    store.put(key, b"\0" * (44 + 2 * SR))
    engine = type("E", (), {"sample_rate": SR, "timestamps": True})()
    metrics = _Metrics()
    maker = PartMaker.__new__(PartMaker)  # only what cached() reads
    maker.engine, maker.store, maker.cache, maker.metrics = engine, store, _Cache(key), metrics  # type: ignore[assignment]
    maker._putting = {}
    seg = Segment(request_id="r", user_id="u", seq=0, total=1, text="Hello there. Bye.", hash="e" * 64,
                  request_hash="0" * 64, voice="heart", spans=MARKED)
    s = Seg(0, 0, 0, seg, "f" * 64, 0.0)
    assert maker.cached(s) is None and metrics.hits == [False]  # made before marks were kept: made again
    store.put(part_marks_key(key), msgspec.json.encode(PartMarks(samples=SR, sample_rate=SR,
                                                                 marks=[MarkTime(name="a", time_s=0.4)])))
    hit = maker.cached(s)
    assert hit is not None and hit.marks is not None and hit.marks.marks[0].time_s == 0.4 and metrics.hits[-1]
