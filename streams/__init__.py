"""Everything that knows Kafka: the stage, the worker, the client, lag and scaling, the CLI."""

from streams.client import AsyncTTSClient, TTSClient

__all__ = ["AsyncTTSClient", "TTSClient"]
