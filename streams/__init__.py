"""Everything that knows Kafka: the stage, the worker, the client, lag and scaling, the CLI.

``from streams import TTSClient`` (and ``AsyncTTSClient``) is the SDK, imported on first use and
not with the package, so a worker or a stage (re)starting does not import the SDK's asyncio
clients (aiokafka, redis.asyncio).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.client import AsyncTTSClient, TTSClient

__all__ = ["AsyncTTSClient", "TTSClient"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import streams.client

        return getattr(streams.client, name)
    raise AttributeError(f"module 'streams' has no attribute {name!r}")
