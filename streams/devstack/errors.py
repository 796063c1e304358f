"""Errors of the local stack and the process supervisor: things a person (or a test) has to look at."""

from __future__ import annotations

__all__ = ["DevStackError", "ProcError", "StackError"]


class DevStackError(RuntimeError):
    """Root of the dev stack's errors."""


class StackError(DevStackError):
    """Something a person has to fix; the message is one line saying what."""


class ProcError(DevStackError):
    """A supervised process exited or did not become ready in time."""
