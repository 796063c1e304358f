"""Errors of the gateway: each one is an HTTP answer in OpenAI's error shape.

``{"error": {"message", "type", "param", "code"}}`` with the status OpenAI would give:
400 bad input, 401 no or unknown key, 413 input too long, 422 a body that is not the
documented object, 429 over a key's rate or concurrency (with ``Retry-After``), 502 the
pipeline's storage failed, 503 the stack is unreachable, 504 the wait ran out (with the
request id in ``x-request-id``, so a retry with the same ``Idempotency-Key`` collects it).
"""

from __future__ import annotations

from typing import Any

from streams.errors import StreamError

__all__ = ["ApiError", "GatewayError", "KeyFileError", "TranscodeError"]


class GatewayError(StreamError):
    """Root of the gateway's errors."""


class KeyFileError(GatewayError):
    """The API key file is missing, unreadable or malformed (the gateway does not start)."""


class TranscodeError(GatewayError):
    """The pipeline's audio could not be turned into the asked format."""


class ApiError(GatewayError):
    """An answer to a caller: HTTP ``status`` and OpenAI's error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
