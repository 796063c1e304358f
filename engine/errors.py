"""Errors of the engine.

``EngineError`` is the root. ``ItemError`` is poison for one item (its text cannot be
spoken by this voice): the worker fails that request only. ``BackendError`` means the
model itself failed on a batch: every item of the batch fails with it. ``ModelLoadError``
is fatal at start-up and a refusal (old model kept) at hot reload.
"""

from __future__ import annotations

__all__ = ["BackendError", "EngineError", "ItemError", "ModelLoadError", "UnknownVoice"]


class EngineError(Exception):
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
