"""The OpenAI-compatible HTTP gateway: ``POST /v1/audio/speech`` on the Kafka pipeline.

Rooms: :mod:`~streams.gateway.app` (the FastAPI surface), :mod:`~streams.gateway.pipeline`
(publish, wait on the shared completions reader, idempotent retries),
:mod:`~streams.gateway.audio` (the six response formats), :mod:`~streams.gateway.auth`
(API keys and per-key limits), :mod:`~streams.gateway.metrics`, :mod:`~streams.gateway.main`
(``ttsflow gateway``). Kafka is reached only through :mod:`streams.client`.
"""

__all__ = ["build_app"]


def build_app(*args, **kwargs):  # type: ignore[no-untyped-def]
    """:func:`streams.gateway.app.build_app`, imported on use (FastAPI is the ``gateway`` extra)."""
    from streams.gateway.app import build_app as build

    return build(*args, **kwargs)
