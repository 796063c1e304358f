"""Streaming requests: one chunk per segment on ``tts.chunks``, exactly once and in order, with a SIGKILL.

Counted as a user sees them: a ``read_committed`` reader of the chunks topic, per request:
exactly ``total`` chunks, ``seq`` 0..total-1 in the order read, each pointing at audio in S3
with its sha256; and one completion per request on the completions topic.
"""

from __future__ import annotations

import hashlib
import signal
import time
from collections import defaultdict
from pathlib import Path

import msgspec
import pytest

from schemas import Chunk, decode_chunk
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from tests.integration.conftest import drain_topic
from tests.support.metrics import metric_sum
from tests.support.pipeline import SENTENCES, by_request, check_audio, completions, make_segments, new_store, publish

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, transaction_timeout_ms=20_000)


def _streaming(n: int, tag: str) -> list:
    """``n`` streaming requests of 3-4 segments each, no segment alike (no cache hits)."""
    segs = []
    for i in range(n):
        k = 3 + i % 2
        text = " ".join(f"{SENTENCES[(i + j) % len(SENTENCES)][:-1]}, part {j} of {tag} {i}." for j in range(k))
        segs += [msgspec.structs.replace(s, stream=True)
                 for s in make_segments(f"{tag}-{i}", f"user-{i % 5}", text, max_chars=60)]
    return segs


def _check(settings: Settings, segs: list) -> dict[str, list[Chunk]]:
    totals = {s.request_id: s.total for s in segs}
    cs = completions(settings, count=len(totals), timeout=120)
    assert by_request(cs) == dict.fromkeys(totals, 1), by_request(cs)
    for c in cs:
        check_audio(settings, c)
    msgs = drain_topic(settings.kafka.bootstrap_servers, settings.kafka.topic_chunks, count=sum(totals.values()), timeout=60)
    per: dict[str, list[Chunk]] = defaultdict(list)
    for m in msgs:
        ch = decode_chunk(m.value())
        assert m.key() == ch.user_id.encode()
        per[ch.request_id].append(ch)
    store = new_store(settings)
    try:
        for rid, total in totals.items():
            got = per.get(rid, [])
            assert [c.seq for c in got] == list(range(total)), f"{rid}: seqs {[c.seq for c in got]} of {total}"
            assert all(c.total == total for c in got)
            for c in got:
                data = store.get(c.audio.key)
                assert hashlib.sha256(data).hexdigest() == c.audio.sha256 and len(data) == c.audio.bytes
    finally:
        store.close()
    assert set(per) == set(totals), set(per) - set(totals)
    return per


def test_streaming_request_gets_each_chunk_once_in_order(settings: Settings, tmp_path: Path) -> None:
    segs = _streaming(3, "stream")
    publish(settings, segs)
    with Supervisor(tmp_path / "logs") as sup:
        w = sup.worker("w1", settings)
        sup.wait_ready(w, timeout=90)
        per = _check(settings, segs)
    assert sum(len(v) for v in per.values()) == len(segs)


def test_streaming_chunks_exactly_once_across_sigkill(settings: Settings, tmp_path: Path) -> None:
    n = 32
    segs = _streaming(n, "skill")
    publish(settings, segs)
    with Supervisor(tmp_path / "logs") as sup:
        w = sup.worker("w1", settings)
        sup.wait_ready(w, timeout=90)
        deadline = time.monotonic() + 120
        # killed at its first committed answer: a fast worker answers many per batch, so waiting
        # for a few more could find it done
        while (done := metric_sum(w.metrics_port, "ttsflow_worker_completions_total", timeout=2)) < 1:
            sup.check_alive()
            assert time.monotonic() < deadline, "no completions before the kill"
            time.sleep(0.05)
        assert done < n, "the worker finished before it could be killed; make the corpus bigger"
        sup.kill("w1", signal.SIGKILL)
        seen_at_kill = len(drain_topic(settings.kafka.bootstrap_servers, settings.kafka.topic_chunks, timeout=10))
        sup.restart("w1")
        sup.wait_ready(w, timeout=90)
        _check(settings, segs)
    print(f"\nchunks kill test: {len(segs)} segments of {n} streaming requests; {done:.0f} answered and {seen_at_kill} chunks "
          "committed when SIGKILLed; every request then had each chunk once, in order")
