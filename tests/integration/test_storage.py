"""AudioStore and AudioCache against the real S3 server and Redis of the local stack."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import uuid

import pytest

from storage import AudioCache, AudioStore, ObjectMissing, S3Unavailable, StorageConfigError, content_key
from streams.settings import Settings

pytestmark = pytest.mark.integration


def _store(s: Settings, endpoint: str | None = None) -> AudioStore:
    return AudioStore(endpoint or s.s3.s3_endpoint, s.s3.s3_bucket, s.s3.s3_access_key, s.s3.s3_secret_key, s.s3.s3_region,
                      f"test-{uuid.uuid4().hex[:8]}/", connect_timeout_s=0.5, read_timeout_s=2, max_attempts=1)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_put_get_head_roundtrip_is_content_addressed(stack_settings: Settings) -> None:
    store = _store(stack_settings)
    try:
        data = b"RIFF" + uuid.uuid4().bytes * 100
        digest = hashlib.sha256(data).hexdigest()
        key = store.key("part", digest, "wav")
        assert key.startswith(store.prefix + "part/") and key.endswith(f"{digest}.wav")
        assert store.head(key) is None and not store.exists(key)
        assert store.put(key, data, "audio/wav") == digest
        assert store.put(key, data, "audio/wav") == digest  # a retried upload is harmless
        assert store.get(key) == data
        head = store.head(key)
        assert head == {"bytes": len(data), "sha256": digest, "content_type": "audio/wav",
                        "metadata": {"sha256": digest}}
        assert store.uri(key) == f"s3://{stack_settings.s3.s3_bucket}/{key}"
        with pytest.raises(ObjectMissing):
            store.get(store.key("part", "ab" * 32, "wav"))
        # several objects at once (a timed request's words and captions): all stored, digests in order
        many = [(store.key("captions", hashlib.sha256(d).hexdigest(), "vtt"), d, "text/vtt")
                for d in (uuid.uuid4().bytes * k for k in (1, 50, 3))]
        assert store.put_many(many) == [hashlib.sha256(d).hexdigest() for _, d, _ in many]
        assert [store.get(k) for k, _, _ in many] == [d for _, d, _ in many]
    finally:
        store.close()


def _open_uploads(store: AudioStore, key: str) -> list[str]:
    resp = store._client.list_multipart_uploads(Bucket=store.bucket, Prefix=key)
    return [u["UploadId"] for u in resp.get("Uploads", [])]


def test_put_file_streams_a_large_object_in_parts(stack_settings: Settings) -> None:
    store = _store(stack_settings)
    key = store.key("req", "ef" * 32, "wav")
    data = os.urandom(21 * 1024 * 1024 + 123)  # three 8 MiB parts, the last one short
    try:
        sha, size = store.put_file(key, io.BytesIO(data), "audio/wav", metadata={"duration_s": "12.5"})
        assert (sha, size) == (hashlib.sha256(data).hexdigest(), len(data))
        head = store.head(key)
        assert head is not None and head["bytes"] == len(data) and head["sha256"] == sha
        assert head["content_type"] == "audio/wav" and head["metadata"]["duration_s"] == "12.5"
        assert store.get(key) == data and _open_uploads(store, key) == []
        small = store.key("req", "12" * 32, "wav")  # one part: a plain PUT
        assert store.put_file(small, io.BytesIO(b"tiny"), "audio/wav") == (hashlib.sha256(b"tiny").hexdigest(), 4)
        assert store.get(small) == b"tiny"
    finally:
        for k in (key, store.key("req", "12" * 32, "wav")):
            store._client.delete_object(Bucket=store.bucket, Key=k)
        store.close()


class _BreaksAfter(io.BytesIO):
    """A file whose second read of the upload pass fails (the spool's disk)."""

    def __init__(self, data: bytes, ok_reads: int) -> None:
        super().__init__(data)
        self.ok_reads = ok_reads

    def read(self, n: int | None = -1) -> bytes:
        if n is not None and n > 1 << 20:  # upload pass (the digest pass reads 1 MiB at a time)
            self.ok_reads -= 1
            if self.ok_reads < 0:
                raise OSError(5, "Input/output error")
        return super().read(n)


def test_a_failed_multipart_upload_is_aborted_and_leaves_no_object(stack_settings: Settings) -> None:
    store = _store(stack_settings)
    key = store.key("req", "ab" * 32, "wav")
    try:
        with pytest.raises(OSError):
            store.put_file(key, _BreaksAfter(os.urandom(17 * 1024 * 1024), ok_reads=1), "audio/wav")
        assert store.head(key) is None and _open_uploads(store, key) == []
    finally:
        store.close()


def test_keys_are_built_from_digests_only() -> None:
    with pytest.raises(ValueError):
        content_key("audio/", "part", "../../etc/passwd", "wav")
    with pytest.raises(ValueError):
        content_key("audio/", "part", "a" * 64, "wav/../x")
    assert content_key("audio/", "req", "ab" * 32, "ogg") == f"audio/req/ab/ab/{'ab' * 32}.ogg"


def test_a_put_is_signed_for_any_prefix_and_refused_as_the_client_would_refuse_it(stack_settings: Settings) -> None:
    s = stack_settings
    odd = AudioStore(s.s3.s3_endpoint, s.s3.s3_bucket, s.s3.s3_access_key, s.s3.s3_secret_key, s.s3.s3_region,
                     f"test {uuid.uuid4().hex[:8]}+é=/", max_attempts=1)  # a prefix that needs quoting
    wrong = AudioStore(s.s3.s3_endpoint, s.s3.s3_bucket, s.s3.s3_access_key, "not-the-secret", s.s3.s3_region,
                       max_attempts=1)
    nobucket = AudioStore(s.s3.s3_endpoint, f"no-bucket-{uuid.uuid4().hex[:8]}", s.s3.s3_access_key,
                          s.s3.s3_secret_key, s.s3.s3_region, max_attempts=1)
    key = odd.key("words", "ab" * 32, "json")
    try:
        assert odd.put(key, b"{}", "application/json") == hashlib.sha256(b"{}").hexdigest()
        assert odd.get(key) == b"{}" and odd._client.head_object(Bucket=odd.bucket, Key=key)["Metadata"] == \
            {"sha256": hashlib.sha256(b"{}").hexdigest()}
        # the HEAD signed here reads what the client's reads
        assert odd.head(key) == {"bytes": 2, "sha256": hashlib.sha256(b"{}").hexdigest(),
                                 "content_type": "application/json", "metadata": {"sha256": hashlib.sha256(b"{}").hexdigest()}}
        assert odd.head(odd.key("words", "cd" * 32, "json")) is None
        with pytest.raises(StorageConfigError):
            wrong.put(wrong.key("part", "cd" * 32, "wav"), b"x")
        with pytest.raises(StorageConfigError):
            wrong.head(wrong.key("part", "cd" * 32, "wav"))
        with pytest.raises(StorageConfigError):  # all sent at once, each refused: the refusal is raised
            wrong.put_many([(wrong.key("words", d * 32, "json"), b"{}", "application/json") for d in ("cd", "ef")])
        with pytest.raises(StorageConfigError):
            nobucket.put(nobucket.key("part", "cd" * 32, "wav"), b"x")
        assert nobucket.head(nobucket.key("part", "cd" * 32, "wav")) is None  # as the client: a 404 is no object
    finally:
        odd._client.delete_object(Bucket=odd.bucket, Key=key)
        for store in (odd, wrong, nobucket):
            store.close()


def test_put_many_redoes_alone_what_a_kept_alive_connection_the_server_dropped_could_not_send(
        stack_settings: Settings) -> None:
    store = _store(stack_settings)
    try:
        first = [(store.key("captions", uuid.uuid4().hex * 2, "vtt"), uuid.uuid4().bytes, "text/vtt") for _ in range(3)]
        store.put_many(first)  # leaves three kept-alive connections
        assert len(store._put._idle) == 3
        for conn in store._put._idle:  # as a server that timed them out would: gone under the client
            assert conn.sock is not None
            conn.sock.shutdown(socket.SHUT_RDWR)
        again = [(store.key("captions", uuid.uuid4().hex * 2, "srt"), uuid.uuid4().bytes * k, "text/srt")
                 for k in (1, 2, 3)]
        assert store.put_many(again) == [hashlib.sha256(d).hexdigest() for _, d, _ in again]
        assert [store.get(k) for k, _, _ in first + again] == [d for _, d, _ in first + again]
    finally:
        store.close()


def test_start_many_sends_now_and_its_wait_reads_the_answers_after_other_work(stack_settings: Settings) -> None:
    store = _store(stack_settings)
    try:
        objs = [(store.key("captions", uuid.uuid4().hex * 2, "vtt"), uuid.uuid4().bytes * k, "text/vtt") for k in (1, 2, 3)]
        pending = store.start_many(objs)
        assert store._put._idle == []  # the three connections wait for their answers
        other = store.key("words", uuid.uuid4().hex * 2, "json")
        store.put(other, b"{}", "application/json")  # the thread's other work meanwhile, on a connection of its own
        assert pending.wait() == [hashlib.sha256(d).hexdigest() for _, d, _ in objs]
        assert len(store._put._idle) == 4  # every answer read: each connection kept for the next request
        assert [store.get(k) for k, _, _ in objs] + [store.get(other)] == [d for _, d, _ in objs] + [b"{}"]
    finally:
        store.close()


def test_unreachable_s3_is_retriable(stack_settings: Settings) -> None:
    store = _store(stack_settings, endpoint=f"http://127.0.0.1:{_closed_port()}")
    try:
        with pytest.raises(S3Unavailable):
            store.put(store.key("part", "cd" * 32, "wav"), b"x")
        with pytest.raises(S3Unavailable):
            store.head(store.key("part", "cd" * 32, "wav"))
        with pytest.raises(S3Unavailable):
            store.ping()
    finally:
        store.close()


def test_cache_set_get_ttl(stack_settings: Settings, redis_client) -> None:
    ns = f"test:{uuid.uuid4().hex[:8]}:"
    cache = AudioCache(stack_settings.redis.redis_url, 60, namespace=ns)
    try:
        digest = hashlib.sha256(b"hello").hexdigest()
        assert cache.get(digest) is None
        assert cache.set(digest, "audio/part/aa/bb/x.wav")
        assert cache.get(digest) == "audio/part/aa/bb/x.wav"
        ttl = redis_client.ttl(ns + digest)
        assert 0 < ttl <= 60
        assert (cache.hits, cache.misses, cache.errors) == (1, 1, 0)
        with pytest.raises(ValueError):
            cache.get("not-a-digest")
    finally:
        cache.close()


def test_cache_bypasses_when_redis_is_down_and_reconnects(stack_settings: Settings) -> None:
    t = [0.0]
    seen: list[str] = []
    down = AudioCache(f"redis://127.0.0.1:{_closed_port()}/0", 60, retry_after_s=5, clock=lambda: t[0],
                      on_error=lambda op, e: seen.append(op))
    try:
        digest = "ef" * 32
        assert down.get(digest) is None  # a miss, not an exception
        assert down.set(digest, "k") is False
        assert down.errors == 1 and seen == ["get"]  # then bypassed without new connection attempts
        t[0] += 6
        assert down.get(digest) is None
        assert down.errors == 2
    finally:
        down.close()
    # the same object recovers once the server answers: point it at the real Redis
    up = AudioCache(stack_settings.redis.redis_url, 60, namespace=f"test:{uuid.uuid4().hex[:8]}:")
    try:
        assert up.available and up.set("ef" * 32, "k") and up.get("ef" * 32) == "k"
    finally:
        up.close()


def test_presigned_link_fetches_over_plain_http_until_it_expires(stack_settings: Settings) -> None:
    import time
    import urllib.error
    import urllib.request

    assert stack_settings.s3.s3_endpoint.startswith("http://")
    store = _store(stack_settings)
    try:
        data = b"RIFF" + uuid.uuid4().bytes * 64
        key = store.key("req", hashlib.sha256(data).hexdigest(), "wav")
        store.put(key, data, "audio/wav")
        assert store.presigned_url(key) is None  # off unless a TTL is set
        ttl = 2
        url = store.presigned_url(key, ttl)
        assert url is not None and url.startswith("http://") and stack_settings.s3.s3_secret_key not in url
        t0 = time.monotonic()
        with urllib.request.urlopen(url, timeout=5) as r:  # no credentials: the link is the permission
            assert r.read() == data
        deadline = t0 + ttl + 30
        status = 200
        while status == 200 and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                time.sleep(0.25)  # poll interval of the expiry check
            except urllib.error.HTTPError as e:
                status = e.code
        assert status == 403
    finally:
        store.close()
