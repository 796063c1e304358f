"""The model lanes: a few threads that take the most urgent work first, model calls and the DSP after them alike.

A hibari part is two pieces of CPU work: its model call (~28 ms a sentence on one core) and then
its signal processing and encode (~11-17 ms). When one thread did both for each call, a request's
third segment waited on two lanes for a whole call *and* its DSP; taken as separate tasks by
urgency, the third model call starts as soon as a lane is free and the first two parts' DSP fills
the time after it, so on two lanes the request ends a DSP sooner (the work is the same; only its
order changes).

Invariants:

* At most ``n`` tasks run at once, one per thread; a task waiting runs before every task of a
  larger key submitted, and tasks of equal keys run in the order submitted.
* :meth:`Lanes.submit` returns a :class:`~concurrent.futures.Future` as an executor's does: it can be
  cancelled until its task starts; the task's result or exception is set on it.
* :meth:`Lanes.shutdown` stops the threads once the queue is empty (``cancel_futures``: the waiting
  tasks are cancelled first); ``wait`` joins them.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["Lanes"]


class Lanes:
    """``n`` threads named ``<prefix>_<i>`` running submitted tasks, smallest key first."""

    def __init__(self, n: int, *, thread_name_prefix: str = "model") -> None:
        self._cv = threading.Condition()
        self._queue: list[tuple[Any, int, Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._closed = False
        # daemon: a process that exits without closing its worker must not hang on an idle lane
        self._threads = [threading.Thread(target=self._run, name=f"{thread_name_prefix}_{i}", daemon=True)
                         for i in range(max(1, n))]
        for t in self._threads:
            t.start()

    def submit(self, key: Any, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on a lane once no waiting task has a smaller key."""
        fut: Future[Any] = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("the lanes are shut down")
            heapq.heappush(self._queue, (key, next(self._order), fut, fn, args))
            self._cv.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                _, _, fut, fn, args = heapq.heappop(self._queue)
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # into the future, as an executor does
                fut.set_exception(e)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cv:
            self._closed = True
            if cancel_futures:
                for _, _, fut, _, _ in self._queue:
                    fut.cancel()
                self._queue.clear()
            self._cv.notify_all()
        if wait:
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join()
