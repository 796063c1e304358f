"""Kafka and S3 plumbing shared by the demo, the chaos run, the pipeline benchmark and e2e tests.

:class:`Publisher` and :class:`TopicReader` are :mod:`streams.bench.plain`'s (only
``streams.kafka`` and the product rooms talk to confluent-kafka), re-exported here. Guarantees:

* :class:`Publisher` produces the way the README tells users to: ``murmur2_random``
  partitioner (Java/faust compatible), key = user id, idempotent, ``acks=all``; a
  delivery failure is raised from :meth:`Publisher.flush`, never swallowed.
* :class:`TopicReader` sees only committed records (``isolation.level=read_committed``),
  reads every partition of one topic by assignment (no consumer group is created), from
  the beginning or from the end offsets at construction (so a run on shared topics reads
  only what came after it started), and stamps each record with the local receive time.
* :func:`isolated` gives a run its own topics, consumer groups and transactional ids, so
  runs on one broker never see each other's records.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streams.bench.plain import Publisher, Record, TopicReader
from streams.settings import Settings

__all__ = [
    "Publisher",
    "Record",
    "TopicReader",
    "cleanup_run",
    "cleanup_run_topics",
    "delete_run_objects",
    "delete_run_topics",
    "isolated",
    "new_run_id",
    "paired_ratio",
    "percentile",
    "pin_threads",
    "process_cpu_s",
    "redis_db_url",
    "require_stack_up",
    "s3_client",
    "sha256_hex",
    "wait_for",
]


def new_run_id() -> str:
    """A short id unique per run: time of day plus random hex (valid in topic names and request ids)."""
    return time.strftime("%H%M%S") + secrets.token_hex(3)


def isolated(settings: Settings, run_id: str) -> Settings:
    """``settings`` with topics, groups, ids and an S3 prefix (``<prefix>runs/<run_id>/``, its audio:
    removed with the topics by :func:`cleanup_run`) of their own for run ``run_id``."""
    return settings.replace(
        s3_prefix=f"{settings.s3.s3_prefix}runs/{run_id}/",
        topic_requests=f"{settings.kafka.topic_requests}.{run_id}",
        topic_segments=f"{settings.kafka.topic_segments}.{run_id}",
        topic_completed=f"{settings.kafka.topic_completed}.{run_id}",
        topic_dlq=f"{settings.kafka.topic_dlq}.{run_id}",
        topic_done=f"{settings.kafka.topic_done}.{run_id}",
        topic_chunks=f"{settings.kafka.topic_chunks}.{run_id}",
        topic_lexicons=f"{settings.kafka.topic_lexicons}.{run_id}",
        topic_lexicons_global=f"{settings.kafka.topic_lexicons_global}.{run_id}",
        stage_app_id=f"{settings.stage.stage_app_id}-{run_id}",
        worker_group=f"{settings.kafka.worker_group}-{run_id}",
    )


def redis_db_url(url: str, db: int) -> str:
    """``url`` (``redis://host:port/N``) pointed at database ``db``."""
    base, _, tail = url.rpartition("/")
    if not base.startswith(("redis://", "rediss://")) or not (tail == "" or tail.isdigit()):
        base = url.rstrip("/")
    return f"{base}/{db}"


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds process ``pid`` has used so far, all its threads (Linux /proc); None if
    it is unknown or gone."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def paired_ratio(num: Sequence[float], den: Sequence[float]) -> dict[str, Any] | None:
    """Ratios ``num[i] / den[i]`` of pairs measured side by side (a round of each, back to back): their
    median, their geometric mean and its 95 % confidence interval (Student's t over the log ratios), so
    a claim such as "costs under 2 %" can be read against the run's own noise. None for no pair."""
    logs = [math.log(a / b) for a, b in zip(num, den, strict=True) if a > 0 and b > 0]
    if not logs:
        return None
    n = len(logs)
    mean = sum(logs) / n
    out: dict[str, Any] = {"pairs": n, "median": round(math.exp(percentile(logs, 50) or 0.0), 4),
                           "geomean": round(math.exp(mean), 4), "ci95": None}
    if n >= 2:
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = _T975[min(n - 1, len(_T975)) - 1] * sd / math.sqrt(n)
        out["ci95"] = [round(math.exp(mean - half), 4), round(math.exp(mean + half), 4)]
    return out


# Student's t, 97.5th percentile, for 1..30 degrees of freedom (the last one serves beyond)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def pin_threads(pid: int | None, cpus: set[int]) -> bool:
    """Every thread of process ``pid`` onto ``cpus`` (threads started later inherit their starter's
    CPUs); False if none could be (no such process, no ``sched_setaffinity``)."""
    if pid is None or not hasattr(os, "sched_setaffinity"):
        return False
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    pinned = False
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
            pinned = True
        except OSError:  # a thread that ended meanwhile
            continue
    return pinned


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client for the settings' endpoint (checksums only when required: s3proxy)."""
    from storage.s3 import s3_client as client

    return client(settings.s3.s3_endpoint, settings.s3.s3_access_key, settings.s3.s3_secret_key, settings.s3.s3_region,
                  ca_bundle=settings.s3.s3_ca_bundle,
                  retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=30)


def wait_for(pred: Callable[[], bool], *, timeout: float, interval: float = 0.2, what: str = "condition") -> float:
    """Poll ``pred()`` until true; seconds waited. Raises ``TimeoutError`` naming ``what``."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - t0



def cleanup_run(s: Settings, say: Callable[[str], None], *, keep_audio: bool = False) -> int:
    """After a benchmark: its run's topics (:func:`cleanup_run_topics`) and, unless ``keep_audio``, its
    audio in S3 (:func:`delete_run_objects`; a run of ``bench latency`` leaves ~0.7 GB, which a
    developer's stack kept for good before 2026-12-05). Objects deleted; failures go to ``say``."""
    cleanup_run_topics(s, say)
    if keep_audio:
        return 0
    try:
        return delete_run_objects(s)
    except Exception as e:
        say(f"s3 cleanup failed: {e}")
        return 0


def delete_run_objects(s: Settings) -> int:
    """Delete every object under a run's S3 prefix (:func:`isolated`; a prefix that is not a run's is
    refused: never a bucket's whole content). The number deleted."""
    prefix = s.s3.s3_prefix
    if "runs/" not in prefix or not prefix.endswith("/"):
        raise ValueError(f"not a run's S3 prefix: {prefix!r}")
    client = s3_client(s)
    n = 0
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=s.s3.s3_bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=s.s3.s3_bucket, Delete={"Objects": keys, "Quiet": True})
                n += len(keys)
    finally:
        client.close()
    return n


def cleanup_run_topics(s: Settings, say: Callable[[str], None]) -> None:
    """:func:`delete_run_topics`, reporting a failure through ``say`` instead of raising: a
    benchmark's cleanup must not hide the run's result or error."""
    try:
        delete_run_topics(s)
    except Exception as e:
        say(f"cleanup failed: {e}")


def delete_run_topics(s: Settings) -> None:
    """Delete a run's topics (see :func:`isolated`) and the stage's internal ones (named after its app id)."""
    from streams.devstack import stack
    from streams.kafka.admin import topic_names

    names = [s.kafka.topic_requests, s.kafka.topic_segments, s.kafka.topic_completed, s.kafka.topic_dlq, s.kafka.topic_done, s.kafka.topic_chunks]
    existing = topic_names(s.kafka)
    names += [t for t in existing if t.startswith((s.stage.stage_app_id + "-", s.stage.stage_app_id + "."))]
    stack.delete_topics(s, [n for n in names if n in existing])


def require_stack_up(settings: Settings) -> None:
    """Raise ``RuntimeError`` naming the services of the local stack that do not answer."""
    from streams.devstack import stack

    down = [k for k, v in stack.status(settings).items() if not v["ok"]]
    if down:
        raise RuntimeError(f"stack not up ({', '.join(down)}): run `ttsflow stack up`")


def status_kb(pid: int | None, field_name: str) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``, ...); None if unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_status_mib(pid: int | None, field_name: str) -> float | None:
    """:func:`status_kb` in MiB, one decimal."""
    kb = status_kb(pid, field_name)
    return None if kb is None else round(kb / 1024, 1)
