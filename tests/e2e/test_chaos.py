"""``ttsflow chaos`` small run: SIGKILLed workers and stage lose, duplicate and corrupt nothing;
the fifth of the requests with bad content get exactly one failed completion with their code."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.settings import Settings
from tests.e2e.helpers import run_json

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_chaos_small_run_loses_and_duplicates_nothing(stack_settings: Settings, tmp_path: Path) -> None:
    code, r = run_json(["chaos", "--requests", "200", "--kill-workers", "2", "--kill-stage", "1", "--json"],
                       timeout=480, log=tmp_path / "chaos.stderr")
    summary = {k: r.get(k) for k in ("requests", "completed", "lost", "duplicates", "bad_audio", "failed",
                                     "lost_ids", "lost_where", "duplicate_ids", "bad_audio_sample", "failed_codes",
                                     "crash_restarts", "liveness_restarts", "logs", "bad_content",
                                     "bad_content_answered", "bad_content_wrong_sample", "valid_failed")}
    assert r["requests"] == 200
    # the disruptions really happened, mid-run
    assert r["kills"] == {"worker": 2, "stage": 1, "broker_restarts": 0}
    for e in r["events"]:
        if e["action"] == "kill_worker":  # while answering: some requests answered, not all
            assert 0 < e["completed_before"] < 200, e
        else:  # while requests arrive
            assert e["at_s"] < r["timings"]["publish_s"], e
    assert r["lost"] == 0, summary
    assert r["duplicates"] == 0, summary
    assert r["bad_audio"] == 0, summary
    assert r["bad_content"] == 40 and r["bad_content_answered"] == 40, summary
    assert r["bad_content_wrong"] == 0 and r["valid_failed"] == 0, summary
    assert r["failed"] == 40, summary
    assert r["completed"] == 200 and r["audio_checked"] == 160
    assert r["unexpected"] == 0 and r["undecodable_completions"] == 0
    assert code == 0
