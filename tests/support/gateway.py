"""Helpers of the gateway's tests: decode an answer with two independent decoders, call the
gateway over plain HTTP, and start a gateway process beside a real stage and worker."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from streams.gateway.audio import RATE

__all__ = ["decode_av", "decode_ffmpeg", "decode_pcm", "gateway_pipeline", "http", "wait_http"]


def decode_av(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float samples and rate as PyAV (FFmpeg's libraries in its wheel) decodes ``data``."""
    import av

    with av.open(io.BytesIO(data)) as c:
        frames = [f for f in c.decode(audio=0)]
    assert frames, "no audio frames"
    rate = frames[0].sample_rate
    x = np.concatenate([f.to_ndarray().astype(np.float32).reshape(f.to_ndarray().shape[0], -1).mean(axis=0)
                        if f.format.is_planar else f.to_ndarray().astype(np.float32).reshape(-1) for f in frames])
    if frames[0].format.name.startswith("s16"):
        x = x / 32768.0
    return x, rate


def decode_ffmpeg(data: bytes) -> tuple[np.ndarray, int] | None:
    """The same audio as Debian's ``ffmpeg`` command decodes it (s16le mono at 24 kHz); None without ffmpeg."""
    exe = shutil.which("ffmpeg")
    if exe is None:
        return None
    out = subprocess.run([exe, "-v", "error", "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", str(RATE), "pipe:1"],
                         input=data, capture_output=True, timeout=60, check=True)
    return np.frombuffer(out.stdout, "<i2").astype(np.float32) / 32768.0, RATE


def decode_pcm(data: bytes) -> tuple[np.ndarray, int]:
    assert len(data) % 2 == 0
    return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0, RATE


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 180.0) -> tuple[int, dict[str, str], bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not answering 200 after {timeout:.0f}s")
        time.sleep(0.2)


@contextmanager
def gateway_pipeline(logs: Path, prefix: str) -> Iterator[Any]:
    """A stage, a worker and a gateway on topics of their own on the shared stack, all ready;
    yields the gateway's process (``.settings.gateway_port``); the topics go afterwards."""
    from streams.bench.harness import isolated
    from streams.devstack.procs import Supervisor
    from streams.devstack.stack import ensure_topics
    from tests.integration.conftest import TEST_PARTITIONS, _cleanup
    from tests.support.stack import require_stack

    unique = f"{prefix}-{uuid.uuid4().hex[:8]}"
    s = isolated(require_stack(), unique).replace(partitions=TEST_PARTITIONS)
    ensure_topics(s, partitions=TEST_PARTITIONS)
    try:
        with Supervisor(logs) as sup:
            yield sup.serving(s, timeout=240)
    finally:
        _cleanup(s, unique)
