"""Content-addressed audio in an S3-compatible bucket.

Guarantees:

* Keys are built by :func:`content_key` from hex digests only (never from raw user
  strings), so a key is safe in any S3 implementation and the same content always lands
  at the same key: a retried or repeated upload writes the same bytes and needs no
  coordination.
* :meth:`AudioStore.put` returns the SHA-256 of what it stored and only returns once S3
  has acknowledged the object.
* Failures are classified: unreachable endpoint, timeouts and 5xx raise
  :class:`S3Unavailable` (retriable); a missing object raises :class:`ObjectMissing`;
  access denied or a missing bucket raise :class:`StorageConfigError`.

boto3 >= 1.36 sends CRC checksum headers by default that some S3 servers (s3proxy)
reject; the client asks for checksums only when an operation requires them.
"""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

from storage.errors import ObjectMissing, S3Unavailable, StorageConfigError, StorageError

__all__ = ["AudioStore", "content_key"]

_HEX = re.compile(r"^[0-9a-f]{16,128}$")
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
_CONFIG_CODES = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket"}


def content_key(prefix: str, kind: str, digest: str, ext: str) -> str:
    """``<prefix><kind>/<d[0:2]>/<d[2:4]>/<digest>.<ext>`` from a hex digest only."""
    if not _HEX.match(digest):
        raise ValueError(f"content keys are built from hex digests, got {digest[:40]!r}")
    if not re.match(r"^[a-z0-9]{1,16}$", kind) or not re.match(r"^[a-z0-9]{1,8}$", ext):
        raise ValueError(f"bad key kind/ext {kind!r}/{ext!r}")
    return f"{prefix}{kind}/{digest[:2]}/{digest[2:4]}/{digest}.{ext}"


class AudioStore:
    """One bucket on one S3 endpoint. Thread-safe (boto3 clients are)."""

    def __init__(self, endpoint: str, bucket: str, access_key: str, secret_key: str,
                 region: str = "us-east-1", prefix: str = "", *, connect_timeout_s: float = 2.0,
                 read_timeout_s: float = 10.0, max_attempts: int = 2) -> None:
        import boto3
        from botocore.config import Config

        self.endpoint = endpoint.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix
        cfg = Config(
            region_name=region,
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=16,
        )
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=access_key,
            aws_secret_access_key=secret_key, config=cfg)
        self._lock = threading.Lock()

    # -- keys ----------------------------------------------------------------------
    def key(self, kind: str, digest: str, ext: str) -> str:
        return content_key(self.prefix, kind, digest, ext)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    # -- operations ----------------------------------------------------------------
    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Store ``data`` at ``key``; returns its SHA-256 hex digest once S3 acknowledged it."""
        digest = hashlib.sha256(data).hexdigest()
        self._call("put_object", Bucket=self.bucket, Key=key, Body=data, ContentType=content_type,
                   Metadata={"sha256": digest})
        return digest

    def put_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> tuple[str, int]:
        """Store ``data`` unless ``key`` already holds an object of ours; (sha256, bytes) of what is there.

        For encoders whose output differs run to run (Ogg picks a random stream serial):
        the first upload of a content key wins and later ones reuse it, so a completion's
        sha256 stays true after a retry or a repeat. Two first uploads racing can still
        both write; the later one wins and the earlier completion's sha256 would be stale.
        """
        head = self.head(key)
        if head is not None and head.get("sha256"):
            return str(head["sha256"]), int(head["bytes"])
        return self.put(key, data, content_type), len(data)

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
        """``{"bytes", "sha256", "content_type"}`` of an object, or None if it does not exist."""
        try:
            resp = self._call("head_object", Bucket=self.bucket, Key=key)
        except ObjectMissing:
            return None
        return {"bytes": int(resp.get("ContentLength", 0)),
                "sha256": (resp.get("Metadata") or {}).get("sha256"),
                "content_type": resp.get("ContentType")}

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
        self._client.close()

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
