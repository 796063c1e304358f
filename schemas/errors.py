"""Errors of the wire contract, and the root of every ttsflow error.

:class:`TtsflowError` is the one root of the whole project: ``schemas`` is the bottom
layer, so engine, storage and streams each hang their tree under it (``EngineError``,
``StorageError``, ``StreamError``, ``DevStackError``); ``except TtsflowError`` catches
anything ttsflow raises on purpose.

The contract's own root is :class:`SchemaError`, carrying a stable machine-readable ``code`` (what a
failed completion's ``error.code`` says) and, where it applies, the offending
``field``. Every decode failure is poison: the message can never become valid by
retrying, so callers record it (failed completion or dead letter) and move on.
"""

from __future__ import annotations

__all__ = ["ContentError", "InvalidField", "InvalidJSON", "InvalidSSML", "SchemaError", "TtsflowError"]


class TtsflowError(Exception):
    """Root of every error ttsflow raises on purpose (schemas, engine, storage, streams, tools)."""


class SchemaError(TtsflowError):
    """Bad input. ``code`` is stable and documented; ``message`` is for people."""

    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class InvalidJSON(SchemaError):
    """The bytes are not a JSON object (or not UTF-8)."""

    code = "invalid_json"


class InvalidField(SchemaError):
    """A field is missing, of the wrong type or outside its bounds; ``field`` names it."""

    code = "invalid_field"


class ContentError(SchemaError):
    """Well-formed but unservable content: ``empty_text``, ``text_too_long``,
    ``unknown_voice``, ``unsupported_format``, ``unsupported_language`` (the stage: text
    mostly in scripts its voice cannot speak)."""


class InvalidSSML(ContentError):
    """A ``text_type: ssml`` document that is not well-formed, not allowed (DTD, entities,
    external references) or past a bound (size, depth, elements), or an element with a bad
    attribute. The message starts with ``line L, column C:`` (1-based) and gives the reason."""

    code = "invalid_ssml"

    def __init__(self, reason: str, *, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {reason}", field="text")
        self.line, self.column, self.reason = line, column, reason
