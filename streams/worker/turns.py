"""Work waiting its turn, served one user at a time in rotation: one user's thousand requests never
keep another user's one waiting behind all of them.

Pure: no threads, no clock. Within one user, items leave in the order they came.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["UserTurns"]

T = TypeVar("T")


class UserTurns(Generic[T]):
    """``add(user, item)``; ``pop()`` gives the next user in rotation its oldest item."""

    def __init__(self) -> None:
        self._by_user: OrderedDict[Hashable, deque[T]] = OrderedDict()
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, user: Hashable, item: T) -> None:
        q = self._by_user.get(user)
        if q is None:
            q = self._by_user[user] = deque()  # a new user joins at the back of the rotation
        q.append(item)
        self._n += 1

    def pop(self) -> T | None:
        """The front user's oldest item; that user goes to the back (or leaves, when it has no more)."""
        if not self._by_user:
            return None
        user, q = next(iter(self._by_user.items()))
        item = q.popleft()
        self._n -= 1
        if q:
            self._by_user.move_to_end(user)
        else:
            del self._by_user[user]
        return item

    def __iter__(self) -> Iterator[T]:
        for q in self._by_user.values():
            yield from q

    def clear(self) -> None:
        self._by_user.clear()
        self._n = 0
