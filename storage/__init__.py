"""S3 audio store and Redis cache: the only code that talks to them.

``AudioStore`` keeps content-addressed audio in a bucket; ``AudioCache`` maps segment
hashes to S3 keys and degrades to misses when Redis is down. Errors: ``storage.errors``.
"""

from storage.cache import AudioCache, RedisSection
from storage.errors import ObjectMissing, RedisUnavailable, S3Unavailable, StorageConfigError, StorageError
from storage.s3 import AudioStore, S3Section, content_key

__all__ = ["AudioCache", "AudioStore", "ObjectMissing", "RedisSection", "RedisUnavailable", "S3Section", "S3Unavailable",
           "StorageConfigError", "StorageError", "content_key"]
