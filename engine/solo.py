"""A model call alone on the machine uses every core; calls side by side keep one lane's share.

A worker runs a one-by-one model (kokoro) in lanes: two calls at once, one thread each, on 2
cores, because two 1-thread calls make more parts a second than one 2-thread call. On an idle
worker that leaves a core unused while the one call a user waits for runs: the first chunk of a
streaming request. :class:`SoloGate` lets a backend keep a second session on all cores and use
it for a call that starts while no other call is in flight (:meth:`SoloGate.enter` says which);
a call that starts beside another takes its lane's session. Under load the lanes are rarely
both idle, so throughput stays the lanes'; a call that starts beside a solo one overlaps it with
one thread more than there are cores, until the solo call ends.

A caller may say, for the calls its thread makes, whether they may run solo (:func:`said`): the
worker says yes only for the call it holds the other lane for (a stream's first segment on an idle
worker), so the first call of a burst of whole requests keeps its lane's one thread and the burst
its rate; a caller that says nothing (a tool, a test) gets the rule above.

Pure bookkeeping, thread-safe; no onnxruntime import.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["SoloGate", "said"]

_said = threading.local()


@contextlib.contextmanager
def said(may_run_solo: bool) -> Iterator[None]:
    """Within: whether this thread's model calls may run solo (on an idle backend)."""
    before = getattr(_said, "solo", None)
    _said.solo = may_run_solo
    try:
        yield
    finally:
        _said.solo = before


class SoloGate:
    """Counts the calls in flight; the first of an idle backend may run solo."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._in_flight = 0
        self.solo_calls = 0
        self.lane_calls = 0

    def enter(self) -> bool:
        """A call starts: True when it may use every core (nothing else in flight, and its thread did not
        say no: :func:`said`)."""
        with self._lock:
            solo = self.enabled and self._in_flight == 0 and getattr(_said, "solo", None) is not False
            self._in_flight += 1
            if solo:
                self.solo_calls += 1
            else:
                self.lane_calls += 1
            return solo

    def leave(self) -> None:
        """A call ended (calls are counted, not named)."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)

    @property
    def in_flight(self) -> int:
        return self._in_flight
