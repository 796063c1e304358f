"""Stable names for the processes of one group on one host: ``<prefix>-<host>-<slot>``.

A worker's ``transactional.id`` and a stage's ``group.instance.id`` must

1. differ between live processes that share the name's scope, or they fence each other
   for ever (two producers with one transactional id; two members with one instance id);
2. stay the same for a process restarted in place of a dead one, so that the new one
   takes over at once: its ``init_transactions`` aborts what the dead worker left open
   and fences it should it still be running somewhere, and a restarted stage gets its
   static member's partitions back without a rebalance;
3. depend on nothing else running on the host.

:func:`claim_slot` gives the lowest slot number that no live process holds in one
*scope*: the Kafka cluster (its bootstrap servers) and the name's prefix (a worker
group's transactional-id prefix, a stage's app id). An ``flock`` per slot does it: the
kernel drops a process's lock when it dies, SIGKILL included, and when it re-executes
itself (Python opens files close-on-exec). Processes of another cluster or another
group count in other scopes, so they never shift a slot. The lock files live in a
per-user folder of the temp dir; two users running the same group on one host would
need different prefixes.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import socket
import tempfile
from pathlib import Path
from typing import IO, Any

from streams.errors import FatalError

__all__ = ["claim_slot", "host_name", "slot_dir"]

_held: list[IO[Any]] = []  # the locks this process holds, for its whole life


@atexit.register
def _release() -> None:
    """Close the held locks at exit (the kernel would drop them anyway; this keeps the
    interpreter from warning about open files as it tears its modules down)."""
    while _held:
        _held.pop().close()


def slot_dir() -> Path:
    """Where the slot locks of this user live (the temp dir, one folder per uid)."""
    return Path(tempfile.gettempdir()) / f"ttsflow-slots-{os.getuid()}"


def host_name() -> str:
    return socket.gethostname()


def _scope_file(kind: str, cluster: str, prefix: str) -> str:
    servers = ",".join(sorted(b.strip().lower() for b in cluster.split(",") if b.strip()))
    digest = hashlib.sha256(f"{servers}\0{prefix}".encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in prefix)[:80]
    return f"{kind}.{safe}.{digest}"


def claim_slot(kind: str, cluster: str, prefix: str, *, lock_dir: Path | None = None, slots: int = 256) -> int:
    """The lowest slot of scope (``kind``, ``cluster``, ``prefix``) no live process holds, locked
    until this process exits. ``kind`` keeps workers and stages apart ("worker", "stage").

    Raises :class:`FatalError` when all ``slots`` are taken.
    """
    import fcntl

    base = lock_dir or slot_dir()
    base.mkdir(parents=True, exist_ok=True)
    stem = _scope_file(kind, cluster, prefix)
    for slot in range(slots):
        f = open(base / f"{stem}.{slot}.lock", "a+")  # held until exit
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _held.append(f)
        return slot
    raise FatalError(f"no free {kind} slot among {slots} for {prefix!r} on this host")
