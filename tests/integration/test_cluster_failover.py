"""Three brokers: a segments leader and a transaction coordinator SIGKILLed mid-run, one answer each.

``ttsflow chaos --brokers 3 --kill-brokers 2`` on a PRIVATE three-broker stack (its own home and
ports, jars shared with the main stack's; taken down at the end): every topic and Kafka's
internal ones at replication factor 3 and ``min.insync.replicas`` 2; requests published while the
broker leading the most segments partitions, then the one coordinating a worker's transactions,
is SIGKILLed and started again 6 s later (fenced after 3 s, about 5 s when it was the active
controller too). A ``read_committed`` reader of the completions topic must see exactly one
answer per request, every audio file intact, the bad-content fifth failed with its code, and no
worker may exit on its own (a failover is retriable, never fatal).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import run_json

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_REQUESTS = 100


def test_segments_leader_and_txn_coordinator_kills_lose_and_double_nothing(tmp_path: Path) -> None:
    code, r = run_json(["chaos", "--brokers", "3", "--requests", str(_REQUESTS), "--kill-workers", "0",
                        "--kill-stage", "0", "--kill-brokers", "2", "--broker-down-seconds", "6", "--publish-seconds", "50",
                        "--timeout", "180",
                        "--json"], timeout=420, log=tmp_path / "chaos.stderr")
    summary = {k: r.get(k) for k in ("completed", "lost", "duplicates", "bad_audio", "lost_where", "duplicate_ids",
                                     "bad_audio_sample", "crash_restarts", "liveness_restarts", "logs")}
    # the cluster had the production shape
    assert r["brokers"] == 3
    for topic, rep in r["replication"].items():
        assert rep == {"replication_factor": 3, "min_insync_replicas": 2}, (topic, rep)
    assert {"__consumer_offsets", "__transaction_state"} <= set(r["replication"])
    # both kinds of failover really happened, on brokers that held what they were chosen for
    kills = r["broker_kills"]
    assert [k["kind"] for k in kills] == ["segments_leader", "txn_coordinator"], kills
    assert all("error" not in k for k in kills), kills
    assert kills[0]["led_segments_partitions"], kills[0]
    assert kills[1]["coordinated_transactional_ids"], kills[1]
    assert kills[0]["answers"]["window_requests"] > 0, kills[0]  # traffic was flowing while it was down
    # what a user sees: one answer per request, good audio, bad content failed once with its code
    assert r["lost"] == 0, summary
    assert r["duplicates"] == 0, summary
    assert r["completed"] == _REQUESTS, summary
    assert r["bad_audio"] == 0 and r["audio_checked"] == _REQUESTS - r["bad_content"], summary
    assert r["bad_content_wrong"] == 0 and r["valid_failed"] == 0, summary
    assert r["unexpected"] == 0 and r["undecodable_completions"] == 0
    # a failover is retriable: no process exited on its own, none hung past its liveness probe
    assert r["crash_restarts"] == 0, summary
    assert r["liveness_restarts"] == 0, summary
    assert code == 0
