"""The broker kills' bookkeeping: which broker coordinates a key, whom to kill, what a kill cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.bench.brokerkill import coordinator_partition, healthy, java_string_hash, kill_window_stats, pick_target


def test_java_string_hash_matches_java() -> None:
    # values printed by Java's String.hashCode
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hash("\u00e9t\u00e9") == 0xE9 * 31 * 31 + 0x74 * 31 + 0xE9
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two chars


def test_coordinator_partition_is_kafkas_abs_modulo() -> None:
    assert coordinator_partition("abc", 50) == 96354 % 50
    assert coordinator_partition("polygenelubricants", 10) == 0  # Utils.abs(MIN_VALUE) is 0
    neg = next(k for k in (f"ttsflow-chaos-{i}" for i in range(1000)) if java_string_hash(k) < 0)
    assert coordinator_partition(neg, 7) == abs(java_string_hash(neg)) % 7
    assert all(0 <= coordinator_partition(f"ttsflow-chaos-w{i}", 10) < 10 for i in range(100))


def test_pick_target_segments_leader_takes_the_broker_leading_most() -> None:
    broker, why = pick_target("segments_leader", {0: 2, 1: 3, 2: 2, 3: 1}, {}, 0)
    assert broker == 2 and why == ["leads 2 of 4 segments partitions"]
    assert pick_target("segments_leader", {0: 3, 1: 1, 2: -1}, {}, 0)[0] == 1  # tie: lowest id; -1 no leader
    with pytest.raises(ValueError):
        pick_target("segments_leader", {0: -1}, {}, 0)


def test_pick_target_txn_coordinator_rotates_over_workers() -> None:
    coords = {"w1": 3, "w0": 2}
    assert pick_target("txn_coordinator", {}, coords, 0) == (2, ["coordinates transactional.id w0"])
    assert pick_target("txn_coordinator", {}, coords, 1)[0] == 3
    assert pick_target("txn_coordinator", {}, coords, 2)[0] == 2
    with pytest.raises(ValueError):
        pick_target("txn_coordinator", {}, {}, 0)
    with pytest.raises(ValueError):
        pick_target("controller", {0: 1}, coords, 0)


def test_kill_window_stats_counts_requests_published_while_the_broker_was_down() -> None:
    published = {"before": 95.0, "a": 100.5, "b": 104.0, "c": 109.0, "late": 130.0}
    answered = {"before": 96.0, "a": 112.5, "b": 113.0, "c": 114.0, "late": 131.0}
    st = kill_window_stats(100.0, 110.0, published, answered)
    assert st["window_requests"] == 3 and st["unanswered"] == 0
    assert st["max_s"] == 12.0
    assert 9.0 < st["p99_s"] <= 12.0
    assert st["max_gap_s"] == 12.0  # from a's publish to the first answer after the kill
    # 114 -> 131 without answers is no stall: only "late" (published at 130) waited, for 1 s


def test_kill_window_stats_counts_unanswered_and_trailing_silence() -> None:
    published = {"a": 101.0, "b": 102.0}
    answered = {"a": 103.0}
    st = kill_window_stats(100.0, 110.0, published, answered, after_s=30.0)
    assert st["window_requests"] == 2 and st["unanswered"] == 1
    assert st["max_gap_s"] == 37.0  # b waited past the end of the span: 103 -> 140
    assert kill_window_stats(100.0, 110.0, {"x": 90.0}, {"x": 125.0})["max_gap_s"] == 25.0  # from the kill
    assert kill_window_stats(100.0, 110.0, {}, {})["p99_s"] is None


def _view(brokers: list[int], under: int = 0, offline: int = 0) -> dict[str, object]:
    return {"brokers": brokers, "under_replicated": under, "offline": offline}


def test_healthy_needs_every_broker_to_see_the_whole_cluster() -> None:
    whole = _view([1, 2, 3])
    assert healthy([whole, whole, whole], 3) == (True, "")
    # the broker just restarted answers, but another still counts its partitions under-replicated
    ok, why = healthy([whole, _view([1, 2, 3], under=23), whole], 3)
    assert not ok and "23 partitions under-replicated" in why
    assert not healthy([whole, whole], 3)[0]  # one broker did not answer at all
    assert not healthy([whole, _view([1, 3]), whole], 3)[0]  # one view has not registered broker 2 yet
    assert not healthy([whole, whole, _view([1, 2, 3], offline=1)], 3)[0]
    assert healthy([_view([1])], 1) == (True, "")


def test_kafka_brokers_setting_bootstraps_from_every_broker_and_replicates_on_three() -> None:
    from streams.settings import load_settings

    s = load_settings({"TTS_KAFKA_PORT": "19192", "TTS_KAFKA_CONTROLLER_PORT": "19193", "TTS_KAFKA_BROKERS": "3"})
    assert s.kafka.bootstrap_servers == "127.0.0.1:19192,127.0.0.1:19202,127.0.0.1:19212"
    assert s.kafka.replication_factor == 3
    assert s.local_stack.broker_ports() == [(19192, 19193), (19202, 19203), (19212, 19213)]
    given = load_settings({"TTS_KAFKA_BROKERS": "3", "TTS_BOOTSTRAP_SERVERS": "k:1", "TTS_REPLICATION_FACTOR": "2"})
    assert (given.kafka.bootstrap_servers, given.kafka.replication_factor) == ("k:1", 2)
    one = load_settings({"TTS_KAFKA_PORT": "19192"})
    assert (one.kafka.bootstrap_servers, one.kafka.replication_factor, one.local_stack.kafka_brokers) == ("127.0.0.1:19192", 1, 1)


def test_broker_services_ports_and_replication_of_a_local_stack(tmp_path: Path) -> None:
    from streams.devstack.paths import stack_paths
    from streams.devstack.services import broker_node, broker_services, home_brokers, replication_of, stack_services
    from streams.devstack.stack import stack_settings
    from streams.settings import load_settings

    assert broker_services(1) == ("kafka",) and broker_services(3) == ("kafka", "kafka-2", "kafka-3")
    assert stack_services(3) == ("kafka", "kafka-2", "kafka-3", "s3", "redis")
    assert [broker_node(s) for s in ("kafka", "kafka-2", "kafka-3", "s3", "redis")] == [1, 2, 3, None, None]
    assert replication_of(1) == (1, 1) and replication_of(3) == (3, 2)
    s = load_settings({"TTS_HOME": str(tmp_path), "TTS_KAFKA_PORT": "19192", "TTS_KAFKA_CONTROLLER_PORT": "19193"})
    p = stack_paths(s)
    assert home_brokers(p) is None  # never formatted
    assert stack_settings(s) is s  # one broker: unchanged
    three = stack_settings(s, 3)
    assert three.kafka.bootstrap_servers == "127.0.0.1:19192,127.0.0.1:19202,127.0.0.1:19212"
    assert (three.local_stack.kafka_brokers, three.kafka.replication_factor) == (3, 3)
    (p.data).mkdir(parents=True)
    (p.data / "kafka-brokers").write_text("3\n")
    assert home_brokers(p) == 3
    assert stack_settings(s).local_stack.kafka_brokers == 3  # a three-broker home stays one, whatever the settings say
