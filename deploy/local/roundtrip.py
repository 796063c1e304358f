"""A round trip through the local stack: the stand-in for ``make demo`` until the pipeline exists.

Publishes one v1 request to the requests topic in a Kafka transaction (murmur2 partitioner,
key = user id), reads it back with a ``read_committed`` consumer at the offset it was written
to, stores and fetches an object in S3, and sets and reads a key in Redis. Prints what it did
and exits non-zero if any step did not give back what it put in.

    .venv/bin/python deploy/local/roundtrip.py
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
import uuid
from datetime import UTC, datetime

import boto3
import redis
from botocore.config import Config
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from schemas import Request, decode_request, encode
from streams.settings import load_settings

# librdkafka's retry notices on a freshly started broker ("coordinator load in progress") are
# expected here; errors still show.
_KAFKA_LOG = logging.getLogger("roundtrip.kafka")
_KAFKA_LOG.setLevel(logging.ERROR)
_KAFKA_LOG.addHandler(logging.StreamHandler(sys.stderr))


def main() -> int:
    s = load_settings()
    rid = f"roundtrip-{uuid.uuid4().hex[:12]}"
    req = Request(request_id=rid, user_id="demo-user", text="Hello from the ttsflow round trip.",
                  created_at=datetime.now(UTC))

    # 1. Kafka: one transactional publish, read back read_committed.
    t0 = time.perf_counter()
    delivered: list[Message] = []
    p = Producer({"bootstrap.servers": s.bootstrap_servers, "partitioner": "murmur2_random",
                  "transactional.id": f"ttsflow-roundtrip-{uuid.uuid4().hex[:8]}", "logger": _KAFKA_LOG})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(s.topic_requests, key=req.user_id.encode(), value=encode(req),
              on_delivery=lambda err, msg: delivered.append(msg) if err is None else None)
    p.commit_transaction(30)
    if not delivered:
        print("roundtrip: the request was not delivered", file=sys.stderr)
        return 1
    part, off = delivered[0].partition(), delivered[0].offset()
    c = Consumer({"bootstrap.servers": s.bootstrap_servers, "group.id": f"roundtrip-{rid}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "logger": _KAFKA_LOG})
    try:
        c.assign([TopicPartition(s.topic_requests, part, off)])
        got = None
        deadline = time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and (m.error() is None or m.error().code() != KafkaError._PARTITION_EOF):
                got = m
    finally:
        c.close()
    if got is None or got.error() is not None or decode_request(got.value() or b"") != req:
        print(f"roundtrip: could not read request {rid} back from {s.topic_requests}[{part}]@{off}", file=sys.stderr)
        return 1
    kafka_ms = (time.perf_counter() - t0) * 1000
    print(f"kafka  published {rid} to {s.topic_requests}[{part}]@{off} in a transaction and read it back "
          f"read_committed ({kafka_ms:.0f} ms)")

    # 2. S3: put, then get the same bytes.
    s3 = boto3.session.Session().client(
        "s3", endpoint_url=s.s3_endpoint, region_name=s.s3_region, aws_access_key_id=s.s3_access_key,
        aws_secret_access_key=s.s3_secret_key,
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))
    body = encode(req)
    key = f"roundtrip/{rid}.json"
    s3.put_object(Bucket=s.s3_bucket, Key=key, Body=body, ContentType="application/json")
    back = s3.get_object(Bucket=s.s3_bucket, Key=key)["Body"].read()
    s3.delete_object(Bucket=s.s3_bucket, Key=key)
    s3.close()
    if back != body:
        print("roundtrip: S3 returned different bytes", file=sys.stderr)
        return 1
    print(f"s3     put and got s3://{s.s3_bucket}/{key} ({len(body)} bytes, sha256 "
          f"{hashlib.sha256(back).hexdigest()[:12]}...)")

    # 3. Redis: SET NX EX, then GET.
    r = redis.Redis.from_url(s.redis_url, socket_timeout=5)
    try:
        ok = r.set(f"roundtrip:{rid}", b"1", nx=True, ex=60)
        val = r.get(f"roundtrip:{rid}")
    finally:
        r.close()
    if not ok or val != b"1":
        print("roundtrip: Redis SET NX / GET failed", file=sys.stderr)
        return 1
    print(f"redis  SET NX EX 60 and GET roundtrip:{rid}")
    print("roundtrip: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
