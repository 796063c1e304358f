"""The client's reader of ``tts.chunks``: one per client, on a thread of its own.

Guarantees: it is positioned (``lookback_s`` back) before it returns, so a caller that
registers a listener and then publishes sees every chunk of its request; chunks of
requests nobody listens for are dropped; a failure of the reader is kept for the
callers to raise, never lost on its thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from schemas import Chunk, SchemaError, decode_chunk
from streams.client.errors import StackUnavailable
from streams.client.readers import partitions, reader, start_offsets
from streams.kafka.consumer import consume_ready
from streams.settings import KafkaSettings

__all__ = ["ChunkReader"]

_log = logging.getLogger("ttsflow.client")


class ChunkReader:
    """One ``read_committed`` reader of ``tts.chunks`` on a thread of its own: each chunk of a
    request id with listeners goes to them (on this thread); chunks nobody listens for are
    dropped, so a streaming caller registers before it publishes. A failure of the reader is
    kept in :attr:`failure` for the callers to raise."""

    def __init__(self, kafka: KafkaSettings, connect_timeout: float, lookback_s: float = 5.0) -> None:
        self._consumer = reader(kafka)
        try:
            parts = partitions(self._consumer, kafka.topic_chunks, connect_timeout)
            since = int((time.time() - lookback_s) * 1000)
            self._consumer.assign(start_offsets(self._consumer, kafka.topic_chunks, parts, since, connect_timeout))
        except Exception:
            self._consumer.close()
            raise
        self._lock = threading.Lock()
        self._listeners: dict[str, list[Callable[[Chunk], None]]] = {}
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ttsflow-client-chunks", daemon=True)
        self._thread.start()

    def add(self, request_id: str, listener: Callable[[Chunk], None]) -> None:
        with self._lock:
            self._listeners.setdefault(request_id, []).append(listener)

    def remove(self, request_id: str, listener: Callable[[Chunk], None]) -> None:
        with self._lock:
            ls = self._listeners.get(request_id, [])
            if listener in ls:
                ls.remove(listener)
            if not ls:
                self._listeners.pop(request_id, None)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for m in consume_ready(self._consumer, 500, 0.1):
                    if m.error() is not None:
                        if m.error().fatal():
                            raise StackUnavailable(f"chunks reader: {m.error().str()}")
                        continue  # transient (or end of partition): librdkafka retries by itself
                    try:
                        ch = decode_chunk(m.value())
                    except SchemaError as e:
                        _log.warning("event=bad_chunk partition=%s offset=%s error=%s", m.partition(), m.offset(), e)
                        continue
                    with self._lock:
                        listeners = list(self._listeners.get(ch.request_id, ()))
                    for listener in listeners:
                        listener(ch)
        except BaseException as e:
            self.failure = e
        finally:
            self._consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
