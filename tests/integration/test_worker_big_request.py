"""A request at the text limit is answered, streamed, while other users' short requests keep being answered.

Stage and worker subprocesses on the real stack. The text limit is lowered (the default
100,000 characters is ~2 h of audio, minutes of synthesis here: ``ttsflow bench bigrequest``
measures that one) and the worker keeps almost no part audio in memory
(``TTS_JOIN_MEMORY_MB=1``), so the join reads the parts back from S3 one by one and uploads
the result in multipart pieces, as it does for the longest requests.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from schemas import Completion, SchemaError, decode_completion
from streams.bench.bigrequest import long_text
from streams.bench.corpus import sentences
from streams.bench.harness import Publisher, TopicReader
from streams.devstack.procs import Supervisor
from streams.settings import Settings
from tests.support.pipeline import check_audio

pytestmark = pytest.mark.integration

LIMIT = 8_000


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, max_text_chars=LIMIT, join_memory_mb=1)


def test_a_request_at_the_text_limit_is_answered_while_short_ones_keep_being_answered(
        settings: Settings, tmp_path: Path) -> None:
    text = long_text(LIMIT, seed=11)
    assert LIMIT - 120 < len(text) <= LIMIT
    shorts = sentences(12)
    pub = Publisher(settings.kafka)
    sent: dict[str, float] = {}
    got: dict[str, tuple[Completion, float]] = {}
    seen: Counter[str] = Counter()
    with Supervisor(tmp_path / "logs") as sup, TopicReader(settings.kafka, settings.kafka.topic_completed) as reader:
        sup.stage("stage", settings)
        sup.worker("worker", settings)

        def short(i: int) -> str:
            rid = f"short-{i}"
            value = json.dumps({"request_id": rid, "user_id": f"user-{i % 9}", "text": next(shorts)}).encode()
            sent[rid] = pub.publish(settings.kafka.topic_requests, f"user-{i % 9}".encode(), value)
            return rid

        def pump() -> None:
            for rec in reader.poll(0.2):
                try:
                    c = decode_completion(rec.value)
                except SchemaError:
                    continue
                seen[c.request_id] += 1
                got.setdefault(c.request_id, (c, rec.received))

        def wait(ids: list[str], timeout: float) -> None:
            pub.flush(30)
            deadline = time.monotonic() + timeout
            while not all(i in got for i in ids):
                sup.check_alive()
                assert time.monotonic() < deadline, f"unanswered: {sorted(i for i in ids if i not in got)}"
                pump()

        wait([short(i) for i in range(3)], 180)  # both processes up and serving
        big = {"request_id": "big", "user_id": "big-user", "text": text, "format": "flac"}
        sent["big"] = pub.publish(settings.kafka.topic_requests, b"big-user", json.dumps(big).encode())
        during: list[str] = []
        deadline = time.monotonic() + 240
        i = 3
        while "big" not in got:  # short requests of other users at ~2/s until the big one is answered
            sup.check_alive()
            assert time.monotonic() < deadline, "the request at the limit was not answered"
            during.append(short(i))
            i += 1
            t_next = time.monotonic() + 0.5
            while time.monotonic() < t_next and "big" not in got:
                pump()
        wait(during, 120)
        sup.check_alive()

    assert seen == Counter(dict.fromkeys(sent, 1))  # every request answered, once
    c_big, big_at = got["big"]
    assert c_big.status == "ok", c_big.error
    assert c_big.segments > 50 and c_big.audio is not None and c_big.audio.format == "flac"
    _samples, sr = check_audio(settings, c_big)  # in S3, its sha256 and size, its duration
    assert c_big.audio.duration_s > 300 and sr == c_big.audio.sample_rate
    assert all(got[r][0].status == "ok" for r in during)
    answered_meanwhile = [r for r in during if got[r][1] < big_at]
    assert answered_meanwhile, "no short request was answered while the long one was in the works"
