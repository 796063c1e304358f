"""The worker's decisions (:class:`streams.worker.core.WorkerCore`), directly: no Kafka, no S3,
no threads, no fakes of either. The shell (the loop) hands it what the model, the joiner and
the transaction returned; these tests hand it the same values and read what it decided.

What it must keep: a failed part fails its request once with its code; a request whose parts
are all in S3 is handed to the joiner once; a join's result answers its request only while its
partition's generation is current; a transaction carries the chunks before their completion,
a done record per answer and the offsets the committed-offset rule allows, and nothing is
durable before :meth:`committed`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.base import Failure
from schemas import AudioRef, Completion, ErrorInfo, ModelInfo, Segment, decode_completion
from streams.worker.core import Topics, TxnPlan, WorkerCore
from streams.worker.ledger import Ledger, Part, Seg

SR = 8000
TOPICS = Topics(completed="completed", chunks="chunks", done="done")


class _Models:
    identity = "tone:1:fp32"
    old_identities: list[str] = []
    model_info = ModelInfo(name="tone", version="1", precision="fp32", provider="CPUExecutionProvider")

    def model_info_for(self, voice: str | None) -> ModelInfo:
        return self.model_info


class _Counts:
    """The one metrics hook the core calls on its own (completions, once committed)."""

    def __init__(self) -> None:
        self.completions: list[str] = []

    def completion(self, status: str, e2e_s: float | None) -> None:
        self.completions.append(status)

    def __getattr__(self, name: str) -> Any:  # consumed/skipped/bad_segment: counted elsewhere
        return lambda *a, **k: None


def core() -> WorkerCore:
    lg = Ledger(dedup_window_s=600, max_request_audio_s=60, join_memory_bytes=1 << 20, sample_rate=SR,
                wall=lambda: 1000.0)
    lg.assigned({0, 1})
    return WorkerCore(lg, _Models(), _Counts(), topics=TOPICS, uri=lambda k: f"s3://b/{k}", bucket="b",
                      sample_rate=SR)


def admit(c: WorkerCore, p: int, rid: str, n: int, *, stream: bool = False, first_offset: int = 0) -> list[Seg]:
    hashes = [f"{rid}{i:060x}"[:64] for i in range(n)]
    out = []
    for i in range(n):
        seg = Segment(request_id=rid, user_id="u", seq=i, total=n, text=f"part {i}", hash=hashes[i],
                      request_hash="0" * 64, voice="heart", stream=stream, parts=hashes if i == n - 1 else None)
        c.ledger.consumed(p, first_offset + i)
        work, skipped = c.ledger.admit(p, first_offset + i, seg, f"pid-{rid}-{i}", 0.0)
        assert skipped is None and work is not None
        c.ledger.start_waiting(work)
        out.append(work)
    return out


def made(s: Seg) -> tuple[Seg, Part, float, float]:
    return (s, Part(f"part/{s.part_id}", np.zeros(SR // 10, np.float32), cached=False, sha256="ab", bytes=1644,
                    duration_s=0.1), 0.05, 0.01)


def ref(rid: str) -> AudioRef:
    return AudioRef(uri=f"s3://b/req/{rid}", bucket="b", key=f"req/{rid}", format="wav", sample_rate=SR,
                    duration_s=0.2, bytes=3244, sha256="cd")


def test_a_request_is_handed_to_the_joiner_once_when_all_its_parts_are_in_s3() -> None:
    c = core()
    segs = admit(c, 0, "r", 2)
    c.parts_done([made(segs[0])])
    assert c.to_join() == []  # one part still missing
    c.parts_done([made(segs[1])])
    jobs = c.to_join()
    assert [(j.req.request_id, len(j.hashes), j.identities) for j in jobs] == [("r", 2, ["tone:1:fp32"])]
    assert c.to_join() == []  # handed out once, whatever the join takes


def test_a_request_is_known_whole_once_its_last_segment_is_read_with_what_its_join_will_need() -> None:
    """``read_whole``: the joiner may ask S3 about the object while the parts are made; the request and
    hashes are the join's own (the same job ``to_join`` hands out later)."""
    c = core()
    segs = admit(c, 0, "r", 3)
    assert c.read_whole(segs[:2]) == []  # not its last segment
    (early,) = c.read_whole(segs)
    for s in segs:
        c.parts_done([made(s)])
    (job,) = c.to_join()
    assert (early.req, early.hashes, early.identities) == (job.req, job.hashes, job.identities)
    assert c.read_whole(segs) == []  # being joined already


def test_a_failed_part_fails_its_request_once_with_its_code_and_it_commits_with_its_offsets() -> None:
    c = core()
    segs = admit(c, 0, "bad", 2)
    c.parts_done([(segs[0], Failure("synthesis_failed", "silent"), 0.0, 0.0)])
    assert c.to_join() == [] and len(c.ledger.answers) == 1
    assert c.commit_due(force=False, since_last_s=0.0, interval_s=1.0)  # an answer never waits
    plan = c.take_commit({0, 1})
    completion = decode_completion(plan.records[0][2])
    assert (completion.status, completion.error.code if completion.error else None) == ("failed", "synthesis_failed")
    assert [r[0] for r in plan.records] == ["completed", "done"]
    assert plan.records[1][3] == 0  # the done record goes to the segments' partition
    assert plan.offsets == {0: 2}  # both of the failed request's segments are done with its answer


def test_a_join_finished_after_its_partition_moved_on_answers_nothing() -> None:
    c = core()
    segs = admit(c, 1, "r", 1)
    c.parts_done([made(segs[0])])
    (job,) = c.to_join()
    c.ledger.forget({1})  # revoked while the join ran
    c.joined([(job.req, ref("r"), None)])
    assert c.ledger.answers == []


def test_a_join_that_failed_answers_failed_with_its_reason() -> None:
    c = core()
    (s,) = admit(c, 0, "r", 1)
    c.parts_done([made(s)])
    (job,) = c.to_join()
    c.joined([(job.req, ErrorInfo(code="audio_too_long", message="too long"), None)])
    (a,) = c.ledger.answers
    assert a.completion.status == "failed" and a.completion.error is not None
    assert a.completion.error.code == "audio_too_long"


def test_a_transaction_carries_chunks_before_their_completion_and_is_durable_only_once_committed() -> None:
    c = core()
    segs = admit(c, 0, "s", 2, stream=True)
    c.parts_done([made(s) for s in segs])
    (job,) = c.to_join()
    c.joined([(job.req, ref("s"), None)])
    plan = c.take_commit({0})
    assert [r[0] for r in plan.records] == ["chunks", "chunks", "completed", "done"]
    assert plan.offsets == {0: 2} and [a.request_id for a in plan.answers] == ["s"]
    assert c.ledger.is_done(0, "s")  # being answered: a copy re-read now is dropped
    assert c.metrics.completions == []  # not durable yet
    c.committed(plan)
    assert c.metrics.completions == ["ok"]
    assert not c.commit_due(force=True, since_last_s=10.0, interval_s=1.0)  # nothing left to commit


def test_offsets_alone_wait_for_the_interval_unless_forced() -> None:
    c = core()
    segs = admit(c, 0, "r", 3)
    c.parts_done([made(segs[0])])  # seq 0 done (not the last): the offset may move, nothing to answer
    assert not c.commit_due(force=False, since_last_s=0.01, interval_s=0.05)
    assert c.commit_due(force=False, since_last_s=0.06, interval_s=0.05)
    assert c.commit_due(force=True, since_last_s=0.0, interval_s=0.05)
    plan = c.take_commit({0})
    assert plan == TxnPlan([], {0: 1}, [])


def test_answers_name_the_voice_that_spoke() -> None:
    c = core()
    (s,) = admit(c, 0, "r", 1)
    c.parts_done([made(s)])
    (job,) = c.to_join()
    c.joined([(job.req, ref("r"), None)])
    completion: Completion = c.ledger.answers[0].completion
    assert completion.status == "ok" and completion.model is not None and completion.model.voice == "heart"


def test_a_timed_streaming_request_has_its_words_on_each_chunk_and_on_the_completion() -> None:
    import dataclasses

    import msgspec

    from schemas import SegmentSource, WordSpan
    from streams.worker.timings import PartWords, RequestTimings

    c = core()
    n = 2
    hashes = [f"t{i:063x}" for i in range(n)]
    sources = [SegmentSource(start=0), SegmentSource(start=7)]
    works = []
    for i, voice in enumerate(("heart", "heart")):
        seg = Segment(request_id="t", user_id="u", seq=i, total=n, text=f"part {i}", hash=hashes[i],
                      request_hash="0" * 64, voice=voice, stream=True, timestamps=True, source=sources[i],
                      sources=sources if i == n - 1 else None, parts=hashes if i == n - 1 else None)
        c.ledger.consumed(0, i)
        w, _ = c.ledger.admit(0, i, seg, f"pid-t-{i}", 0.0)
        assert w is not None and w.work_id == f"pid-t-{i}+words"  # made apart from an untimed copy of its audio
        c.ledger.start_waiting(w)
        works.append(w)
    pw = PartWords(text="part x", samples=SR // 10, sample_rate=SR,
                   words=[WordSpan(word="part", start=0, end=4, start_s=0.01, end_s=0.05)])
    c.parts_done([(s, dataclasses.replace(made(s)[1], words=pw), 0.05, 0.01) for s in works])
    jobs = c.to_join()
    first = c.take_commit({0})
    c.committed(first)
    words = RequestTimings(reason="because")
    c.joined([(jobs[0].req, ref("t"), words)])
    done = c.take_commit({0})  # the last chunk commits with the completion
    chunks = [msgspec.json.decode(v) for t, _, v, _ in first.records + done.records if t == "chunks"]
    assert [ch["words"] for ch in chunks] == [[{"word": "part", "start": 0, "end": 4, "start_s": 0.01,
                                                "end_s": 0.05, "chars": None}],
                                              [{"word": "part", "start": 7, "end": 11, "start_s": 0.01,
                                                "end_s": 0.05, "chars": None}]]
    assert [ch["offset_s"] for ch in chunks] == [0.0, 0.25]  # 0.1 s of the first part and the 0.15 s pause
    comp = msgspec.json.decode(next(v for t, _, v, _ in done.records if t == "completed"))
    assert comp["status"] == "ok" and comp["words"] is None and comp["words_reason"] == "because"


def test_a_chunk_of_a_voice_without_durations_says_why_it_has_no_words() -> None:
    from engine.voices import NO_TIMESTAMPS_REASON

    c = core()
    seg = Segment(request_id="z", user_id="u", seq=0, total=2, text="你好", hash="e" * 64, request_hash="0" * 64,
                  voice="chattts", stream=True, timestamps=True)
    c.ledger.consumed(0, 0)
    w, _ = c.ledger.admit(0, 0, seg, "pid-z-0", 0.0)
    assert w is not None
    c.ledger.start_waiting(w)
    c.parts_done([made(w)])
    plan = c.take_commit({0})
    chunk = next(v for t, _, v, _ in plan.records if t == "chunks")
    import json

    d = json.loads(chunk)
    assert d["words"] is None and d["words_reason"] == NO_TIMESTAMPS_REASON and d["offset_s"] == 0.0


# -- requests sent in pieces ----------------------------------------------------------------

def piece_seg(rid: str, seq: int, *, more: bool, hashes: list[str]) -> Segment:
    return Segment(request_id=rid, user_id="u", seq=seq, total=seq + 2 if more else len(hashes), text=f"part {seq}",
                   hash=hashes[seq], request_hash="0" * 64, voice="heart", stream=True, more=more,
                   parts=None if more else hashes)


def test_pieces_chunk_with_their_own_done_record_and_the_end_record_answers_once() -> None:
    import json

    from schemas import End

    c = core()
    hashes = [f"{i:064x}" for i in range(2)]
    works = []
    for i in range(2):
        c.ledger.consumed(0, i)
        w, skipped = c.ledger.admit(0, i, piece_seg("p", i, more=True, hashes=hashes), f"pid-p-{i}", 0.0)
        assert skipped is None and w is not None
        c.ledger.start_waiting(w)
        works.append(w)
    c.parts_done([made(works[0])])
    plan = c.take_commit({0})
    assert [r[0] for r in plan.records] == ["chunks", "done"] and plan.records[1][1] == b"p/0"
    chunk = json.loads(plan.records[0][2])  # type: ignore[arg-type]
    assert chunk["more"] and chunk["total"] == 2 and chunk["seq"] == 0
    c.committed(plan)
    # the stage re-sent segment 0 (restarted behind its table): dropped, even with nothing in flight
    c.ledger.drop_all({0})
    c.ledger.consumed(0, 5)
    assert c.ledger.admit(0, 5, piece_seg("p", 0, more=True, hashes=hashes), "pid-p-0", 0.0) == (None, "duplicate")
    # segment 1 is redone, then the end record closes the request
    c.ledger.consumed(0, 6)
    w1, _ = c.ledger.admit(0, 6, piece_seg("p", 1, more=True, hashes=hashes), "pid-p-1", 0.0)
    assert w1 is not None
    c.ledger.start_waiting(w1)
    c.parts_done([made(w1)])
    end = End(request_id="p", user_id="u", total=2, parts=hashes, request_hash="0" * 64, voice="heart", stream=True)
    c.ledger.consumed(0, 7)
    assert c.ledger.admit_end(0, 7, end) is None
    (job,) = c.to_join()
    assert job.hashes == hashes  # part 0 comes from S3
    c.joined([(job.req, ref("p"), None)])
    plan = c.take_commit({0})
    kinds = [(r[0], r[1], r[2] is None) for r in plan.records]
    assert kinds[:2] == [("chunks", b"u", False), ("done", b"p/1", False)]
    assert ("completed", b"u", False) in kinds and ("done", b"p", False) in kinds
    assert ("done", b"p/0", True) in kinds and ("done", b"p/1", True) in kinds  # deleted with the answer
    assert json.loads(plan.records[2][2])["segments"] == 2  # type: ignore[arg-type]
    c.committed(plan)
    assert plan.offsets == {0: 8}
    c.ledger.consumed(0, 9)
    assert c.ledger.admit_end(0, 9, end) == "request_done"
