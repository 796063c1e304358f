"""Who is calling, and whether they may call now: bearer API keys and per-key limits.

Guarantees:

* Keys come from one JSON file (a mounted Kubernetes Secret works the same):
  ``{"<key>": "<user id>"}`` or ``{"<key>": {"user": "<user id>", "rate_per_s": 2,
  "burst": 5, "concurrency": 4}}``. A key is looked up by its SHA-256, so no key is kept in
  memory in the clear after loading and no comparison leaks its prefix through timing.
* Without a key file the gateway is open: every caller is one user
  (``TTS_GATEWAY_OPEN_USER``), for local use; :func:`load_keys` returns ``None`` and the
  gateway logs that loudly at start.
* Limits: a token bucket per key (``rate_per_s`` tokens a second, ``burst`` at most) and a
  count of its requests in flight (``concurrency``); over either, :meth:`Limiter.enter`
  raises 429 with ``Retry-After`` (whole seconds until a token is back; 1 for concurrency).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.gateway.errors import ApiError, KeyFileError

__all__ = ["ApiKey", "KeyRing", "Limiter", "load_keys"]


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One key's owner and limits (0: unlimited)."""

    user: str
    rate_per_s: float = 0.0
    burst: int = 0
    concurrency: int = 0
    name: str = ""  # the first characters of the key's hash: what logs and metrics may show


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Keys by their SHA-256."""

    def __init__(self, keys: dict[str, ApiKey]) -> None:
        self._by_digest = {_digest(k): v for k, v in keys.items()}

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, authorization: str | None) -> ApiKey:
        """The key of an ``Authorization: Bearer <key>`` header; 401 if missing or unknown."""
        if not authorization:
            raise ApiError(401, "Missing API key: send it as 'Authorization: Bearer <key>'.",
                           type="invalid_request_error", code="missing_api_key")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise ApiError(401, "Malformed Authorization header: expected 'Bearer <key>'.",
                           type="invalid_request_error", code="invalid_api_key")
        found = self._by_digest.get(_digest(token))
        if found is None:
            raise ApiError(401, "Incorrect API key provided.", type="invalid_request_error", code="invalid_api_key")
        return found


def _entry(key: str, value: object, where: str) -> ApiKey:
    name = _digest(key)[:12]
    user: object
    limits: dict[str, object]
    if isinstance(value, str):
        user, limits = value, {}
    elif isinstance(value, dict):
        user, limits = value.get("user"), value
    else:
        raise KeyFileError(f"{where}: the value of key {name}... must be a user id or an object")
    if not isinstance(user, str) or not 1 <= len(user) <= 256:
        raise KeyFileError(f"{where}: key {name}... needs a user id of 1-256 characters")
    try:
        rate = float(limits.get("rate_per_s", 0) or 0)  # type: ignore[arg-type]
        burst = int(limits.get("burst", 0) or 0)  # type: ignore[call-overload]
        conc = int(limits.get("concurrency", 0) or 0)  # type: ignore[call-overload]
    except (TypeError, ValueError) as e:
        raise KeyFileError(f"{where}: key {name}...: {e}") from None
    if rate < 0 or burst < 0 or conc < 0:
        raise KeyFileError(f"{where}: key {name}...: limits must not be negative")
    return ApiKey(user, rate, burst or max(1, math.ceil(rate)), conc, name)


def load_keys(path: str) -> KeyRing | None:
    """The key ring of ``path``; None when ``path`` is empty (the gateway is open)."""
    if not path:
        return None
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise KeyFileError(f"API key file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise KeyFileError(f"API key file {path} is not JSON: {e}") from None
    if isinstance(raw, dict) and isinstance(raw.get("keys"), dict):
        raw = raw["keys"]
    if not isinstance(raw, dict) or not raw:
        raise KeyFileError(f"API key file {path} must be a non-empty JSON object {{key: user id}}")
    return KeyRing({str(k): _entry(str(k), v, path) for k, v in raw.items()})


class Limiter:
    """Token buckets and in-flight counts per key. Thread-safe; ``clock`` injected for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[float, float]] = {}  # key name -> (tokens, at)
        self._inflight: dict[str, int] = {}

    def enter(self, key: ApiKey) -> None:
        """Take a token and a concurrency slot, or raise 429 with ``Retry-After``."""
        with self._lock:
            if key.concurrency and self._inflight.get(key.name, 0) >= key.concurrency:
                raise ApiError(429, f"Too many concurrent requests for this key (limit {key.concurrency}).",
                               type="rate_limit_error", code="concurrency_limit_exceeded",
                               headers={"Retry-After": "1"})
            if key.rate_per_s:
                now = self._clock()
                tokens, at = self._tokens.get(key.name, (float(key.burst), now))
                tokens = min(float(key.burst), tokens + (now - at) * key.rate_per_s)
                if tokens < 1.0:
                    wait = (1.0 - tokens) / key.rate_per_s
                    self._tokens[key.name] = (tokens, now)
                    raise ApiError(429, f"Rate limit reached for this key ({key.rate_per_s:g} requests/s).",
                                   type="rate_limit_error", code="rate_limit_exceeded",
                                   headers={"Retry-After": str(max(1, math.ceil(wait)))})
                self._tokens[key.name] = (tokens - 1.0, now)
            self._inflight[key.name] = self._inflight.get(key.name, 0) + 1

    def leave(self, key: ApiKey) -> None:
        with self._lock:
            n = self._inflight.get(key.name, 0) - 1
            if n > 0:
                self._inflight[key.name] = n
            else:
                self._inflight.pop(key.name, None)
