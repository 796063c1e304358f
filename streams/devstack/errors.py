"""Errors of the local stack and the process supervisor: things a person (or a test) has to look at.

``DevStackError`` hangs directly under the project's root :class:`~schemas.TtsflowError`, not
under ``StreamError``: no pipeline process raises or catches it.
"""

from __future__ import annotations

from schemas.errors import TtsflowError

__all__ = ["DevStackError", "ProcError", "StackError"]


class DevStackError(TtsflowError):
    """Root of the dev stack's errors."""


class StackError(DevStackError):
    """Something a person has to fix; the message is one line saying what."""


class ProcError(DevStackError):
    """A supervised process exited or did not become ready in time."""
