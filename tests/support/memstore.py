"""An in-memory bucket with the calls the worker's joiner makes (words, captions, marks)."""

from __future__ import annotations

import hashlib
from typing import Any

from storage.errors import ObjectMissing
from storage.s3 import content_key


class MemStore:
    """An in-memory bucket with the calls the joiner's timing and marks steps use."""

    bucket = "b"
    presign_ttl_s = 0

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def key(self, kind: str, digest: str, ext: str) -> str:
        return content_key("", kind, digest, ext)

    def uri(self, key: str) -> str:
        return f"s3://b/{key}"

    def put(self, key: str, data: bytes, content_type: str = "", *, sha256: str | None = None) -> str:
        self.objects[key] = data
        return sha256 or hashlib.sha256(data).hexdigest()

    def get(self, key: str) -> bytes:
        if key not in self.objects:
            raise ObjectMissing(key)
        return self.objects[key]

    def head(self, key: str) -> dict[str, Any] | None:
        return None if key not in self.objects else {"bytes": len(self.objects[key]), "sha256": None, "metadata": {}}

    def put_file(self, key: str, f: Any, content_type: str = "", *, metadata: Any = None) -> tuple[str, int]:
        f.seek(0)
        data = f.read()
        return self.put(key, data), len(data)

    def ping(self) -> None:
        pass
