"""The worker's request ledger, directly: no Kafka, no engine, no S3, no fakes.

What it must keep: offsets follow durability (a last segment is done only with its
answer), no second answer (done set within the dedup window, copies in flight), stale
generations change nothing, a request's memory stays bounded.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import UTC, datetime

import msgspec
import numpy as np
import pytest

from schemas import Completion, ErrorInfo, Rejection, Segment
from storage.errors import S3Unavailable
from streams.worker.ledger import Ledger, Part, Seg

SR = 8000


def ledger(*, wall: float = 1000.0, join_memory_bytes: int = 1 << 20, max_audio_s: float = 60.0) -> Ledger:
    clock = {"now": wall}
    lg = Ledger(dedup_window_s=600, max_request_audio_s=max_audio_s, join_memory_bytes=join_memory_bytes,
                sample_rate=SR, wall=lambda: clock["now"])
    lg.assigned({0, 1})
    return lg


def segs(rid: str, n: int, *, with_parts: bool = True) -> list[Segment]:
    hashes = [f"{i:064x}" for i in range(n)]
    return [Segment(request_id=rid, user_id="u", seq=i, total=n, text=f"part {i}", hash=hashes[i],
                    request_hash="0" * 64, voice="heart",
                    parts=hashes if with_parts and i == n - 1 else None) for i in range(n)]


def admit_all(lg: Ledger, p: int, items: list[Segment], first_offset: int = 0) -> list[Seg]:
    out = []
    for i, s in enumerate(items):
        lg.consumed(p, first_offset + i)
        work, skipped = lg.admit(p, first_offset + i, s, f"pid-{s.request_id}-{s.seq}", 0.0)
        assert skipped is None and work is not None
        out.append(work)
    return out


def audio(seconds: float) -> Part:
    return Part("k", np.zeros(int(SR * seconds), np.float32), cached=False)


def answer(lg: Ledger, rid: str, p: int = 0) -> None:
    req = lg.requests[(p, rid)]
    lg.answer(req, Completion(request_id=rid, user_id="u", status="ok", completed_at=datetime.now(UTC)), None)


def test_offsets_follow_durability_a_last_segment_is_done_only_with_its_answer() -> None:
    lg = ledger()
    work = admit_all(lg, 0, segs("r", 3))
    assert lg.to_commit({0, 1}) == {0: 0}  # nothing done: the commit stays at the first segment
    for w in work:
        lg.part_ready(w, audio(0.1))
    assert lg.to_commit({0, 1}) == {0: 2}  # parts 0 and 1 in S3; the last waits for the answer
    assert [(r.request_id, nxt) for r, nxt in lg.answerable()] == [("r", "join")]
    answer(lg, "r")
    answers = lg.take_answers()
    assert [a.request_id for a in answers] == ["r"] and answers[0].offsets == [0, 1, 2]
    assert lg.to_commit({0, 1}) == {0: 3}
    lg.committed({0: 3}, answers)
    assert lg.is_done(0, "r") and not lg.due()


def test_a_copy_in_flight_and_an_answered_request_are_dropped_and_do_not_hold_the_commit() -> None:
    lg = ledger()
    first = segs("r", 1)[0]
    admit_all(lg, 0, [first])
    lg.consumed(0, 1)
    assert lg.admit(0, 1, first, "pid", 0.0) == (None, "duplicate")
    bad = Segment(request_id="r", user_id="u", seq=5, total=1, text="x", hash="0" * 64, request_hash="0" * 64,
                  voice="heart")
    lg.consumed(0, 2)
    assert lg.admit(0, 2, bad, "pid", 0.0) == (None, "bad_seq")
    answer(lg, "r")
    lg.committed(lg.to_commit({0}), lg.take_answers())
    lg.consumed(0, 3)
    assert lg.admit(0, 3, first, "pid", 0.0) == (None, "request_done")  # re-emitted after the answer
    assert lg.to_commit({0}) == {0: 4}


def test_the_done_set_counts_for_the_dedup_window_only() -> None:
    clock = {"now": 10_000.0}
    lg = Ledger(dedup_window_s=600, max_request_audio_s=60, join_memory_bytes=1 << 20, sample_rate=SR,
                wall=lambda: clock["now"])
    lg.assigned({0})
    lg.load_done(0, {"old": 10_000.0 - 601, "new": 10_000.0 - 10})
    assert lg.is_done(0, "new") and not lg.is_done(0, "old")  # a reused id past the window is a new request
    assert not lg.is_done(1, "new")  # per partition


def test_work_of_a_revoked_or_dropped_partition_changes_nothing() -> None:
    lg = ledger()
    (w,) = admit_all(lg, 1, segs("r", 2)[:1])
    lg.forget({1})
    assert not lg.current(w.partition, w.gen)
    lg.part_ready(w, audio(0.1))
    assert lg.requests == {} and lg.to_commit({0, 1}) == {}
    lg.assigned({1})
    (w2,) = admit_all(lg, 1, segs("s", 2)[:1])
    lg.drop_all({0, 1})
    lg.part_ready(w2, audio(0.1))
    assert lg.requests == {} and lg.answers == []


def test_a_rejection_is_answered_once_and_a_copy_joins_it() -> None:
    lg = ledger()
    rej = Rejection(request_id="bad", user_id="u", error=ErrorInfo(code="empty_text", message="empty"),
                    source_partition=0, source_offset=7)
    lg.consumed(0, 0)
    assert lg.admit_rejection(0, 0, rej) is None
    lg.consumed(0, 1)
    assert lg.admit_rejection(0, 1, rej) == "duplicate"
    assert [(r.request_id, nxt) for r, nxt in lg.answerable()] == [("bad", "failed")]
    assert lg.requests[(0, "bad")].offsets == [0, 1]


def test_a_failed_part_fails_every_request_waiting_for_it_once() -> None:
    lg = ledger()
    (a,) = admit_all(lg, 0, segs("a", 1))
    lg.start_waiting(a)
    (b,) = admit_all(lg, 1, segs("b", 1))
    b.part_id = a.part_id
    assert lg.join_waiting(b)  # the same audio is being made: b waits for it
    failed = lg.part_failed(a.part_id, ErrorInfo(code="engine_error", message="boom"))
    assert sorted(r.request_id for r, _ in failed) == ["a", "b"]
    assert lg.part_failed(a.part_id, ErrorInfo(code="engine_error", message="again")) == []


def test_memory_per_request_is_bounded_and_too_much_audio_fails_early() -> None:
    lg = ledger(join_memory_bytes=int(SR * 0.15) * 4, max_audio_s=0.25)
    work = admit_all(lg, 0, segs("long", 3))
    lg.part_ready(work[0], audio(0.1))
    lg.part_ready(work[1], audio(0.1))  # past the memory share: kept in S3 only
    req = lg.requests[(0, "long")]
    assert req.parts[0].audio is not None and req.parts[1].audio is None
    assert req.failure is None
    lg.part_ready(work[2], audio(0.1))
    assert req.failure is not None and req.failure.code == "audio_too_long"


def test_a_last_segment_without_its_part_list_cannot_be_joined() -> None:
    lg = ledger()
    work = admit_all(lg, 0, segs("nolist", 2, with_parts=False))
    for w in work:
        lg.part_ready(w, audio(0.1))
    assert [(r.request_id, nxt) for r, nxt in lg.answerable()] == [("nolist", "parts_unknown")]


def test_a_chunk_leaves_only_with_the_offset_that_passes_its_segment_in_seq_order() -> None:
    lg = ledger()
    other = admit_all(lg, 0, segs("o", 1))  # another request's segment first in the partition
    stream = [msgspec.structs.replace(s, stream=True) for s in segs("s", 3)]
    work = admit_all(lg, 0, stream, first_offset=1)
    for w in reversed(work[:2]):  # parts finish out of order
        lg.part_ready(w, audio(0.1))
    offsets = lg.to_commit({0, 1})
    assert offsets == {0: 0} and lg.take_chunks(offsets) == []  # offset 0 not done: no chunk may leave
    lg.part_ready(other[0], audio(0.1))
    answer(lg, "o")
    lg.take_answers()
    offsets = lg.to_commit({0, 1})
    assert offsets == {0: 3}
    assert [c.seq for c in lg.take_chunks(offsets)] == [0, 1]  # passed by the commit, in seq order
    lg.committed(offsets, [])
    lg.part_ready(work[2], audio(0.1))
    assert lg.take_chunks(lg.to_commit({0, 1})) == []  # the last waits for its answer
    answer(lg, "s")
    lg.take_answers()
    assert [c.seq for c in lg.take_chunks(lg.to_commit({0, 1}))] == [2]


def test_an_answered_request_counts_as_done_while_its_transaction_is_in_flight() -> None:
    lg = ledger()
    work = admit_all(lg, 0, segs("r", 1))
    lg.part_ready(work[0], audio(0.1))
    answer(lg, "r")
    answers = lg.take_answers()
    assert lg.is_done(0, "r")  # a copy of its segment consumed now must not start it again
    lg.committed(lg.to_commit({0, 1}), answers)
    assert lg.is_done(0, "r")
    lg2 = ledger()
    lg2.part_ready(admit_all(lg2, 0, segs("r", 1))[0], audio(0.1))
    answer(lg2, "r")
    lg2.take_answers()
    lg2.drop_all({0, 1})  # the transaction aborted: redone from committed, so not done
    assert not lg2.is_done(0, "r")


def test_an_answered_requests_chunks_commit_with_its_completion_even_if_offsets_lag() -> None:
    """The batcher's fair order finishes a later request first: its completion must not commit
    without its chunks (re-read after a crash, an answered request is dropped as done)."""
    lg = ledger()
    admit_all(lg, 0, segs("long", 3))  # earlier in the partition, not done: holds the offset at 0
    stream = [msgspec.structs.replace(s, stream=True) for s in segs("short", 2)]
    work = admit_all(lg, 0, stream, first_offset=3)
    for w in work:
        lg.part_ready(w, audio(0.1))
    answer(lg, "short")
    answers = lg.take_answers()
    offsets = lg.to_commit({0})
    assert offsets == {0: 0}
    chunks = lg.take_chunks(offsets, answers)
    assert [(c.request_id, c.seq) for c in chunks] == [("short", 0), ("short", 1)]
    assert lg.take_chunks(lg.to_commit({0}), []) == []  # once


def putting(seconds: float) -> tuple[Part, Future[str]]:
    """A part handed over with its PUT still in flight (the future ends it)."""
    stored: Future[str] = Future()
    return Part("k", np.zeros(int(SR * seconds), np.float32), cached=False, stored=stored), stored


def test_a_part_whose_put_is_in_flight_is_joinable_but_its_segment_is_done_and_its_chunk_due_only_once_stored() -> None:
    lg = ledger()
    stream = [msgspec.structs.replace(s, stream=True) for s in segs("s", 2)]
    work = admit_all(lg, 0, stream)
    first, put0 = putting(0.1)
    last, put1 = putting(0.1)
    lg.part_ready(work[0], first)
    lg.part_ready(work[1], last)
    assert [(r.request_id, nxt) for r, nxt in lg.answerable()] == [("s", "join")]  # joined from memory now
    lg.settle()
    offsets = lg.to_commit({0, 1})
    assert offsets == {0: 0} and lg.take_chunks(offsets) == [] and not lg.idle()  # segment 0 not in S3 yet
    put0.set_result("sha")
    lg.settle()
    offsets = lg.to_commit({0, 1})
    assert offsets == {0: 1} and [c.seq for c in lg.take_chunks(offsets)] == [0]
    lg.committed(offsets, [])
    put1.set_result("sha")  # the join waited for it; the answer carries the last chunk
    answer(lg, "s")
    answers = lg.take_answers()
    assert [c.seq for c in lg.take_chunks(lg.to_commit({0, 1}), answers)] == [1]
    assert lg.to_commit({0, 1}) == {0: 2} and not lg.storing


def test_a_failed_put_raises_at_settle_and_a_failed_answer_drops_what_is_still_in_flight() -> None:
    lg = ledger()
    work = admit_all(lg, 0, segs("r", 2))
    part, put = putting(0.1)
    lg.part_ready(work[0], part)
    put.set_exception(S3Unavailable("connection refused"))
    with pytest.raises(S3Unavailable):
        lg.settle()
    lg2 = ledger()
    work = admit_all(lg2, 0, segs("r", 3))
    part, _put = putting(0.1)
    lg2.part_ready(work[0], part)
    lg2.requests[(0, "r")].failure = ErrorInfo(code="synthesis_failed", message="x")
    req = lg2.requests[(0, "r")]
    lg2.answer(req, Completion(request_id="r", user_id="u", status="failed", completed_at=datetime.now(UTC)), None)
    lg2.take_answers()  # a failed answer counts every segment done, in S3 or not
    assert lg2.to_commit({0, 1}) == {0: 3} and not lg2.storing and lg2.idle()


def test_a_failed_requests_queued_parts_are_no_longer_wanted_unless_another_request_waits() -> None:
    """With a read-ahead of megabytes a long request that fails (audio_too_long) may have hundreds of
    segments queued: the parts only it waits for are given up, one another request waits for is kept."""
    lg = ledger()
    work = admit_all(lg, 0, segs("long", 4))
    for w in work:
        lg.start_waiting(w)
    other = admit_all(lg, 1, segs("other", 1), first_offset=0)[0]
    other.part_id = work[3].part_id  # the same audio, asked for by another request
    assert lg.join_waiting(other)
    assert lg.unwanted() == set()  # nothing failed yet
    req = lg.requests[(0, "long")]
    lg.answer(req, Completion(request_id="long", user_id="u", status="failed", completed_at=datetime.now(UTC)), None)
    assert lg.unwanted() == {w.part_id for w in work[:3]}
    assert set(lg.waiting) == {work[3].part_id}
    assert lg.unwanted() == set()  # looked once per failure


def test_owed_is_how_long_a_record_waited_for_its_partition_to_be_taken() -> None:
    """Written before the partition was assigned (a restart's backlog): owed that long, at most
    backlog_credit_s; written after, or read after the credit's window, nothing; an abort's rewind
    starts the window again; a revoked partition owes nothing."""
    clock = {"now": 1000.0}
    lg = Ledger(dedup_window_s=600, max_request_audio_s=60, join_memory_bytes=1 << 20, sample_rate=SR,
                wall=lambda: clock["now"], backlog_credit_s=5.0)
    assert lg.owed(0, 990.0) == 0.0  # not assigned
    lg.assigned({0, 1})
    clock["now"] = 1000.5
    assert lg.owed(0, 998.2) == pytest.approx(1.8)
    assert lg.owed(1, 980.0) == 5.0  # bounded
    assert lg.owed(0, 1000.2) == 0.0  # written after the assignment
    clock["now"] = 1005.5  # later than the window: read order
    assert lg.owed(0, 990.0) == 0.0
    lg.drop_all({0, 1})  # an abort: what is read again is a backlog
    assert lg.owed(0, 1004.0) == pytest.approx(1.5)
    lg.forget({1})
    assert lg.owed(1, 990.0) == 0.0
    off = Ledger(dedup_window_s=600, max_request_audio_s=60, join_memory_bytes=1 << 20, sample_rate=SR,
                 wall=lambda: clock["now"])
    off.assigned({0})
    assert off.owed(0, 990.0) == 0.0  # backlog_credit_s 0: read order
