"""Getting a completion's (or a chunk's) audio: download it, verify it, write it to a file.

Guarantees: bytes are returned only if their SHA-256 matches the event's
(:class:`AudioFetchError` otherwise); a failed completion raises :class:`RequestFailed`
with its code and message; ``write_atomic`` never leaves a partial file at ``path``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from schemas import AudioRef, Chunk, Completion
from streams.client.errors import AudioFetchError, RequestFailed
from streams.settings import S3Settings

__all__ = ["audio_ref", "fetch_audio", "fetch_chunk", "raise_if_failed", "write_atomic"]


def raise_if_failed(c: Completion) -> None:
    if c.status == "failed":
        code = c.error.code if c.error else "unknown"
        msg = c.error.message if c.error else "no error detail in the completion"
        raise RequestFailed(c.request_id, code, msg, completion=c)


def audio_ref(c: Completion) -> Any:
    raise_if_failed(c)
    if c.audio is None:
        raise AudioFetchError(f"completion of {c.request_id!r} carries no audio reference")
    return c.audio


def fetch_audio(s3: S3Settings, completion: Completion, *, store: Any = None) -> bytes:
    """Download a completion's audio and verify its SHA-256; :class:`AudioFetchError` otherwise."""
    return _fetch_ref(s3, audio_ref(completion), repr(completion.request_id), store)


def fetch_chunk(s3: S3Settings, chunk: Chunk, *, store: Any = None) -> bytes:
    """Download one chunk's audio and verify its SHA-256; :class:`AudioFetchError` otherwise."""
    return _fetch_ref(s3, chunk.audio, f"{chunk.request_id!r} chunk {chunk.seq}", store)


def _fetch_ref(s3: S3Settings, a: AudioRef, what: str, store: Any) -> bytes:
    from storage import AudioStore, StorageError

    own = store is None
    if own:
        store = AudioStore.from_section(s3, bucket=a.bucket, prefix="")
    try:
        data: bytes = store.get(a.key)
    except StorageError as e:
        raise AudioFetchError(f"audio of {what} at s3://{a.bucket}/{a.key}: {e}") from e
    finally:
        if own:
            store.close()
    digest = hashlib.sha256(data).hexdigest()
    if digest != a.sha256:
        raise AudioFetchError(f"audio of {what} at s3://{a.bucket}/{a.key} has sha256 "
                              f"{digest}, its event says {a.sha256}")
    return data


def write_atomic(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
