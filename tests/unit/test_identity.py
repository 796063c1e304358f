"""Default process names: ``<prefix>-<host>-<slot>``, a slot per (cluster, prefix) held by flock.

Slots are claimed by real subprocesses (a lock is released only when its process dies),
in a lock folder of the test's own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.errors import FatalError
from streams.identity import claim_slot
from streams.settings import load_settings
from streams.worker.main import claim_transactional_id

HOST = socket.gethostname()

# claims one id in a child process, prints it, then holds it until killed
_WORKER = ("import json, sys, time; from pathlib import Path; from streams.settings import load_settings; "
           "from streams.worker.main import claim_transactional_id; "
           "print(claim_transactional_id(load_settings(env=json.loads(sys.argv[2])), lock_dir=Path(sys.argv[1])), "
           "flush=True); time.sleep(120)")
_STAGE = ("import json, sys, time; from pathlib import Path; import streams.identity as i; "
          "i.slot_dir = lambda: Path(sys.argv[1]); from streams.settings import load_settings; "
          "from streams.stage.app import claim_stage_instance_id; "
          "print(claim_stage_instance_id(load_settings(env=json.loads(sys.argv[2]))), flush=True); time.sleep(120)")


@pytest.fixture
def claim(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    """``claim(env, code=_WORKER) -> (id, process)``: a live process holding the id it claimed."""
    import json

    procs: list[subprocess.Popen[str]] = []

    def run(env: dict[str, str], code: str = _WORKER) -> tuple[str, subprocess.Popen[str]]:
        p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), json.dumps(env)], stdout=subprocess.PIPE,
                             text=True)
        procs.append(p)
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        assert line, f"the child printed no id (exit {p.poll()})"
        return line, p

    yield run
    for p in procs:
        p.kill()
        p.wait(10)
        if p.stdout:
            p.stdout.close()


def test_default_id_names_the_group_host_and_slot(claim) -> None:  # type: ignore[no-untyped-def]
    a, _ = claim({"TTS_WORKER_GROUP": "voices-en"})
    assert a == f"voices-en-{HOST}-0"


def test_two_groups_on_one_host_never_share_an_id(claim) -> None:  # type: ignore[no-untyped-def]
    """The collision of issue 18: both groups got ttsflow-worker-<host>-0 and fenced each other."""
    a, _ = claim({"TTS_WORKER_GROUP": "ttsflow-workers"})
    b, _ = claim({"TTS_WORKER_GROUP": "ttsflow-workers-zh"})
    assert a == f"ttsflow-workers-{HOST}-0"
    assert b == f"ttsflow-workers-zh-{HOST}-0"


def test_side_by_side_workers_of_one_group_get_distinct_ids_and_a_restart_takes_the_freed_one(
        claim) -> None:  # type: ignore[no-untyped-def]
    """A restarted worker takes the dead one's id: its init_transactions aborts what it left open."""
    env = {"TTS_WORKER_GROUP": "g"}
    (a, pa), (b, _) = claim(env), claim(env)
    assert (a, b) == (f"g-{HOST}-0", f"g-{HOST}-1")
    pa.kill()  # SIGKILL: the kernel drops its lock
    pa.wait(10)
    again, _ = claim(env)
    assert again == a


def test_other_clusters_and_other_groups_do_not_shift_the_slot(claim) -> None:  # type: ignore[no-untyped-def]
    """An unrelated stack on the same host (another broker) or another group holds slots of its own."""
    claim({"TTS_WORKER_GROUP": "g", "TTS_BOOTSTRAP_SERVERS": "127.0.0.1:19092"})
    claim({"TTS_WORKER_GROUP": "other"})
    mine, _ = claim({"TTS_WORKER_GROUP": "g"})
    assert mine == f"g-{HOST}-0"
    # the same cluster spelled with the servers in another order is the same scope
    a, _ = claim({"TTS_WORKER_GROUP": "h", "TTS_BOOTSTRAP_SERVERS": "k1:9092,k2:9092"})
    b, _ = claim({"TTS_WORKER_GROUP": "h", "TTS_BOOTSTRAP_SERVERS": "k2:9092, k1:9092"})
    assert (a, b) == (f"h-{HOST}-0", f"h-{HOST}-1")


def test_the_prefix_setting_names_the_ids_and_scopes_the_slots(claim) -> None:  # type: ignore[no-untyped-def]
    """Two groups given one prefix share its slots, so their ids still differ."""
    a, _ = claim({"TTS_WORKER_GROUP": "g1", "TTS_TRANSACTIONAL_ID_PREFIX": "acme-tts"})
    b, _ = claim({"TTS_WORKER_GROUP": "g2", "TTS_TRANSACTIONAL_ID_PREFIX": "acme-tts"})
    assert (a, b) == (f"acme-tts-{HOST}-0", f"acme-tts-{HOST}-1")


def test_stage_instance_ids_use_the_same_slots_by_app_id(claim) -> None:  # type: ignore[no-untyped-def]
    env = {"TTS_STAGE_APP_ID": "st", "TTS_WORKER_GROUP": "st"}
    w, _ = claim(env)  # a worker group named like the stage app holds worker slots, not stage ones
    (a, pa), (b, _) = claim(env, _STAGE), claim(env, _STAGE)
    assert (w, a, b) == (f"st-{HOST}-0", f"st-{HOST}-0", f"st-{HOST}-1")
    pa.kill()
    pa.wait(10)
    assert claim(env, _STAGE)[0] == a


def test_all_slots_taken_is_a_clear_fatal_error(tmp_path: Path) -> None:
    assert claim_slot("worker", "b:9092", "full", lock_dir=tmp_path, slots=1) == 0  # this process holds it
    # flock is per open file: a second open of the same lock in this process conflicts too
    with pytest.raises(FatalError, match="no free worker slot among 1 for 'full'"):
        claim_slot("worker", "b:9092", "full", lock_dir=tmp_path, slots=1)
    s = load_settings({"TTS_WORKER_GROUP": "full2"})
    assert claim_transactional_id(s, lock_dir=tmp_path, slots=2) == f"full2-{HOST}-0"


_HOLDER = ("import sys, time; from pathlib import Path; from streams.identity import claim_slot; "
           "print(claim_slot('worker', 'b:9092', sys.argv[2], lock_dir=Path(sys.argv[1]), slots=1), flush=True); "
           "time.sleep(120)")


def test_a_standby_takes_the_slot_its_holder_frees_at_once_and_can_be_told_to_stop(tmp_path: Path) -> None:
    import threading
    import time

    from streams.identity import slot_holder, wait_for_slot

    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), "sb"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "0"
        assert slot_holder("worker", "b:9092", "sb", 0, lock_dir=tmp_path) == p.pid
        stop = threading.Event()
        assert wait_for_slot("worker", "b:9092", "sb", 1, lock_dir=tmp_path, stop=lambda: True) is None
        got: list[tuple[int | None, float]] = []
        waiter = threading.Thread(target=lambda: got.append(
            (wait_for_slot("worker", "b:9092", "sb", 1, lock_dir=tmp_path, stop=stop.is_set), time.monotonic())))
        waiter.start()
        time.sleep(0.3)
        assert not got, "a standby took a slot its holder still holds"
        p.kill()  # SIGKILL: the kernel drops the lock
        p.wait(10)
        killed = time.monotonic()
        waiter.join(10)
        assert got and got[0][0] == 0
        assert got[0][1] - killed < 0.5  # woken by the kernel: at once, not a restart later
        assert slot_holder("worker", "b:9092", "sb", 0, lock_dir=tmp_path) == os.getpid()
    finally:
        p.kill()
        p.wait(10)
        if p.stdout:
            p.stdout.close()


def test_with_worker_slots_a_worker_started_while_all_are_held_is_a_standby(tmp_path: Path) -> None:
    from streams.worker.main import member_id, serving_slot

    s = load_settings({"TTS_WORKER_GROUP": "sbg", "TTS_WORKER_SLOTS": "1"})
    assert serving_slot(s, lock_dir=tmp_path) == 0
    assert member_id(s, 0) == f"sbg-{HOST}-0"
    assert serving_slot(s, lock_dir=tmp_path) is None  # the one slot is held (by this process)


def test_a_serving_slot_names_its_holders_transactional_id_for_the_next_holder(tmp_path: Path) -> None:
    from streams.identity import held_slot_note, note_in_held_slot, try_slot

    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), "nt"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "0"
        assert try_slot("worker", "b:9092", "nt", 0, lock_dir=tmp_path) is None  # held by a live process
    finally:
        p.kill()
        p.wait(10)
        if p.stdout:
            p.stdout.close()
    assert claim_slot("worker", "b:9092", "nt", lock_dir=tmp_path, slots=1) == 0  # freed by the kill
    assert held_slot_note("worker", "b:9092", "nt", 0, lock_dir=tmp_path) == ""
    note_in_held_slot("worker", "b:9092", "nt", 0, "nt-host-7", lock_dir=tmp_path)
    note_in_held_slot("worker", "b:9092", "nt", 0, "nt-host-3", lock_dir=tmp_path)  # replaces, never appends
    assert held_slot_note("worker", "b:9092", "nt", 0, lock_dir=tmp_path) == "nt-host-3"
    with pytest.raises(ValueError):
        held_slot_note("worker", "b:9092", "nt", 1, lock_dir=tmp_path)  # not held by this process
    f = try_slot("worker", "b:9092", "nt", 1, lock_dir=tmp_path)
    assert f is not None and try_slot("worker", "b:9092", "nt", 0, lock_dir=tmp_path) is None
    f.close()


_PRIORITY_PROBE = """
import json, os, sys, threading
from streams.worker.main import _yield_while_starting
if sys.argv[1] == "unprivileged" and os.geteuid() == 0:
    os.setuid(65534)  # nobody: may lower its priority, never raise it again (imports done: root's files)
    import ctypes  # as if started as nobody: a setuid makes /proc/self root's until the process is dumpable again
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE

def nice(tid=0):
    return os.getpriority(os.PRIO_PROCESS, tid)

def group():  # None without autogroups, or in the root one (init's session, as CI's runner may be: an empty file)
    try:
        return int(open("/proc/self/autogroup").read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None

before, group_before = nice(), group()
restore = _yield_while_starting()
seen = {"before": before, "lowered": restore is not None, "main_while_starting": nice(),
        "group_before": group_before, "group_while_starting": group()}
started = []
t = threading.Thread(target=lambda: (started.append(threading.get_native_id()), threading.Event().wait(2)))
t.start()
while not started:
    pass
seen["thread_while_starting"] = nice(started[0])
if restore is not None:
    restore()
seen["main_after"], seen["thread_after"], seen["group_after"] = nice(), nice(started[0]), group()
print(json.dumps(seen))
"""


def _priorities(mode: str, *, own_session: bool = False) -> dict[str, object]:
    import json

    out = subprocess.run([sys.executable, "-c", _PRIORITY_PROBE, mode], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2], start_new_session=own_session)
    assert out.returncode == 0, out.stderr  # the probe's traceback, not only its exit status
    return dict(json.loads(out.stdout))


def _autogroups() -> bool:
    return Path("/proc/self/autogroup").exists()


def test_a_standby_starts_at_the_lowest_cpu_priority_and_every_thread_gets_its_own_back_before_the_wait() -> None:
    back_up = ("import os; n = os.getpriority(os.PRIO_PROCESS, 0); os.setpriority(os.PRIO_PROCESS, 0, n + 1); "
               "os.setpriority(os.PRIO_PROCESS, 0, n)")
    if subprocess.run([sys.executable, "-c", back_up], capture_output=True, timeout=60).returncode != 0:
        pytest.skip("this process may not raise a priority again (no CAP_SYS_NICE or RLIMIT_NICE; CI runs as root)")
    seen = _priorities("privileged")
    b, g = seen["before"], seen["group_after"]
    assert seen == {"before": b, "lowered": True, "main_while_starting": 19, "thread_while_starting": 19,
                    "main_after": b, "thread_after": b,
                    # not its session's leader: its autogroup is shared (here with pytest), so left alone
                    "group_before": g, "group_while_starting": g, "group_after": g}


def test_a_standby_that_could_not_raise_its_priority_again_does_not_lower_it() -> None:
    seen = _priorities("unprivileged")
    b, g = seen["before"], seen["group_after"]
    assert seen == {"before": b, "lowered": False, "main_while_starting": b, "thread_while_starting": b,
                    "main_after": b, "thread_after": b, "group_before": g, "group_while_starting": g, "group_after": g}


@pytest.mark.parametrize("mode", ["privileged", "unprivileged"])
def test_a_standby_leading_its_own_session_also_lowers_its_autogroup_and_raises_it_again(mode: str) -> None:
    """With sched_autogroup, Linux shares the CPU between sessions before threads: a supervisor's worker
    (``setsid``) at thread nice 19 took nothing from the worker of another session. Raising an autogroup
    back to 0 needs no privilege, so an unprivileged standby yields through it too."""
    if not _autogroups():
        pytest.skip("this kernel has no autogroups (/proc/self/autogroup)")
    seen = _priorities(mode, own_session=True)
    assert seen["lowered"] is True
    assert seen["group_before"] == 0
    assert seen["group_while_starting"] == 19
    assert seen["group_after"] == 0
