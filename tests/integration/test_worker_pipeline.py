"""Stage and worker subprocesses together: requests in, exactly one completion per request out.

Covers what only the two together show: a duplicate request_id and bad inputs are
answered once (by the stage), long and repeated texts come back as one audio each (by the
worker), and every ok completion's audio is in S3 with its sha256.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.support.pipeline import SENTENCES, answer_requests, by_request, check_audio

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20)


def test_stage_and_worker_answer_every_request_once(settings: Settings, tmp_path: Path) -> None:
    long_text = " ".join(SENTENCES)  # several segments
    reqs = [{"request_id": f"p-{i}", "user_id": f"user-{i % 3}", "text": SENTENCES[i]} for i in range(5)]
    reqs += [{"request_id": "p-long", "user_id": "user-1", "text": long_text, "format": "ogg", "sample_rate": 16000},
             {"request_id": "p-repeat", "user_id": "user-2", "text": SENTENCES[0]},
             {"request_id": "p-0", "user_id": "user-0", "text": "A duplicate id must not be answered twice."},
             {"request_id": "p-empty", "user_id": "user-0", "text": "   "},
             {"request_id": "p-format", "user_id": "user-0", "text": "Hello.", "format": "mp3"}]
    expected = {r["request_id"] for r in reqs}
    cs = answer_requests(settings, tmp_path / "logs", reqs, timeout=180)
    assert by_request(cs) == Counter({rid: 1 for rid in expected})
    got = {c.request_id: c for c in cs}
    assert got["p-empty"].status == "failed" and got["p-empty"].error.code == "empty_text"  # type: ignore[union-attr]
    assert got["p-format"].status == "failed"
    assert got["p-0"].status == "ok" and got["p-0"].segments == 1
    long = got["p-long"]
    assert long.status == "ok" and long.segments >= 3
    assert long.audio.format == "ogg" and long.audio.sample_rate == 16000  # type: ignore[union-attr]
    for c in cs:
        if c.status == "ok":
            check_audio(settings, c)
    assert got["p-repeat"].cached_segments == 1 or got["p-0"].cached_segments == 1
