"""The Kafka side of a worker's start, on a thread while the model loads.

A restarted worker's ``init_transactions`` waits for the coordinator to end the transaction its
killed predecessor left open: librdkafka retries the fencing ``InitProducerId`` every 500 ms
while the coordinator answers ``CONCURRENT_TRANSACTIONS``, 0.5-1.0 s measured on the local
broker (``retry.backoff.ms`` does not shorten it). The model's load takes ~1.7 s on one core
of a 2-core machine and needs no broker, so the two overlap: the worker answers again sooner
after a SIGKILL. (Making the S3 and Redis clients beside them saved nothing: boto3's client is
Python, and so is most of the model's load; they took turns on the interpreter.)

Invariants:

* Best effort: whatever fails here (broker down, a refusal, a call past its deadline) is left to
  :meth:`streams.worker.loop.Worker.start`, which does it again with its retries; a producer whose
  ``init_transactions`` failed is never used, and the worker's start begins only after the thread
  ended (two producers of one transactional id in ``init_transactions`` at once fence each other).
* Only the fencing and the done topic's creation are done early; the group is joined (and
  partitions read) by the worker once its model is loaded, so a worker whose model fails to
  load never holds partitions.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from streams.settings import Settings

__all__ = ["KafkaPrelude", "KafkaReady"]

_log = logging.getLogger("ttsflow.worker")

_INIT_TIMEOUT_S = 10.0  # longer than the coordinator's abort of an open transaction; past it the worker retries


@dataclasses.dataclass(frozen=True)
class KafkaReady:
    """What a prelude finished: an initialised transactional producer and/or the done topic's partition count."""

    producer: Any = None
    done_partitions: int | None = None


class KafkaPrelude:
    """Runs the done topic's creation and ``init_transactions`` on a thread; :meth:`result` collects them."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: Any = None
        self._partitions: int | None = None
        self._seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="kafka-prelude", daemon=True)

    def start(self) -> KafkaPrelude:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Producer

        from streams.kafka import ensure_done_topic, transactional_config

        t0 = time.monotonic()
        kafka = self._settings.kafka
        try:
            self._partitions = ensure_done_topic(kafka, self._settings.stage.dedup_window_s)
        except Exception as e:  # the worker's start creates it, with retries
            _log.warning("event=prelude_skipped step=ensure_done_topic error=%s", e)
        try:
            p = Producer(transactional_config(kafka))
            p.init_transactions(_INIT_TIMEOUT_S)
            self._producer = p
        except Exception as e:  # the worker's start fences with a producer of its own, with retries
            _log.warning("event=prelude_skipped step=init_transactions error=%s", e)
        self._seconds = time.monotonic() - t0

    def result(self) -> KafkaReady:
        """What finished. Waits for the thread: a producer still in ``init_transactions`` must not
        fence the worker's own later, so it is never left running beside it. Bounded by the two
        calls' timeouts (10 s each); a SIGTERM meanwhile ends the process as during the model's load."""
        self._thread.join()
        _log.info("event=prelude_done seconds=%.2f transactions_ready=%s done_partitions=%s", self._seconds,
                  self._producer is not None, self._partitions)
        return KafkaReady(self._producer, self._partitions)
