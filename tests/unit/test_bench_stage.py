"""``ttsflow bench stage --stall``'s arithmetic: the longest output gap per partition after a kill."""

from __future__ import annotations

from streams.bench.stage import partition_stalls


def test_stall_counts_from_the_kill_between_records_and_to_the_window_end() -> None:
    seen = {0: [9.0, *(10.2 + i / 5 for i in range(24))], 1: [9.5, 13.0, 13.2, 14.9], 2: [9.9]}
    (ep,) = partition_stalls(seen, [10.0], 15.0)
    assert ep["per_partition_s"] == {"0": 0.2, "1": 3.0, "2": 5.0}  # 2 never came back: to the window end
    assert ep["stall_s"] == 5.0
    assert ep["all_back_s"] == 5.0


def test_episodes_split_at_the_next_kill_and_short_gaps_are_not_a_stall() -> None:
    seen = {0: [t / 10 for t in range(0, 300, 3)],  # every 0.3 s throughout
            1: [0.1, 0.4, 3.0, 3.3, 10.0, 10.3, 24.0, 29.9]}
    first, second = partition_stalls(seen, [0.0, 10.0], 30.0)
    assert first["per_partition_s"]["1"] == 6.7  # 3.3 -> 10.0 (the next episode's start ends the window)
    assert first["all_back_s"] == 10.0
    assert second["per_partition_s"] == {"0": 0.3, "1": 13.7}
    assert second["all_back_s"] == 14.0
    quiet = partition_stalls({0: seen[0]}, [0.0], 30.0)[0]
    assert quiet["stall_s"] == 0.3 and quiet["all_back_s"] == 0.0
