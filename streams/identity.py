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

:func:`wait_for_slot` is a warm standby's half (``TTS_WORKER_SLOTS``): it waits, blocked in ``flock``, until
one of a bounded set of slots is free (its holder exited or was killed) and takes it, so the
standby takes over the dead process's name the moment the kernel drops the lock. :func:`slot_holder` says which
process holds a slot (``/proc/locks``), for an operator or a benchmark that must kill the
serving process and not its standby.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from streams.errors import FatalError

__all__ = ["claim_slot", "held_slot_note", "host_name", "note_in_held_slot", "slot_dir", "slot_holder", "try_slot",
           "wait_for_slot"]

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
    files = _lock_files(kind, cluster, prefix, slots, lock_dir)
    slot = _take_one(files)
    if slot is None:
        for f in files:
            f.close()
        raise FatalError(f"no free {kind} slot among {slots} for {prefix!r} on this host")
    return slot


def wait_for_slot(kind: str, cluster: str, prefix: str, slots: int, *, lock_dir: Path | None = None,
                  check_s: float = 0.5, stop: Callable[[], bool] = lambda: False) -> int | None:
    """The lowest of slots ``0..slots-1`` of the scope free now or, while live processes hold all of
    them, the first to be freed (its holder exited or died), locked until this process exits. None
    once ``stop()`` says so (asked every ``check_s``).

    A thread per slot blocks in ``flock``: the kernel wakes the first one the moment the slot is
    free, and the wait costs no CPU (a 5 ms poll cost 1.6% of a core). A thread that gets its
    slot after another won (or after a stop) lets it go at once."""
    import fcntl

    files = _lock_files(kind, cluster, prefix, slots, lock_dir)
    slot = _take_one(files)
    if slot is not None:
        return slot
    won: list[int] = []
    settled = threading.Lock()
    taken = threading.Event()

    def block(k: int, f: IO[Any]) -> None:
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
        except (OSError, ValueError):  # closed under it
            return
        with settled:
            if not won and not taken.is_set():
                won.append(k)
                _held.append(f)
                taken.set()
                return
        f.close()  # another slot was taken first, or the wait was given up: not ours to hold

    for k, f in enumerate(files):
        threading.Thread(target=block, args=(k, f), name=f"slot-wait-{k}", daemon=True).start()
    while not taken.wait(check_s):
        if stop():
            with settled:
                if not won:
                    taken.set()  # a thread that gets its slot now lets it go
                    return None
    return won[0]


def try_slot(kind: str, cluster: str, prefix: str, slot: int, *, lock_dir: Path | None = None) -> IO[Any] | None:
    """``slot`` of the scope locked now, if no live process holds it: its lock file, held until the
    caller closes it (not until exit, unlike :func:`claim_slot`); None when it is held."""
    import fcntl

    f = _lock_files(kind, cluster, prefix, 1, lock_dir, first=slot)[0]
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def note_in_held_slot(kind: str, cluster: str, prefix: str, slot: int, note: str, *,
                      lock_dir: Path | None = None) -> None:
    """Write ``note`` into the lock file of ``slot``, which this process holds (what the next holder
    needs to know of it: a serving worker's transactional id). Replaces the last note."""
    f = _held_file(kind, cluster, prefix, slot, lock_dir)
    f.seek(0)
    f.truncate()
    f.write(note)
    f.flush()


def held_slot_note(kind: str, cluster: str, prefix: str, slot: int, *, lock_dir: Path | None = None) -> str:
    """The note the last holder of ``slot`` (which this process holds now) left in it; "" if none."""
    f = _held_file(kind, cluster, prefix, slot, lock_dir)
    f.seek(0)
    return f.read()


def _held_file(kind: str, cluster: str, prefix: str, slot: int, lock_dir: Path | None) -> IO[Any]:
    path = os.path.realpath(_lock_path(kind, cluster, prefix, slot, lock_dir))
    for f in _held:
        if os.path.realpath(f.name) == path:
            return f
    raise ValueError(f"this process holds no {kind} slot {slot} of {prefix!r}")


def slot_holder(kind: str, cluster: str, prefix: str, slot: int, *, lock_dir: Path | None = None) -> int | None:
    """The pid of the process holding ``slot`` of the scope (Linux ``/proc/locks``), or None."""
    path = _lock_path(kind, cluster, prefix, slot, lock_dir)
    try:
        st = path.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234567 0 EOF"
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5] == want and f[4].isdigit():
            return int(f[4])
    return None


def _lock_path(kind: str, cluster: str, prefix: str, slot: int, lock_dir: Path | None) -> Path:
    return (lock_dir or slot_dir()) / f"{_scope_file(kind, cluster, prefix)}.{slot}.lock"


def _lock_files(kind: str, cluster: str, prefix: str, slots: int, lock_dir: Path | None, *,
                first: int = 0) -> list[IO[Any]]:
    (lock_dir or slot_dir()).mkdir(parents=True, exist_ok=True)
    # the one taken stays open until exit; "a+": a note is written at the end of what truncate left
    return [open(_lock_path(kind, cluster, prefix, k, lock_dir), "a+") for k in range(first, first + slots)]


def _take_one(files: list[IO[Any]]) -> int | None:
    """Lock the first of ``files`` no live process holds and keep it until exit (closing the others);
    None, with every file left open for the next try, when all are held."""
    import fcntl

    for slot, f in enumerate(files):
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue
        _held.append(f)
        for other in files:
            if other is not f:
                other.close()
        return slot
    return None
