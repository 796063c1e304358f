"""``AsyncTTSClient``: :class:`~streams.client.sync.TTSClient` for asyncio.

The same machinery (one reader thread, one producer): its awaits bridge the background
thread's futures into the event loop and run blocking calls in the default executor, so
no await blocks the loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from schemas import Chunk, Completion, WordSpan
from streams.client.audio import raise_if_failed
from streams.client.errors import CompletionTimeout
from streams.client.sync import TTSClient
from streams.settings import Settings

__all__ = ["AsyncTTSClient"]


class AsyncTTSClient:
    """asyncio forms of :class:`TTSClient` over the same reader thread and producer."""

    def __init__(self, client: TTSClient) -> None:
        self.sync = client

    @classmethod
    async def connect(cls, settings: Settings | None = None, **kw: Any) -> AsyncTTSClient:
        loop = asyncio.get_running_loop()
        return cls(await loop.run_in_executor(None, lambda: TTSClient(settings, **kw)))

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.sync.close)

    async def __aenter__(self) -> AsyncTTSClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def submit(self, text: str, user_id: str, voice: str | None = None, format: str = "wav",
                     request_id: str | None = None, **kw: Any) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, lambda: self.sync.submit(text, user_id, voice=voice, format=format, request_id=request_id, **kw))

    async def wait(self, request_id: str, timeout: float = 60.0, *, raise_on_failure: bool = True) -> Completion:
        f = self.sync.wait_future(request_id)
        try:
            c = await asyncio.wait_for(asyncio.wrap_future(f), timeout)
        except TimeoutError:
            self.sync._forget(request_id, f)
            raise CompletionTimeout(request_id, timeout) from None
        if raise_on_failure:
            raise_if_failed(c)
        return c

    async def fetch(self, completion: Completion) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.fetch, completion)

    async def fetch_chunk(self, chunk: Chunk) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.fetch_chunk, chunk)

    async def stream(self, text: str, user_id: str, voice: str | None = None, format: str = "wav",
                     request_id: str | None = None, **kw: Any) -> AsyncIterator[Chunk | Completion]:
        """:meth:`TTSClient.stream` as an async iterator (each step waits in the default executor)."""
        loop = asyncio.get_running_loop()
        it = self.sync.stream(text, user_id, voice=voice, format=format, request_id=request_id, **kw)
        done = object()
        try:
            while True:
                item = await loop.run_in_executor(None, next, it, done)
                if item is done:
                    return
                yield item  # type: ignore[misc]
        finally:
            await loop.run_in_executor(None, it.close)

    async def words(self, completion: Completion) -> list[WordSpan]:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.words, completion)

    async def captions(self, completion: Completion, fmt: str = "vtt") -> str:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.captions, completion, fmt)

    async def save(self, completion: Completion, path: str | os.PathLike[str]) -> Path:
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.save, completion, path)
