"""Content-addressed audio in an S3-compatible bucket.

Guarantees:

* Keys are built by :func:`content_key` from hex digests only (never from raw user
  strings), so a key is safe in any S3 implementation and the same content always lands
  at the same key: a retried or repeated upload writes the same bytes and needs no
  coordination.
* :meth:`AudioStore.put` returns the SHA-256 of what it stored and only returns once S3
  has acknowledged the object. :meth:`AudioStore.put_file` stores a file of any size with
  at most one part (``part_bytes``, 8 MiB) in memory: multipart above one part, each part
  retried on its own, an unfinished upload aborted; S3 never has to hold an object whole
  in one request.
* Failures are classified: unreachable endpoint, timeouts and 5xx raise
  :class:`S3Unavailable` (retriable); a missing object raises :class:`ObjectMissing`;
  access denied or a missing bucket raise :class:`StorageConfigError`.

boto3 >= 1.36 sends CRC checksum headers by default that some S3 servers (s3proxy)
reject; the client asks for checksums only when an operation requires them.

A single-request PUT (every part, a request's audio up to 8 MiB, its words and captions)
skips boto3's per-call machinery (parameter validation, endpoint rules, event hooks,
response parsing: 2-3 ms of CPU a call, more than a second of hibari's audio costs to
synthesize): it is signed here (SigV4, the payload signed by the SHA-256 computed anyway)
and sent on a kept-alive connection of :mod:`storage.http1`, headers and body in one write
(~0.12 ms of CPU for a small object, 0.32 through ``http.client``), verified against the same
CA bundle, retried like the client retries, its errors classified the same way. A HEAD (one per
join, one per cached part) is signed and sent the same way (0.1-0.2 ms of CPU against the
client's 1.3 ms here). An endpoint reached through an environment proxy keeps the client's PUT
and HEAD.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import http.client
import re
import ssl
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import IO, Any, Protocol
from urllib.parse import quote, urlsplit

from storage.errors import ObjectMissing, S3Unavailable, StorageConfigError, StorageError
from storage.http1 import Answer, Http1

__all__ = ["AudioStore", "content_key", "s3_client"]

_HEX = re.compile(r"^[0-9a-f]{16,128}$")
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
_CONFIG_CODES = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket"}
PART_BYTES = 8 * 1024 * 1024  # multipart part size (S3: >= 5 MiB except the last, <= 10,000 parts)
_PART_ATTEMPTS = 3            # tries per part (on top of botocore's own retry)
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def s3_client(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1", *, ca_bundle: str = "",
              **config: Any) -> Any:
    """The one way ttsflow builds a boto3 S3 client: path-style addressing, and checksums only
    when an operation requires them (boto3 >= 1.36 sends CRC headers by default that s3proxy
    refuses). ``ca_bundle``: a PEM file that verifies an https endpoint signed by a private CA
    (empty: the system's trust store). ``config``: further ``botocore.config.Config`` options
    (timeouts, retries, pool)."""
    import boto3
    from botocore.config import Config

    cfg = Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                 response_checksum_validation="when_required", **config)
    return boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=region,
                                          aws_access_key_id=access_key, aws_secret_access_key=secret_key, config=cfg,
                                          verify=ca_bundle or None)


def content_key(prefix: str, kind: str, digest: str, ext: str) -> str:
    """``<prefix><kind>/<d[0:2]>/<d[2:4]>/<digest>.<ext>`` from a hex digest only."""
    if not _HEX.match(digest):
        raise ValueError(f"content keys are built from hex digests, got {digest[:40]!r}")
    if not re.match(r"^[a-z0-9]{1,16}$", kind) or not re.match(r"^[a-z0-9]{1,8}$", ext):
        raise ValueError(f"bad key kind/ext {kind!r}/{ext!r}")
    return f"{prefix}{kind}/{digest[:2]}/{digest[2:4]}/{digest}.{ext}"


class S3Section(Protocol):
    """What :meth:`AudioStore.from_section` reads: ``streams.settings.S3Settings`` (storage imports nothing of streams)."""

    @property
    def s3_endpoint(self) -> str: ...
    @property
    def s3_bucket(self) -> str: ...
    @property
    def s3_access_key(self) -> str: ...
    @property
    def s3_secret_key(self) -> str: ...
    @property
    def s3_region(self) -> str: ...
    @property
    def s3_prefix(self) -> str: ...
    @property
    def s3_ca_bundle(self) -> str: ...
    @property
    def s3_presign_ttl_s(self) -> int: ...


class AudioStore:
    """One bucket on one S3 endpoint. Thread-safe (boto3 clients are)."""

    @classmethod
    def from_section(cls, s3: S3Section, *, bucket: str | None = None, prefix: str | None = None,
                     **options: Any) -> AudioStore:
        """The store the S3 section describes; ``bucket``/``prefix`` override its own (a completion's bucket,
        the baseline's prefix), ``options`` are the constructor's timeouts and attempts."""
        options = {"ca_bundle": s3.s3_ca_bundle, "presign_ttl_s": s3.s3_presign_ttl_s, **options}
        return cls(s3.s3_endpoint, s3.s3_bucket if bucket is None else bucket, s3.s3_access_key, s3.s3_secret_key,
                   s3.s3_region, s3.s3_prefix if prefix is None else prefix, **options)

    def __init__(self, endpoint: str, bucket: str, access_key: str, secret_key: str,
                 region: str = "us-east-1", prefix: str = "", *, connect_timeout_s: float = 2.0,
                 read_timeout_s: float = 10.0, max_attempts: int = 2, ca_bundle: str = "",
                 presign_ttl_s: int = 0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix
        self.presign_ttl_s = presign_ttl_s
        self._new_client = functools.partial(s3_client, self.endpoint, access_key, secret_key, region,
                                             ca_bundle=ca_bundle, signature_version="s3v4",
                                             connect_timeout=connect_timeout_s, read_timeout=read_timeout_s,
                                             retries={"max_attempts": max_attempts, "mode": "standard"},
                                             max_pool_connections=16)
        self._client_made: Future[Any] | None = None  # boto3's client, made on first use or by warm()
        self._client_lock = threading.Lock()
        self._lock = threading.Lock()
        self._put = _SignedPut(self.endpoint, bucket, access_key, secret_key, region, ca_bundle=ca_bundle,
                               timeout=(connect_timeout_s, read_timeout_s), attempts=max_attempts,
                               fallback=self._client_put)

    def warm(self) -> AudioStore:
        """Make boto3's client on a thread now (0.2-0.3 s of Python): a worker's start need not wait for
        it, since PUTs and HEADs go without it; its first GET, presign or multipart upload waits for the rest."""
        with self._client_lock:
            if self._client_made is None:
                fut: Future[Any] = Future()
                threading.Thread(target=self._make_client, args=(fut,), name="s3-client", daemon=True).start()
                self._client_made = fut
        return self

    def _make_client(self, fut: Future[Any]) -> None:
        try:
            fut.set_result(self._new_client())
        except BaseException as e:  # raised where the client is first used
            fut.set_exception(e)

    @property
    def _client(self) -> Any:
        with self._client_lock:
            if self._client_made is None:  # not warmed: made here, now
                self._client_made = Future()
                self._make_client(self._client_made)
            made = self._client_made
        return made.result()

    # -- keys ----------------------------------------------------------------------
    def key(self, kind: str, digest: str, ext: str) -> str:
        return content_key(self.prefix, kind, digest, ext)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def presigned_url(self, key: str, ttl_s: int | None = None) -> str | None:
        """A GET link to ``key`` that anyone holding it can fetch without credentials for ``ttl_s``
        (default ``presign_ttl_s``) seconds, or None when that is 0. Signed locally (SigV4 query
        string): no request to S3."""
        ttl = self.presign_ttl_s if ttl_s is None else ttl_s
        if ttl <= 0:
            return None
        return str(self._client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": key},
                                                       ExpiresIn=int(ttl)))

    # -- operations ----------------------------------------------------------------
    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream", *,
            sha256: str | None = None) -> str:
        """Store ``data`` at ``key``; returns its SHA-256 hex digest once S3 acknowledged it (``sha256``:
        the caller's, already computed)."""
        digest = sha256 or hashlib.sha256(data).hexdigest()
        (self._put.fallback or self._put)(key, data, content_type, {"sha256": digest}, digest)
        return digest

    def put_many(self, objects: Sequence[tuple[str, bytes, str]]) -> list[str]:
        """:meth:`put` of each ``(key, data, content_type)`` at once, from the calling thread: every
        request is sent, each on a kept-alive connection of its own, before any answer is read (so a
        request's words and captions wait about one round trip, not one each, with no thread to hand
        them to: the CPU of three PUTs one after the other). Returns their SHA-256 hex digests in order
        once S3 acknowledged all of them; the first error is raised after all ended."""
        return self.start_many(objects).wait()

    def start_many(self, objects: Sequence[tuple[str, bytes, str]], digests: Sequence[str] | None = None) -> PendingPuts:
        """:meth:`put_many`'s requests sent now, their answers read by the returned
        :meth:`PendingPuts.wait` (which the caller must call, also on its own error path: it ends
        the connections): the thread does other work (a join) while S3 stores them. ``digests``:
        the objects' SHA-256 hex digests where the caller has them already."""
        digests = list(digests) if digests is not None else [hashlib.sha256(data).hexdigest() for _, data, _ in objects]
        if self._put.fallback is not None or len(objects) <= 1:  # through a proxy: the client's, one at a time
            return PendingPuts([self.put(key, data, ctype, sha256=d)
                                for (key, data, ctype), d in zip(objects, digests, strict=True)])
        puts = [(key, data, ctype, {"sha256": d}, d) for (key, data, ctype), d in zip(objects, digests, strict=True)]
        return PendingPuts(digests, self._put, puts, self._put.send_all(puts))

    def _client_put(self, key: str, data: bytes, content_type: str, metadata: dict[str, str], _digest: str) -> None:
        self._call("put_object", Bucket=self.bucket, Key=key, Body=data, ContentType=content_type, Metadata=metadata)

    def put_file(self, key: str, f: IO[bytes], content_type: str = "application/octet-stream", *,
                 metadata: dict[str, str] | None = None, part_bytes: int = PART_BYTES) -> tuple[str, int]:
        """Store the seekable file ``f`` (from its start) at ``key``; (sha256, bytes) once S3 acknowledged it.

        The digest is computed in a first pass (it goes into the object's metadata, which S3
        takes at the start of an upload); then the file is sent in ``part_bytes`` pieces, one
        in memory at a time: a single PUT when it fits in one, else a multipart upload whose
        parts are retried ``_PART_ATTEMPTS`` times each and which is aborted if it fails.
        """
        h = hashlib.sha256()
        f.seek(0)
        size = 0
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
        digest = h.hexdigest()
        meta = {**(metadata or {}), "sha256": digest}
        f.seek(0)
        if size <= part_bytes:
            (self._put.fallback or self._put)(key, f.read(), content_type, meta, digest)
            return digest, size
        upload_id = self._call("create_multipart_upload", Bucket=self.bucket, Key=key, ContentType=content_type,
                               Metadata=meta)["UploadId"]
        try:
            parts = []
            number = 1
            while body := f.read(part_bytes):
                etag = self._upload_part(key, upload_id, number, body)
                parts.append({"PartNumber": number, "ETag": etag})
                number += 1
            self._call("complete_multipart_upload", Bucket=self.bucket, Key=key, UploadId=upload_id,
                       MultipartUpload={"Parts": parts})
        except BaseException:
            try:
                self._call("abort_multipart_upload", Bucket=self.bucket, Key=key, UploadId=upload_id)
            except StorageError:
                pass  # S3 drops an upload left unfinished by its lifecycle rule; nothing is visible meanwhile
            raise
        return digest, size

    def _upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        for attempt in range(_PART_ATTEMPTS):
            try:
                resp = self._call("upload_part", Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number,
                                  Body=body)
                return str(resp["ETag"])
            except S3Unavailable:
                if attempt == _PART_ATTEMPTS - 1:
                    raise
                time.sleep(0.5 * 2 ** attempt)
        raise AssertionError("unreachable")

    def get(self, key: str) -> bytes:
        """The object's bytes; ``ObjectMissing`` if there is none."""
        from botocore.exceptions import BotoCoreError
        from urllib3.exceptions import HTTPError

        resp = self._call("get_object", Bucket=self.bucket, Key=key)
        try:
            return bytes(resp["Body"].read())
        except (BotoCoreError, HTTPError, OSError) as e:  # the connection broke mid-body
            raise S3Unavailable(f"s3 get {key}: reading the body failed: {e}") from e
        finally:
            resp["Body"].close()

    def head(self, key: str) -> dict[str, Any] | None:
        """``{"bytes", "sha256", "content_type", "metadata"}`` of an object, or None if it does not exist
        (signed here like a PUT: a HEAD per join and per cached part)."""
        if self._put.fallback is None:
            headers = self._put.head(key)
            if headers is None:
                return None
            meta = {k[len("x-amz-meta-"):]: v for k, v in headers.items() if k.startswith("x-amz-meta-")}
            return {"bytes": int(headers.get("content-length", 0)), "sha256": meta.get("sha256"),
                    "content_type": headers.get("content-type"), "metadata": meta}
        try:
            resp = self._call("head_object", Bucket=self.bucket, Key=key)
        except ObjectMissing:
            return None
        meta = resp.get("Metadata") or {}
        return {"bytes": int(resp.get("ContentLength", 0)), "sha256": meta.get("sha256"),
                "content_type": resp.get("ContentType"), "metadata": dict(meta)}

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def ping(self) -> None:
        """Raise unless the bucket answers (``S3Unavailable`` / ``StorageConfigError``)."""
        self._call("head_bucket", Bucket=self.bucket)

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (the local stack and tests)."""
        try:
            self.ping()
        except StorageConfigError:
            self._call("create_bucket", Bucket=self.bucket)

    def close(self) -> None:
        with self._client_lock:
            made = self._client_made
        if made is not None:  # (a client never made is not made to be closed)
            with contextlib.suppress(Exception):  # one that failed to be made has nothing to close
                made.result().close()
        self._put.close()

    # -- error mapping -------------------------------------------------------------
    def _call(self, op: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, op)(**kwargs)
        except ClientError as e:
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            where = f"s3 {op} {kwargs.get('Key', kwargs.get('Bucket'))}"
            if code in _MISSING_CODES and op in ("get_object", "head_object"):
                raise ObjectMissing(f"{where}: not found") from e
            if code in _CONFIG_CODES or (status == 404 and op == "head_bucket"):
                raise StorageConfigError(f"{where}: {code or status} {err.get('Message', '')}".rstrip()) from e
            if status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout", "InternalError"):
                raise S3Unavailable(f"{where}: {code or status}") from e
            raise StorageError(f"{where}: {code or status} {err.get('Message', '')}".rstrip()) from e
        except BotoCoreError as e:  # connection refused/reset, timeouts, endpoint unreachable
            raise S3Unavailable(f"s3 {op}: {type(e).__name__}: {e}") from e


class _SignedPut:
    """One PUT or HEAD request, signed with AWS Signature Version 4 here and sent on a kept-alive
    :class:`storage.http1.Http1` connection (a PUT's headers and body in one write), without
    boto3's per-call pipeline. Raises what :meth:`AudioStore._call` raises for the same answers; retries
    connection errors, 5xx and throttling up to ``attempts`` tries as the client's standard
    mode does (a kept-alive connection the server closed is retried at once on a new one). An
    endpoint behind an environment proxy goes through the client instead (``fallback``)."""

    def __init__(self, endpoint: str, bucket: str, access_key: str, secret_key: str, region: str, *,
                 ca_bundle: str, timeout: tuple[float, float], attempts: int, fallback: Any = None) -> None:
        from botocore.utils import get_environ_proxies

        url = urlsplit(endpoint)
        self._https = url.scheme == "https"
        self._host, self._port, self._netloc = url.hostname or "", url.port, url.netloc
        self._base = "/" + (url.path.strip("/") + "/" if url.path.strip("/") else "") + quote(bucket, safe="") + "/"
        self._access_key, self._secret = access_key, secret_key
        self._region = region
        self._timeout = timeout
        self._attempts = max(1, attempts)
        self._ca_bundle = ca_bundle
        self._ssl: Any = None
        self._day_key: tuple[str, bytes] = ("", b"")  # (day, its signing key): _signing_key
        self._idle: list[Http1] = []
        self._lock = threading.Lock()
        self.fallback = fallback if get_environ_proxies(endpoint) else None

    def __call__(self, key: str, data: bytes, content_type: str, metadata: dict[str, str], digest: str) -> None:
        status, _, body = self._send("PUT", key, data, _put_headers(content_type, metadata, digest))
        if status >= 300:
            raise _classified(f"s3 put_object {key}", status, body)

    def send_all(self, puts: Sequence[tuple[str, bytes, str, dict[str, str], str]]) -> list[Http1 | None]:
        """Each PUT of ``puts`` (what :meth:`__call__` takes) sent, each on a connection of its own, no
        answer read (:meth:`finish` reads them); None where one could not be sent."""
        sent: list[Http1 | None] = []
        for key, data, ctype, metadata, digest in puts:
            path = self._path(key)
            conn: Http1 | None = None
            try:
                conn, _ = self._connection()
                conn.send("PUT", path, self._signed("PUT", path, _put_headers(ctype, metadata, digest)), data)
            except (OSError, http.client.HTTPException):  # a kept-alive one the server closed, among others
                if conn is not None:
                    conn.close()
                conn = None
            sent.append(conn)
        return sent

    def finish(self, puts: Sequence[tuple[str, bytes, str, dict[str, str], str]], sent: Sequence[Http1 | None]) -> None:
        """The answers to :meth:`send_all`'s PUTs. One that could not be sent or read, or got an answer
        worth retrying, is done again alone (:meth:`__call__`, with its retries); the first error is
        raised after all ended."""
        error: StorageError | None = None
        for put, conn in zip(puts, sent, strict=True):
            try:
                if conn is not None:
                    try:
                        answer = conn.answer()
                    except (OSError, http.client.HTTPException):
                        conn.close()
                    else:
                        self._keep(conn, answer)
                        if answer.status < 300:
                            continue
                        got = _classified(f"s3 put_object {put[0]}", answer.status, answer.body)
                        if not isinstance(got, S3Unavailable):
                            raise got
                self(*put)  # again, alone
            except StorageError as e:
                error = error or e
        if error is not None:
            raise error

    def head(self, key: str) -> dict[str, str] | None:
        """The object's response headers (names in lower case), None if there is none."""
        status, headers, body = self._send("HEAD", key, None, {"x-amz-content-sha256": _EMPTY_SHA256})
        if status == 404:
            return None
        if status >= 300:
            raise _classified(f"s3 head_object {key}", status, body)
        return headers

    def _send(self, method: str, key: str, data: bytes | None, headers: dict[str, str]
              ) -> tuple[int, dict[str, str], bytes]:
        """The answer to one signed request (status, headers, body), retried as the module doc says;
        an answer S3 keeps giving (4xx, or 5xx past the tries) is returned for the caller to classify."""
        path = self._path(key)
        attempt = 0
        while True:
            conn: Http1 | None = None
            reused = False
            try:
                conn, reused = self._connection()
                conn.send(method, path, self._signed(method, path, headers), data)
                answer = conn.answer(head=method == "HEAD")
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out, closed
                if conn is not None:
                    conn.close()
                if reused and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                    continue  # the server closed a kept-alive connection: not a try
                error: StorageError = S3Unavailable(f"s3 {method.lower()} {key}: {type(e).__name__}: {e}")
            else:
                self._keep(conn, answer)
                retriable = answer.status >= 300 and isinstance(_classified("", answer.status, answer.body), S3Unavailable)
                attempt += 1
                if not retriable or attempt >= self._attempts:
                    return answer.status, answer.headers, answer.body
                time.sleep(min(20.0, 0.1 * 2 ** attempt))
                continue
            attempt += 1
            if attempt >= self._attempts:
                raise error
            time.sleep(min(20.0, 0.1 * 2 ** attempt))

    def _path(self, key: str) -> str:
        return self._base + quote(key, safe="/~")

    def _keep(self, conn: Http1, answer: Answer) -> None:
        """``conn``, its answer read, back to the idle ones (closed if the server said it closes it)."""
        if answer.closes:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)

    def _connection(self) -> tuple[Http1, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        tls = None
        if self._https:
            if self._ssl is None:
                from botocore.httpsession import get_cert_path

                self._ssl = ssl.create_default_context(cafile=self._ca_bundle or get_cert_path(True))
            tls = self._ssl
        return Http1(self._host, self._port or (443 if self._https else 80), connect_timeout_s=self._timeout[0],
                     read_timeout_s=self._timeout[1], tls=tls), False

    def _signed(self, method: str, path: str, extra: dict[str, str]) -> dict[str, str]:
        """The request's headers with its SigV4 ``Authorization`` (payload signed by the SHA-256 in
        ``extra["x-amz-content-sha256"]``)."""
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        day = amz_date[:8]
        headers = {**extra, "host": self._netloc, "x-amz-date": amz_date}
        names = sorted(headers)
        signed = ";".join(names)
        canonical = "\n".join([method, path, "", "".join(f"{k}:{' '.join(headers[k].split())}\n" for k in names),
                               signed, headers["x-amz-content-sha256"]])
        scope = f"{day}/{self._region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self._access_key}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        return headers

    def _signing_key(self, day: str) -> bytes:
        """SigV4's key for ``day`` (four HMACs of the secret), derived once a day."""
        got = self._day_key
        if got[0] != day:
            k = ("AWS4" + self._secret).encode()
            for part in (day, self._region, "s3", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            got = self._day_key = (day, k)
        return got[1]

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class PendingPuts:
    """PUTs sent by :meth:`AudioStore.start_many`, their answers not read yet."""

    def __init__(self, digests: list[str], put: _SignedPut | None = None,
                 puts: Sequence[tuple[str, bytes, str, dict[str, str], str]] = (),
                 sent: Sequence[Http1 | None] = ()) -> None:
        self._digests, self._put, self._puts, self._sent = digests, put, puts, sent

    def wait(self) -> list[str]:
        """The objects' SHA-256 hex digests, in order, once S3 acknowledged every one; the first
        error is raised after all ended. Once only."""
        put, self._put = self._put, None
        if put is not None:
            put.finish(self._puts, self._sent)
        return self._digests


def _put_headers(content_type: str, metadata: dict[str, str], digest: str) -> dict[str, str]:
    return {"content-type": content_type, "x-amz-content-sha256": digest,
            **{f"x-amz-meta-{k.lower()}": v for k, v in metadata.items()}}


def _classified(where: str, status: int, body: bytes) -> StorageError:
    """An S3 error answer to a PUT or HEAD as :meth:`AudioStore._call` classifies the same answer (a
    HEAD's has no body: its status says it)."""
    m = re.search(rb"<Code>([^<]*)</Code>", body or b"")
    code = m.group(1).decode("utf-8", "replace") if m else ""
    msg = re.search(rb"<Message>([^<]*)</Message>", body or b"")
    text = f"{where}: {code or status} {msg.group(1).decode('utf-8', 'replace') if msg else ''}".rstrip()
    if code in _CONFIG_CODES or status == 403:
        return StorageConfigError(text)
    if status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout", "InternalError"):
        return S3Unavailable(f"{where}: {code or status}")
    return StorageError(text)
