"""streams/worker/joiner.py: a request's audio streamed into one object; one failing object fails one request."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
import pytest

from engine.audio import decode, encode, join
from schemas import AudioRef, ErrorInfo
from storage.errors import S3Unavailable, StorageConfigError, StorageError
from streams.worker.joiner import JoinSpec, join_upload

SR = 8000
KEY = "a/req/ab/cd/" + "ab" * 32 + ".wav"


class Store:
    """An in-memory bucket whose upload can fail (``fail_upload``: an exception to raise)."""

    bucket = "bucket"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.meta: dict[str, dict[str, str]] = {}
        self.fail_upload: BaseException | None = None
        self.ping_ok = True
        self.uploads = 0
        self.pings = 0

    def uri(self, key: str) -> str:
        return f"s3://bucket/{key}"

    def head(self, key: str) -> dict[str, Any] | None:
        if key not in self.objects:
            return None
        meta = self.meta.get(key, {})
        return {"bytes": len(self.objects[key]), "sha256": meta.get("sha256"), "metadata": meta}

    def put_file(self, key: str, f: Any, content_type: str = "", *, metadata: dict[str, str] | None = None
                 ) -> tuple[str, int]:
        self.uploads += 1
        if self.fail_upload is not None:
            raise self.fail_upload
        f.seek(0)
        data = f.read()
        digest = hashlib.sha256(data).hexdigest()
        self.objects[key] = data
        self.meta[key] = {**(metadata or {}), "sha256": digest}
        return digest, len(data)

    def ping(self) -> None:
        self.pings += 1
        if not self.ping_ok:
            raise S3Unavailable("connection refused")


def _parts(n: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [(0.3 * rng.standard_normal(int(SR * rng.uniform(0.2, 0.6)))).astype(np.float32) for _ in range(n)]


def _spec(fmt: str = "wav", max_audio_s: float = 3600.0) -> JoinSpec:
    return JoinSpec(key=KEY, fmt=fmt, sr_in=SR, sr_out=SR, max_audio_s=max_audio_s, request_id="r-1")


def _no_sleep(_s: float) -> None:
    pass


def test_parts_are_read_once_in_order_and_joined_like_join() -> None:
    parts, asked = _parts(), []

    def samples(seq: int) -> np.ndarray:
        asked.append(seq)
        return parts[seq]

    store = Store()
    ref = join_upload(store, _spec(), len(parts), samples)
    assert isinstance(ref, AudioRef)
    assert asked == list(range(len(parts)))
    data = store.objects[KEY]
    assert data == encode(join(parts, SR), SR, "wav")
    assert ref.sha256 == hashlib.sha256(data).hexdigest() and ref.bytes == len(data)
    assert ref.duration_s == pytest.approx(len(decode(data)[0]) / SR, abs=1e-4)
    assert store.meta[KEY]["duration_s"] == str(ref.duration_s)


def test_an_object_already_stored_with_its_duration_is_answered_without_joining() -> None:
    parts, store = _parts(), Store()
    first = join_upload(store, _spec(), len(parts), lambda i: parts[i])

    def never(seq: int) -> np.ndarray:
        raise AssertionError("joined again")

    again = join_upload(store, _spec(), len(parts), never)
    assert again == first and store.uploads == 1


def test_an_older_object_without_duration_keeps_its_bytes_and_sha() -> None:
    parts, store = _parts(), Store()
    store.objects[KEY] = b"older bytes"
    store.meta[KEY] = {"sha256": "f" * 64}
    ref = join_upload(store, _spec(), len(parts), lambda i: parts[i])
    assert isinstance(ref, AudioRef) and ref.sha256 == "f" * 64 and ref.bytes == len(b"older bytes")
    assert store.uploads == 0 and ref.duration_s > 0


def test_a_join_from_memory_asks_for_the_object_beside_its_encode_and_answers_the_same() -> None:
    """``heads``: the HEAD runs on its own pool while the parts are encoded; a stored object still wins
    (the encode is thrown away, nothing uploaded), an older one keeps its bytes, a miss uploads."""
    from concurrent.futures import ThreadPoolExecutor

    parts = _parts()
    with ThreadPoolExecutor(1) as heads:
        store = Store()
        first = join_upload(store, _spec(), len(parts), lambda i: parts[i], heads=heads)
        assert isinstance(first, AudioRef) and store.uploads == 1
        assert store.objects[KEY] == encode(join(parts, SR), SR, "wav")
        again = join_upload(store, _spec(), len(parts), lambda i: parts[i], heads=heads)
        assert again == first and store.uploads == 1
        older = Store()
        older.objects[KEY] = b"older bytes"
        older.meta[KEY] = {"sha256": "f" * 64}
        ref = join_upload(older, _spec(), len(parts), lambda i: parts[i], heads=heads)
        assert isinstance(ref, AudioRef) and ref.sha256 == "f" * 64 and older.uploads == 0
        down = Store()
        down.ping_ok = False
        down.head = lambda key: (_ for _ in ()).throw(S3Unavailable("connection refused"))  # type: ignore[method-assign]
        with pytest.raises(S3Unavailable):
            join_upload(down, _spec(), len(parts), lambda i: parts[i], heads=heads, sleep=_no_sleep)
        assert down.uploads == 0


def test_a_head_asked_early_stands_for_the_join_and_one_that_failed_is_asked_again() -> None:
    """``asked``: the HEAD started when the request's last segment was read. Its answer decides as the
    join's own would (a stored object wins, from memory or from S3; a miss uploads); one that raised is
    asked again with the join's retries (S3 down then: raised, nothing uploaded)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    def answered(value: Any = None, error: BaseException | None = None) -> Future[Any]:
        f: Future[Any] = Future()
        if error is not None:
            f.set_exception(error)
        else:
            f.set_result(value)
        return f

    def never(seq: int) -> np.ndarray:
        raise AssertionError("joined again")

    parts = _parts()
    with ThreadPoolExecutor(1) as heads:
        store = Store()
        first = join_upload(store, _spec(), len(parts), lambda i: parts[i], heads=heads, asked=answered(None))
        assert isinstance(first, AudioRef) and store.uploads == 1
        stored = store.head(KEY)
        for pool in (heads, None):  # from memory (beside the encode) and from S3 (before reading a part)
            read: list[int] = []

            def reading(i: int, read: list[int] = read) -> np.ndarray:
                read.append(i)
                return parts[i]

            ref = join_upload(store, _spec(), len(parts), reading, heads=pool, asked=answered(stored))
            assert ref == first and store.uploads == 1 and (pool is not None or read == [])
        # the early answer said "not there" although it is: the join trusts it and uploads the same bytes
        again = join_upload(store, _spec(), len(parts), lambda i: parts[i], heads=heads, asked=answered(None))
        assert isinstance(again, AudioRef) and again.sha256 == first.sha256 and store.uploads == 2
        # an early HEAD that failed: asked again (the object is there: from S3, nothing read; from memory,
        # the encode beside it thrown away)
        for pool, samples in ((heads, lambda i: parts[i]), (None, never)):
            ref = join_upload(store, _spec(), len(parts), samples, heads=pool,
                              asked=answered(error=S3Unavailable("reset by peer")))
            assert ref == first and store.uploads == 2
        down = Store()
        down.ping_ok = False
        down.head = lambda key: (_ for _ in ()).throw(S3Unavailable("connection refused"))  # type: ignore[method-assign]
        with pytest.raises(S3Unavailable):
            join_upload(down, _spec(), len(parts), lambda i: parts[i], heads=heads, sleep=_no_sleep,
                        asked=answered(error=S3Unavailable("connection refused")))
        assert down.uploads == 0


def test_an_upload_that_keeps_failing_while_s3_answers_fails_this_request_only() -> None:
    parts, store = _parts(), Store()
    store.fail_upload = S3Unavailable("s3 upload_part: 500")  # e.g. the server out of memory on this object
    res = join_upload(store, _spec(), len(parts), lambda i: parts[i], sleep=_no_sleep)
    assert isinstance(res, ErrorInfo) and res.code == "storage_failed" and "500" in res.message
    assert store.uploads == 3 and store.pings == 1


def test_a_rejected_upload_is_not_retried() -> None:
    parts, store = _parts(), Store()
    store.fail_upload = StorageError("s3 put_object: EntityTooLarge")
    res = join_upload(store, _spec(), len(parts), lambda i: parts[i], sleep=_no_sleep)
    assert isinstance(res, ErrorInfo) and res.code == "storage_failed" and store.uploads == 1


def test_s3_down_as_a_whole_is_an_outage_not_a_failed_request() -> None:
    parts, store = _parts(), Store()
    store.fail_upload = S3Unavailable("connection refused")
    store.ping_ok = False
    with pytest.raises(S3Unavailable):
        join_upload(store, _spec(), len(parts), lambda i: parts[i], sleep=_no_sleep)


def test_configuration_errors_are_raised() -> None:
    parts, store = _parts(), Store()
    store.fail_upload = StorageConfigError("AccessDenied")
    with pytest.raises(StorageConfigError):
        join_upload(store, _spec(), len(parts), lambda i: parts[i], sleep=_no_sleep)


def test_a_part_fetch_that_keeps_failing_fails_the_request() -> None:
    parts, store, calls = _parts(), Store(), []

    def flaky(seq: int) -> np.ndarray:
        calls.append(seq)
        if seq == 2:
            raise S3Unavailable("s3 get_object: 503")
        return parts[seq]

    res = join_upload(store, _spec(), len(parts), flaky, sleep=_no_sleep)
    assert isinstance(res, ErrorInfo) and res.code == "storage_failed"
    assert calls == [0, 1, 2, 2, 2] and store.uploads == 0


def test_missing_part_too_long_and_bad_format_fail_with_their_codes() -> None:
    parts = _parts()
    res = join_upload(Store(), _spec(), len(parts), lambda i: None if i == 3 else parts[i])
    assert isinstance(res, ErrorInfo) and res.code == "part_missing" and "segment 3" in res.message
    res = join_upload(Store(), _spec(max_audio_s=0.5), len(parts), lambda i: parts[i])
    assert isinstance(res, ErrorInfo) and res.code == "audio_too_long"
    res = join_upload(Store(), _spec(fmt="mp9"), len(parts), lambda i: parts[i])
    assert isinstance(res, ErrorInfo) and res.code == "unsupported_format"


def test_a_local_failure_fails_the_request_with_join_failed() -> None:
    parts, store = _parts(), Store()
    store.fail_upload = OSError(28, "No space left on device")
    res = join_upload(store, _spec(), len(parts), lambda i: parts[i])
    assert isinstance(res, ErrorInfo) and res.code == "join_failed" and "space" in res.message


def test_long_audio_spills_to_disk_and_stays_exact() -> None:
    # 10 minutes at 8 kHz, 9.6 MB of wav: past the 8 MiB in-memory spool, so it goes through a temp file
    rng = np.random.default_rng(5)
    parts = [(0.2 * rng.standard_normal(SR * 5)).astype(np.float32) for _ in range(120)]
    store = Store()
    ref = join_upload(store, _spec(), len(parts), lambda i: parts[i])
    assert isinstance(ref, AudioRef)
    assert store.objects[KEY] == encode(join(parts, SR), SR, "wav")


def _until(cond: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.005)


@pytest.mark.parametrize("outcome", ["stored", "failed"])
def test_a_join_from_memory_runs_beside_its_parts_puts_and_answers_only_once_they_ended(outcome: str) -> None:
    """A part is handed over with its PUT in flight: the join starts from memory at once, but the
    request is answered only when every part is in S3, and a PUT that failed is raised."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from schemas import Segment
    from streams.worker.joiner import Joiner
    from streams.worker.ledger import Part, Request
    from tests.support.memstore import MemStore

    seg = Segment(request_id="r", user_id="u", seq=0, total=1, text="x", hash="e" * 64, request_hash="0" * 64,
                  voice="heart")
    store = MemStore()
    with ThreadPoolExecutor(2) as io:
        joiner = Joiner(store, io, sample_rate=SR, max_audio_s=60)  # type: ignore[arg-type]
        put: Future[str] = Future()
        req = Request(0, 1, "r", "u", 1, seg, seqs={0}, last=seg)
        req.parts[0] = Part("k", _parts(1)[0], cached=False, stored=put)
        joiner.submit(req, ["e" * 64], ["id"])
        _until(lambda: any(k.startswith("req/") for k in store.objects), "the request's object stored")
        assert joiner.collect() == [] and joiner.busy()  # its part's PUT has not ended
        if outcome == "stored":
            put.set_result("sha")
            _until(lambda: all(f.done() for f in joiner.futures()), "the join returned")
            [(got, ref, _words)] = joiner.collect()
            assert got is req and isinstance(ref, AudioRef) and ref.key.startswith("req/")
        else:
            put.set_exception(S3Unavailable("connection refused"))
            _until(lambda: all(f.done() for f in joiner.futures()), "the join returned")
            with pytest.raises(S3Unavailable):
                joiner.collect()


def test_the_joiner_asks_early_at_most_joins_at_once_and_forgets_an_old_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Joiner.ask``: one HEAD per object key, no more than ``joins`` in flight (a backlog's would queue
    ahead of the joins' own), and an answer older than a second is not used (the join asks again)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from schemas import Segment
    from streams.worker import joiner as joiner_mod
    from streams.worker.joiner import Joiner
    from streams.worker.ledger import Request

    release = threading.Event()

    class Slow(Store):
        def key(self, kind: str, digest: str, fmt: str) -> str:
            return f"{kind}/{digest}.{fmt}"

        def head(self, key: str) -> dict[str, Any] | None:
            release.wait(5)
            return None

    def request(n: int) -> tuple[Request, list[str]]:
        hashes = [f"{n:02d}" * 32]
        seg = Segment(request_id=f"r{n}", user_id="u", seq=0, total=1, text="hi", hash=hashes[0],
                      request_hash="0" * 64, voice="heart", parts=hashes)
        return Request(partition=0, gen=1, request_id=f"r{n}", user_id="u", total=1, first=seg, last=seg), hashes

    clock = [100.0]
    monkeypatch.setattr(joiner_mod.time, "monotonic", lambda: clock[0])
    with ThreadPoolExecutor(1) as io:
        j = Joiner(Slow(), io, sample_rate=SR, max_audio_s=60.0, joins=2)  # type: ignore[arg-type]
        reqs = [request(n) for n in range(4)]
        for req, hashes in (*reqs, reqs[0]):
            j.ask(req, hashes, ["m:1"])
        assert len(j._early) == 2  # two in flight: the others not asked; the first not asked twice
        release.set()
        keys = [j._spec(req, hashes, ["m:1"]).key for req, hashes in reqs]
        first = j._asked(keys[0])
        assert first is not None and first.result(5) is None
        assert j._asked(keys[0]) is None  # taken by its join
        assert j._asked(keys[2]) is None  # never asked
        clock[0] += 1.5
        assert j._asked(keys[1]) is None  # asked 1.5 s ago: the join asks again
        j._heads.shutdown()
