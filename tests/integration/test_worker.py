"""The synthesis worker against the real stack (Kafka, s3proxy, Redis) and the real engine.

Segment events are produced directly (built like the stage builds them: normalize,
split, hash); completions are read back with ``read_committed`` and counted by
request id. The worker runs in a thread of the test process here so its metrics can be
read; the kill and rebalance tests (``test_worker_kill.py``) run it as subprocesses.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from schemas import Segment
from storage import AudioCache
from streams.settings import Settings
from tests.support.pipeline import (
    SENTENCES,
    by_request,
    cache_namespace,
    check_audio,
    completions,
    make_segments,
    new_store,
    publish,
)
from tests.support.pipeline import running_worker as _running_worker

pytestmark = pytest.mark.integration



# -- in-process worker --------------------------------------------------------------------

@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    """Per-test topics (conftest) and a per-test S3 prefix and cache namespace: no hits from other runs."""
    return settings.replace(s3_prefix=f"test/{unique}/")


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    from engine.registry import load_engine

    e = load_engine("hibari", threads=0, max_batch=8)
    yield e
    e.close()


class CountingEngine:
    """The real engine, counting the items that reach the model."""

    def __init__(self, engine: Any) -> None:
        self._e = engine
        self.inferred: list[str] = []

    def infer_batch(self, batch: Any) -> Any:
        self.inferred += [p.item.text for p in batch]
        return self._e.infer_batch(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._e, name)


def running_worker(settings: Settings, engine: Any, **kw: Any) -> Any:
    """The shared worker rig with this file's 20 ms batch wait."""
    return _running_worker(settings.replace(max_wait_ms=20), engine, tid_prefix="test-worker", **kw)


def wait_for(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# -- tests --------------------------------------------------------------------------------

def test_n_requests_give_n_completions_with_audio_in_s3(settings: Settings, engine: Any) -> None:
    n = 12
    segs: list[Segment] = []
    for i in range(n):
        segs += make_segments(f"req-{i}", f"user-{i % 5}", SENTENCES[i % len(SENTENCES)] + f" Number {i}.")
    per_request = Counter(s.request_id for s in segs)
    publish(settings, segs)
    with running_worker(settings, engine, overlap=True) as w:  # DSP on the second thread, as on a GPU
        assert w.overlap
        cs = completions(settings, count=n, timeout=90)
        m = w.metrics
        assert m.value("ttsflow_worker_completions_total", {"status": "ok"}) == n
        assert m.value("ttsflow_worker_segments_consumed_total") == len(segs)
        assert m.value("ttsflow_worker_batches_total") >= 1
        assert m.value("ttsflow_worker_audio_seconds_total") > n
        assert m.value("ttsflow_worker_e2e_latency_seconds_count") == n
        assert b"ttsflow_worker_batch_fill_bucket" in m.exposition()
    assert by_request(cs) == Counter({f"req-{i}": 1 for i in range(n)})
    for c in cs:
        assert c.user_id == f"user-{int(c.request_id.split('-')[1]) % 5}"
        assert c.segments == per_request[c.request_id] and c.model is not None and c.model.name == "hibari"
        assert c.model.provider == "CPUExecutionProvider"
        assert c.timings is not None and c.timings.e2e_ms > 0 and c.timings.synth_ms > 0
        samples, sr = check_audio(settings, c)
        assert sr == 24000 and len(samples) > sr // 2


def test_long_text_comes_back_as_one_audio_with_words_in_order(settings: Settings, engine: Any) -> None:
    from tests.support.asr import normalize_text, recognize

    text = " ".join(SENTENCES[:4])
    segs = make_segments("long-1", "alice", text, max_chars=64, fmt="flac", sample_rate=16000)
    assert len(segs) >= 3
    publish(settings, segs)
    with running_worker(settings, engine):
        cs = completions(settings, count=1, timeout=90)
    assert by_request(cs) == Counter({"long-1": 1})
    c = cs[0]
    assert c.segments == len(segs) and c.audio is not None
    assert c.audio.format == "flac" and c.audio.sample_rate == 16000
    samples, sr = check_audio(settings, c)
    heard = normalize_text(recognize(samples, sr)).split()
    # distinctive words of each sentence are heard, in the order the text has them
    anchors = ["fox", "message", "weather", "station"]
    positions = [heard.index(a) if a in heard else -1 for a in anchors]
    found = [p for p in positions if p >= 0]
    assert len(found) >= 3, heard
    assert found == sorted(found), heard


def test_repeated_text_hits_the_cache_and_skips_the_engine(settings: Settings, engine: Any) -> None:
    counting = CountingEngine(engine)
    text = f"This sentence is cached {uuid.uuid4().hex[:6]}. And this one too."
    publish(settings, make_segments("first", "bob", text, max_chars=40))
    with running_worker(settings, counting) as w:
        wait_for(lambda: w.metrics.value("ttsflow_worker_completions_total", {"status": "ok"}) == 1, 60, "first")
        synthesized = len(counting.inferred)
        assert synthesized == 2
        publish(settings, make_segments("again", "carol", text, max_chars=40))
        wait_for(lambda: w.metrics.value("ttsflow_worker_completions_total", {"status": "ok"}) == 2, 60, "second")
        assert len(counting.inferred) == synthesized  # the engine was not called for the repeat
        assert w.metrics.value("ttsflow_worker_cache_hits_total") == 2
    cs = {c.request_id: c for c in completions(settings, count=2)}
    assert cs["first"].cached_segments == 0 and cs["again"].cached_segments == 2
    assert cs["first"].audio.sha256 == cs["again"].audio.sha256  # type: ignore[union-attr]


def test_reemitted_segments_yield_one_completion(settings: Settings, engine: Any) -> None:
    segs = make_segments("dup-1", "dave", "One sentence here. Another sentence there. And a third.", max_chars=30)
    assert len(segs) == 3
    publish(settings, segs + segs[1:])  # the stage re-emitted segments 1 and 2
    with running_worker(settings, engine) as w:
        wait_for(lambda: w.metrics.value("ttsflow_worker_completions_total", {"status": "ok"}) == 1, 60, "dup-1")
        # the worker now knows dup-1 is done; a later re-emit of everything is dropped too
        publish(settings, segs)
        wait_for(lambda: w.metrics.value("ttsflow_worker_segments_consumed_total") == 8, 30, "re-emit consumed")
        wait_for(lambda: w.ledger.tracker.pending() == 0, 30, "offsets done")
        assert w.metrics.value("ttsflow_worker_segments_skipped_total", {"reason": "request_done"}) == 3
    # a restarted worker (new process state) reads the done topic and still answers nothing twice
    publish(settings, segs)
    with running_worker(settings, engine) as w2:
        wait_for(lambda: w2.metrics.value("ttsflow_worker_segments_skipped_total", {"reason": "request_done"}) == 3,
                 60, "restarted worker drops the re-emit")
    cs = completions(settings, timeout=10)
    assert by_request(cs) == Counter({"dup-1": 1})


def test_bad_segments_and_engine_failures_fail_only_their_request(settings: Settings, engine: Any) -> None:
    good = make_segments("good-1", "erin", "A perfectly normal sentence.")
    bad_voice = make_segments("badvoice-1", "erin", "Spoken by a voice that does not exist.", voice="nobody")
    raw = [(b"erin", b'{"request_id": "broken-1", "seq": "zero"}'),  # readable id: failed completion
           (b"erin", b"\xff\xfe not json at all")]                    # no id: counted and skipped
    publish(settings, bad_voice + good, raw)
    with running_worker(settings, engine) as w:
        cs = completions(settings, count=3, timeout=60)
        wait_for(lambda: w.ledger.tracker.pending() == 0, 30, "all offsets done")
        assert w.metrics.value("ttsflow_worker_bad_segments_total") == 2
    got = {c.request_id: c for c in cs}
    assert by_request(cs) == Counter({"good-1": 1, "badvoice-1": 1, "broken-1": 1})
    assert got["good-1"].status == "ok"
    assert got["badvoice-1"].status == "failed" and got["badvoice-1"].error.code == "unknown_voice"  # type: ignore[union-attr]
    assert got["broken-1"].status == "failed" and got["broken-1"].error.code.startswith("bad_segment")  # type: ignore[union-attr]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_redis_down_bypasses_the_cache_and_stays_correct(settings: Settings, engine: Any) -> None:
    n = 4
    segs = [s for i in range(n) for s in make_segments(f"nr-{i}", "frank", SENTENCES[i])]
    segs += make_segments("nr-repeat", "frank", SENTENCES[0])
    publish(settings, segs)
    cache = AudioCache(f"redis://127.0.0.1:{_closed_port()}/0", 600, timeout_s=0.2, namespace=cache_namespace(settings))
    with running_worker(settings, engine, cache=cache) as w:
        cs = completions(settings, count=n + 1, timeout=90)
        assert w.metrics.value("ttsflow_worker_redis_errors_total") >= 1
        assert w.metrics.value("ttsflow_worker_cache_hits_total") == 0
    assert by_request(cs) == Counter({**{f"nr-{i}": 1 for i in range(n)}, "nr-repeat": 1})
    for c in cs:
        check_audio(settings, c)


class TcpProxy:
    """A TCP forwarder to the real S3 server that can be taken down and brought back."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = _closed_port()
        self._srv: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.up()

    def up(self) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", self.port))
        srv.listen(64)
        self._srv = srv
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()

    def down(self) -> None:
        srv, self._srv = self._srv, None
        if srv is not None:
            # close() alone does not wake an accept() blocked in another thread on Linux: that
            # thread then accepted one more connection after "down", and boto3 kept reusing it
            # (the S3-down test saw uploads succeed through a proxy that was down)
            try:
                srv.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            srv.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                client, _ = srv.accept()
            except OSError:
                return
            if self._srv is not srv:  # taken down meanwhile
                client.close()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_s3_down_commits_nothing_then_recovers_exactly_once(settings: Settings, engine: Any) -> None:
    from urllib.parse import urlparse

    u = urlparse(settings.s3.s3_endpoint)
    proxy = TcpProxy((u.hostname or "127.0.0.1", u.port or 9000))
    store = new_store(settings, endpoint=f"http://127.0.0.1:{proxy.port}")
    try:
        with running_worker(settings, engine, store=store) as w:
            publish(settings, make_segments("before", "gina", SENTENCES[0]))
            wait_for(lambda: w.metrics.value("ttsflow_worker_completions_total", {"status": "ok"}) == 1, 60, "before")
            proxy.down()
            n = 5
            publish(settings, [s for i in range(n) for s in make_segments(f"outage-{i}", "gina",
                                                                           SENTENCES[i + 1] + " Outage.")])
            wait_for(lambda: w.metrics.value("ttsflow_worker_s3_errors_total") >= 2, 60, "s3 errors")
            # nothing was committed while S3 was down: no completion, offsets stay put
            assert len(completions(settings, timeout=5)) == 1
            assert w.metrics.value("ttsflow_worker_completions_total", {"status": "ok"}) == 1
            proxy.up()
            cs = completions(settings, count=n + 1, timeout=90)
    finally:
        proxy.down()
    assert by_request(cs) == Counter({"before": 1, **{f"outage-{i}": 1 for i in range(n)}})
    for c in cs:
        check_audio(settings, c)
