"""A worker without Kafka, S3 or Redis: an in-memory broker (logs, committed offsets,
transactions), store and cache, a tone voice, and :class:`Rig`, which runs a real
:class:`~streams.worker.loop.Worker` against them. For unit tests of the loop's protocol."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from datetime import UTC, datetime
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from engine.base import Backend, ModelInfo, Prepared, SynthItem
from engine.engine import Engine
from engine.errors import ItemError
from schemas import Segment, decode_completion, encode, request_hash, segment_hash
from storage.errors import ObjectMissing, S3Unavailable
from storage.s3 import content_key
from streams.settings import Settings
from streams.worker.loop import Worker
from streams.worker.metrics import WorkerMetrics

SEG, DONE, COMPLETED = "segs", "done", "completed"


# -- fakes --------------------------------------------------------------------------------

class Msg:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value
        self._ts = int(time.time() * 1000)

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)


class Broker:
    """Logs per (topic, partition), committed group offsets."""

    def __init__(self, partitions: int = 2) -> None:
        self.partitions = partitions
        self.logs: dict[tuple[str, int], list[Msg]] = {}
        self.committed: dict[int, int] = {}

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> None:
        log = self.logs.setdefault((topic, partition), [])
        log.append(Msg(topic, partition, len(log), key, value))

    def read(self, topic: str) -> list[Msg]:
        return [m for (t, _), log in sorted(self.logs.items()) if t == topic for m in log]


class FakeConsumer:
    def __init__(self, broker: Broker) -> None:
        self.b = broker
        self.pos: dict[int, int] = {}
        self.paused: set[int] = set()
        self.cb: dict[str, Any] = {}
        self.assigned: list[int] = []
        self.seeks: list[tuple[int, int]] = []

    def subscribe(self, topics: list[str], **cb: Any) -> None:
        self.cb = cb

    def assign_now(self, worker: Worker, parts: Sequence[int]) -> None:
        self.assigned = list(parts)
        for p in parts:
            self.pos[p] = self.b.committed.get(p, 0)
        worker.on_assign(self, [TopicPartition(SEG, p) for p in parts])

    def consume(self, n: int, timeout: float) -> list[Msg]:
        out: list[Msg] = []
        for p in self.assigned:
            if p in self.paused:
                continue
            log = self.b.logs.get((SEG, p), [])
            while self.pos[p] < len(log) and len(out) < n:
                out.append(log[self.pos[p]])
                self.pos[p] += 1
        return out

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in tps}

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.b.committed.get(tp.partition, -1001)) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        off = tp.offset if tp.offset >= 0 else 0
        self.pos[tp.partition] = off
        self.seeks.append((tp.partition, off))

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def close(self) -> None:
        pass


class FakeReader:
    """The done-topic reader: nothing to read (the tests preload the broker's done log directly)."""

    def __init__(self, broker: Broker) -> None:
        self.b = broker
        self._queue: list[Any] = []

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 0 if self.b.logs.get((DONE, tp.partition)) else -1)
                for tp in tps]

    def assign(self, tps: list[TopicPartition]) -> None:
        class Eof:
            def __init__(self, p: int) -> None:
                self.p = p

            def error(self) -> Any:
                return KafkaError(KafkaError._PARTITION_EOF)

            def partition(self) -> int:
                return self.p

        self._queue = [m for tp in tps for m in self.b.logs.get((DONE, tp.partition), [])]
        self._queue += [Eof(tp.partition) for tp in tps]

    def consume(self, n: int, timeout: float) -> list[Any]:
        out, self._queue = self._queue[:n], self._queue[n:]
        return out

    def unassign(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakeProducer:
    def __init__(self, broker: Broker) -> None:
        self.b = broker
        self.buf: list[tuple[str, int, bytes, bytes]] = []
        self.offsets: dict[int, int] = {}
        self.fail_commit: list[KafkaException] = []
        self.calls: list[str] = []

    def init_transactions(self, timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")
        self.buf, self.offsets = [], {}

    def produce(self, topic: str, key: bytes, value: bytes, partition: int | None = None) -> None:
        if partition is None:
            partition = int(hashlib.md5(key).hexdigest(), 16) % self.b.partitions
        self.buf.append((topic, partition, key, value))

    def send_offsets_to_transaction(self, tps: list[TopicPartition], meta: Any, timeout: float) -> None:
        assert meta == "group-metadata"
        self.offsets = {tp.partition: tp.offset for tp in tps}

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        if self.fail_commit:
            raise self.fail_commit.pop(0)
        for topic, p, k, v in self.buf:
            self.b.append(topic, p, k, v)
        for p, off in self.offsets.items():
            assert off >= self.b.committed.get(p, 0), "committed offsets went backwards"
            self.b.committed[p] = off
        self.buf, self.offsets = [], {}

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        self.buf, self.offsets = [], {}

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


class FakeStore:
    bucket = "bucket"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.down = False
        self.puts = 0
        self.metadata: dict[str, dict[str, str]] = {}

    def key(self, kind: str, digest: str, ext: str) -> str:
        return content_key("a/", kind, digest, ext)

    def uri(self, key: str) -> str:
        return f"s3://bucket/{key}"

    def _check(self) -> None:
        if self.down:
            raise S3Unavailable("connection refused")

    def put(self, key: str, data: bytes, content_type: str = "", *, sha256: str | None = None) -> str:
        self._check()
        self.puts += 1
        self.objects[key] = data
        return sha256 or hashlib.sha256(data).hexdigest()

    def put_file(self, key: str, f: Any, content_type: str = "", *, metadata: dict[str, str] | None = None) -> tuple[str, int]:
        f.seek(0)
        data = f.read()
        digest = self.put(key, data)
        self.metadata[key] = {**(metadata or {}), "sha256": digest}
        return digest, len(data)

    def get(self, key: str) -> bytes:
        self._check()
        if key not in self.objects:
            raise ObjectMissing(key)
        return self.objects[key]

    def head(self, key: str) -> dict[str, Any] | None:
        self._check()
        if key not in self.objects:
            return None
        meta = self.metadata.get(key, {})
        return {"bytes": len(self.objects[key]), "sha256": meta.get("sha256"), "metadata": meta}

    def ping(self) -> None:
        self._check()


class FakeCache:
    def __init__(self) -> None:
        self.d: dict[str, str] = {}
        self.on_error: Any = None

    def get(self, digest: str) -> str | None:
        return self.d.get(digest)

    def set(self, digest: str, key: str) -> bool:
        self.d[digest] = key
        return True

    def delete(self, digest: str) -> None:
        self.d.pop(digest, None)


class ToneBackend(Backend):
    """A deterministic 'voice': one short tone per item; text containing FAIL is unspeakable."""

    info = ModelInfo(name="tone", version="1", precision="fp32", provider="CPUExecutionProvider")
    sample_rate = 8000
    voices = ("heart",)
    default_voice = "heart"

    def __init__(self) -> None:
        self.inferred: list[str] = []

    def prepare(self, item: SynthItem) -> Prepared:
        if "FAIL" in item.text:
            raise ItemError("cannot speak this")
        return Prepared(item, len(item.text), len(item.text))

    def infer(self, batch: Sequence[Prepared]) -> list[Any]:
        self.inferred += [p.item.text for p in batch]
        return [p.payload for p in batch]

    def postprocess(self, raw: Any, prepared: Prepared) -> np.ndarray:
        t = np.arange(800 + 800 * int(raw)) / self.sample_rate  # 0.1 s per character: passes the audio check
        return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


# -- harness ------------------------------------------------------------------------------

def segments(rid: str, user: str, texts: list[str]) -> list[Segment]:
    hashes = [segment_hash(t, voice="heart", model="tone", model_version="1", speed=1.0, sample_rate=None,
                           format="wav") for t in texts]
    now = datetime.now(UTC)
    return [Segment(request_id=rid, user_id=user, seq=i, total=len(texts), text=t, hash=h,
                    request_hash=request_hash(hashes, format="wav"), voice="heart", created_at=now,
                    parts=hashes if i == len(texts) - 1 else None) for i, (t, h) in enumerate(zip(texts, hashes,
                                                                                                     strict=True))]


class Rig:
    def __init__(self, partitions: int = 2, max_batch: int = 4, *, backend: Backend | None = None,
                 lanes: int = 1) -> None:
        self.broker = Broker(partitions)
        self.store = FakeStore()
        self.cache = FakeCache()
        self.backend = backend or ToneBackend()
        self.lanes = lanes
        self.settings = Settings().replace(topic_segments=SEG, topic_done=DONE, topic_completed=COMPLETED,
                                 max_batch=max_batch, max_wait_ms=0, metrics_port=0)
        self.metrics = WorkerMetrics(0)
        self.now = 1000.0
        self.new_worker()

    def new_worker(self, *, consumer: FakeConsumer | None = None, producer: Any = None, engine: Any = None,
                   **worker_kw: Any) -> Worker:
        """A fresh worker process on the same broker/store (a restart); a test swaps in its own
        consumer, producer or engine (a wedged producer, a model manager) and extra Worker arguments."""
        self.consumer = consumer or FakeConsumer(self.broker)
        self.producer = producer or FakeProducer(self.broker)
        self.worker = Worker(self.settings.kafka, self.settings.batching,
                             engine or Engine(self.backend, max_batch=self.settings.batching.max_batch), self.store,
                             self.cache, self.metrics, dedup_window_s=self.settings.stage.dedup_window_s,
                             consumer=self.consumer, producer=self.producer, reader=FakeReader(self.broker),
                             overlap=False, clock=lambda: self.now, **({"lanes": self.lanes} | worker_kw))
        self.consumer.assign_now(self.worker, range(self.broker.partitions))
        return self.worker

    def publish(self, partition: int, segs: list[Segment]) -> None:
        for s in segs:
            self.broker.append(SEG, partition, s.user_id.encode(), encode(s))

    def run(self, steps: int = 30) -> None:
        for _ in range(steps):
            self.now += 0.1  # offsets-only commits happen at most every 0.25 s of this clock
            self.worker.run_once()
            # joins and uploads run on the worker's pool: let them finish before the next turn
            futures.wait(self.worker.joiner.futures() + self.worker.parts.futures() + self.worker.checkpoint.futures(), 10)

    def run_until(self, cond: Callable[[], bool], max_steps: int = 30) -> None:
        """Turns of the loop until ``cond()`` holds (the model runs on its own thread: how many turns
        a request takes is the loop's business, not the test's)."""
        for _ in range(max_steps):
            self.run(steps=1)
            if cond():
                return
        raise AssertionError(f"not reached in {max_steps} turns of the loop")

    def completions(self) -> list[Any]:
        return [decode_completion(m.value()) for m in self.broker.read(COMPLETED)]

    def close(self) -> None:
        self.worker.close()
