"""streams/worker/turns.py: waiting work served one user at a time in rotation, each user's in order."""

from __future__ import annotations

from streams.worker.turns import UserTurns


def test_one_users_flood_does_not_keep_another_waiting_behind_all_of_it() -> None:
    t: UserTurns[str] = UserTurns()
    for i in range(1000):
        t.add("flooder", f"f{i}")
    t.add("bob", "b0")
    t.add("carol", "c0")
    t.add("bob", "b1")
    assert len(t) == 1003
    first = [t.pop() for _ in range(6)]
    assert first == ["f0", "b0", "c0", "f1", "b1", "f2"]  # bob and carol within their first turn
    rest = [t.pop() for _ in range(len(t))]
    assert rest == [f"f{i}" for i in range(3, 1000)] and len(t) == 0 and t.pop() is None


def test_iteration_and_clear() -> None:
    t: UserTurns[int] = UserTurns()
    t.add("a", 1)
    t.add("b", 2)
    t.add("a", 3)
    assert sorted(t) == [1, 2, 3]
    t.clear()
    assert len(t) == 0 and list(t) == [] and t.pop() is None
