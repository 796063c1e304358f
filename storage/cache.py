"""Redis cache: segment hash -> S3 key of its audio, with a TTL.

A cache, never a source of truth: :meth:`AudioCache.get` answers a miss and
:meth:`AudioCache.set` does nothing when Redis is unreachable or failing, so a Redis
outage makes the worker slower, never wrong and never stopped. Each such error is
counted (``errors``) and reported to an optional ``on_error`` hook; after an error the
cache stays bypassed for ``retry_after_s`` seconds (no connect timeout per segment),
then tries again, so it reconnects by itself when Redis is back.

Keys are ``<namespace><hex digest>``; values are S3 keys made of digests (see
``storage.s3.content_key``): nothing user-controlled is stored or used as a key.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["AudioCache", "redis_auth"]

_HEX = re.compile(r"^[0-9a-f]{16,128}$")


def redis_auth(url: str, username: str = "", password: str = "", ca_file: str = "") -> dict[str, Any]:
    """``redis.Redis.from_url`` options for an ACL user or password (given ones win over the URL's)
    and, on a ``rediss://`` URL, the CA that verifies the server (hostname checked)."""
    out: dict[str, Any] = {}
    if username:
        out["username"] = username
    if password:
        out["password"] = str.__str__(password)
    if url.startswith("rediss://"):
        out["ssl_cert_reqs"] = "required"
        if ca_file:
            out["ssl_ca_certs"] = ca_file
    return out


class RedisSection(Protocol):
    """What :meth:`AudioCache.from_section` reads: ``streams.settings.RedisSettings``."""

    @property
    def redis_url(self) -> str: ...
    @property
    def cache_ttl_s(self) -> int: ...
    @property
    def redis_username(self) -> str: ...
    @property
    def redis_password(self) -> str: ...
    @property
    def redis_ca_file(self) -> str: ...


class AudioCache:
    @classmethod
    def from_section(cls, redis: RedisSection, **options: Any) -> AudioCache:
        """The cache the Redis section describes; ``options`` are the constructor's (namespace, timeouts)."""
        options = {"username": redis.redis_username, "password": redis.redis_password,
                   "ca_file": redis.redis_ca_file, **options}
        return cls(redis.redis_url, redis.cache_ttl_s, **options)

    def __init__(self, redis_url: str, ttl_s: int, *, namespace: str = "ttsflow:seg:",
                 timeout_s: float = 0.5, retry_after_s: float = 2.0, username: str = "", password: str = "",
                 ca_file: str = "",
                 on_error: Callable[[str, BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        import redis

        self.ttl_s = int(ttl_s)
        self.namespace = namespace
        self.retry_after_s = retry_after_s
        self.on_error = on_error
        self.errors = 0
        self.hits = 0
        self.misses = 0
        self._clock = clock
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._redis: Any = redis.Redis.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
            health_check_interval=30, retry_on_timeout=False, **redis_auth(redis_url, username, password, ca_file))
        self._errors_t: tuple[type[BaseException], ...] = (redis.RedisError, OSError)

    @property
    def available(self) -> bool:
        """False while the cache is bypassed after an error."""
        return self._clock() >= self._down_until

    def _key(self, digest: str) -> str:
        if not _HEX.match(digest):
            raise ValueError(f"cache keys are hex digests, got {digest[:40]!r}")
        return self.namespace + digest

    def _failed(self, op: str, e: BaseException) -> None:
        with self._lock:
            self.errors += 1
            self._down_until = self._clock() + self.retry_after_s
        if self.on_error is not None:
            self.on_error(op, e)

    def get(self, digest: str) -> str | None:
        """The S3 key cached for this digest, or None (miss, or Redis unavailable)."""
        key = self._key(digest)
        if not self.available:
            self.misses += 1
            return None
        try:
            raw = self._redis.get(key)
        except self._errors_t as e:
            self._failed("get", e)
            self.misses += 1
            return None
        if raw is None:
            self.misses += 1
            return None
        self.hits += 1
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def set(self, digest: str, s3_key: str) -> bool:
        """Remember ``s3_key`` for ``digest`` for ``ttl_s``; False if Redis was unavailable."""
        key = self._key(digest)
        if not self.available:
            return False
        try:
            self._redis.set(key, s3_key, ex=self.ttl_s)
        except self._errors_t as e:
            self._failed("set", e)
            return False
        return True

    def delete(self, digest: str) -> None:
        """Forget a digest (a cached key whose object has gone)."""
        if not self.available:
            return
        try:
            self._redis.delete(self._key(digest))
        except self._errors_t as e:
            self._failed("delete", e)

    def close(self) -> None:
        self._redis.close()
