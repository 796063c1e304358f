"""Errors of the client (:class:`~streams.client.TTSClient`): what a user of it catches.

All are :class:`ClientError`, under the streams root :class:`~streams.errors.StreamError`;
:class:`StackUnavailable` is also retriable (try again later); :class:`AccessDenied` is fatal.
"""

from __future__ import annotations

from typing import Any

from streams.errors import KafkaAccessError, RetriableError, StreamError

__all__ = ["AccessDenied", "AudioFetchError", "ClientError", "CompletionTimeout", "NoWords", "RequestFailed",
           "StackUnavailable"]


class ClientError(StreamError):
    """Root of the errors :class:`streams.client.TTSClient` raises."""


class StackUnavailable(ClientError, RetriableError):
    """Kafka (or S3) did not answer in time: the stack is down or unreachable."""


class AccessDenied(ClientError, KafkaAccessError):
    """Kafka refused this client (wrong password, unknown user, untrusted CA): retrying cannot help."""


class CompletionTimeout(ClientError, TimeoutError):
    """No completion for the request arrived within the timeout (it may still come)."""

    def __init__(self, request_id: str, timeout: float) -> None:
        super().__init__(f"no completion for request {request_id!r} within {timeout:g} s")
        self.request_id = request_id
        self.timeout = timeout


class RequestFailed(ClientError):
    """The request's completion says ``failed``; ``code`` and ``message`` say why."""

    def __init__(self, request_id: str, code: str, message: str, completion: Any = None) -> None:
        super().__init__(f"request {request_id!r} failed: {code}: {message}")
        self.request_id = request_id
        self.code = code
        self.message = message
        self.completion = completion


class AudioFetchError(ClientError):
    """The audio could not be downloaded, or its bytes do not match the completion's sha256."""


class NoWords(ClientError):
    """The request has no word timings: it did not ask for them (``timestamps=True``), or its voice
    cannot time words (``reason``: the completion's ``words_reason``)."""

    def __init__(self, request_id: str, reason: str | None) -> None:
        super().__init__(f"request {request_id!r} has no word timings: "
                         f"{reason or 'it was not submitted with timestamps=True'}")
        self.request_id = request_id
        self.reason = reason
