"""Errors of the engine.

``EngineError`` is the root (under the project's :class:`~schemas.TtsflowError`). ``ItemError`` is poison for one item (its text cannot be
spoken by this voice): the worker fails that request only. ``BackendError`` means the
model itself failed on a batch: every item of the batch fails with it. ``ModelLoadError``
is fatal at start-up and a refusal (old model kept) at hot reload. ``StoreError`` (the
versioned model store) and ``ConversionError`` (fp16/int8 conversion) are operator errors.
"""

from __future__ import annotations

from schemas.errors import TtsflowError

__all__ = ["BackendError", "ConversionError", "EngineError", "ItemError", "ModelLoadError", "StoreError", "UnknownVoice"]


class EngineError(TtsflowError):
    """Root of the engine's errors; ``code`` is the completion's error code for it."""

    code = "engine_error"


class ItemError(EngineError):
    """One item cannot be synthesized (empty after the front end, unsupported text)."""

    code = "synthesis_failed"


class UnknownVoice(ItemError):
    code = "unknown_voice"


class BackendError(EngineError):
    """The model failed on a whole batch."""

    code = "engine_error"


class ModelLoadError(EngineError):
    """A model could not be loaded or failed its health check."""

    code = "model_load_failed"


class StoreError(EngineError):
    """A model version is missing, malformed, or its file does not match its manifest."""

    code = "model_store"


class ConversionError(EngineError):
    """The graph could not be converted, or the converted graph does not load."""

    code = "conversion_failed"
