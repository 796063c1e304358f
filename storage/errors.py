"""Errors of the storage layer (S3 audio store, Redis cache).

``StorageError`` is the root (under the project's :class:`~schemas.TtsflowError`). ``S3Unavailable`` and ``RedisUnavailable`` are retriable:
the server could not be reached or answered with a server-side error; the same call may
succeed later. ``ObjectMissing`` means S3 answered and the object is not there.
``StorageConfigError`` is fatal: credentials or bucket are wrong, retrying cannot help.
"""

from __future__ import annotations

from schemas.errors import TtsflowError

__all__ = ["ObjectMissing", "RedisUnavailable", "S3Unavailable", "StorageConfigError", "StorageError"]


class StorageError(TtsflowError):
    """Root of storage errors."""

    retriable = False


class S3Unavailable(StorageError):
    """S3 is unreachable or failing (connection refused, timeout, 5xx): retry with backoff."""

    retriable = True


class RedisUnavailable(StorageError):
    """Redis is unreachable or failing: the cache is bypassed until it answers again."""

    retriable = True


class ObjectMissing(StorageError):
    """The object does not exist in the bucket."""


class StorageConfigError(StorageError):
    """Access denied, bucket missing, bad endpoint: fix the configuration."""
