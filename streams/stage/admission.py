"""Per-user admission at the stage: a token bucket per user, driven by the records' own timestamps.

One user publishing requests far faster than anyone speaks (a runaway loop, a bot flooding) would
otherwise put all of them in front of every other user of its partition, in the stage and then in
the worker. Here each new request (a whole request, or the first piece of one sent in pieces) of a
record key takes a token from that key's bucket: ``burst`` tokens, refilled at ``per_s`` a second
of the records' timestamps. A request that finds the bucket empty is refused with ``rate_limited``
(a rejection the worker answers once, as a failed completion): a flood is answered at once and
cheaply instead of queued in front of everyone, as HTTP services answer 429.

Guarantees (pure: no faust, no Kafka, no clock; the time is the record's timestamp):

* **Deterministic.** A bucket after a record is a function of the bucket before it and the record's
  timestamp, partition and offset, so the outcome of each record is the same function of the
  partition's records in order, whoever handles them.
* **The same refusal after a crash.** The bucket is kept in a changelog-backed table and carries the
  offset of the last record it decided. The table can be ahead of the committed input offset (it is
  written before the offset may be committed), so a restarted stage re-reads records the bucket
  already decided: one at or below that offset that is neither seen (the dedup table) nor open was
  refused then, and is refused again without touching the bucket (the worker's done log drops the
  repeated rejection). Such a record is never later than the bucket's time; one at a lower offset
  with a later timestamp is new (the topic was made again and its offsets started over). The stage writes the bucket only after that run's dedup and open writes are
  in their changelogs, so an admitted request is always found seen.
* **Only what was decided counts as decided.** That inference holds for records decided in offset
  order. A record handled after a hole (records faust fetched and never handed over, left for a
  later re-read: :func:`streams.stage.watch.input_hole`) is decided ``in_order=False``: it takes or
  is refused a token as any other, but the bucket's offset stays where the in-order records left
  it, so the records of the hole, when they are read at last, are decided afresh instead of being
  taken for refusals they never had.
* **Time from the records.** Refill follows the records' timestamps (the producer's, or the broker's
  with ``message.timestamp.type=LogAppendTime``); a timestamp earlier than the bucket's adds nothing,
  and a record without one refills nothing. Where producers are not trusted, set the requests
  topic's ``message.timestamp.type=LogAppendTime`` so a client cannot buy tokens with future
  timestamps.
"""

from __future__ import annotations

import msgspec

__all__ = ["Admission", "Bucket", "Verdict", "bucket_key", "decode_bucket", "encode_bucket"]


class Bucket(msgspec.Struct, array_like=True, frozen=True):
    """One record key's bucket, as the stage's ``rate`` table keeps it (msgpack, exact floats)."""

    tokens: float
    at_ms: int        # the record timestamp it was last refilled to
    partition: int
    offset: int       # the last record it decided


class Verdict(msgspec.Struct, frozen=True):
    """``admitted``; ``bucket``: the new state to write (None: unchanged); ``retry_after_s``: when a
    token is back (refused only); ``replayed``: refused again because it was refused before."""

    admitted: bool
    bucket: Bucket | None
    retry_after_s: float = 0.0
    replayed: bool = False


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(Bucket)


def encode_bucket(b: Bucket) -> bytes:
    return _enc.encode(b)


def decode_bucket(raw: bytes | None) -> Bucket | None:
    """A stored bucket (None: absent or unreadable, as a new user: a full bucket)."""
    if not raw:
        return None
    try:
        return _dec.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def bucket_key(user_key: bytes, partition: int) -> bytes:
    """The ``rate`` table's key: per partition, so records without a key (which land anywhere) share a
    bucket only within their partition and its offsets compare."""
    return b"%d\x00%s" % (partition, user_key)


class Admission:
    """The token bucket rules (see the module docstring). ``per_s`` 0 admits everything."""

    def __init__(self, per_s: float, burst: int) -> None:
        if per_s < 0 or burst < 1:
            raise ValueError("per_s must be >= 0 and burst >= 1")
        self.per_s, self.burst = per_s, burst

    @property
    def enabled(self) -> bool:
        return self.per_s > 0

    def decide(self, bucket: Bucket | None, *, timestamp_ms: int | None, partition: int, offset: int,
               in_order: bool = True) -> Verdict:
        """Take a token for a new request at ``offset`` of ``partition``, or refuse it. ``in_order``
        False: records before ``offset`` in the partition may not have been decided yet (a hole):
        the bucket's offset is not moved past them."""
        if not self.enabled:
            return Verdict(True, None)
        if (bucket is not None and bucket.partition == partition and offset <= bucket.offset
                and (timestamp_ms is None or timestamp_ms <= bucket.at_ms)):
            # decided before a crash (the table is ahead of the committed offset): it was refused then.
            # A record the bucket decided is never later than its at_ms (which only grows), so a lower
            # offset with a later timestamp is a new record of a topic whose offsets started over (it was
            # deleted and made again while the stage's tables stayed): decided afresh, never refused for ever
            return Verdict(False, None, self._wait(bucket.tokens), replayed=True)
        if bucket is None:
            tokens, at = float(self.burst), timestamp_ms or 0
        else:
            tokens, at = bucket.tokens, bucket.at_ms
            if timestamp_ms is not None and timestamp_ms > at:
                tokens = min(float(self.burst), tokens + (timestamp_ms - at) * self.per_s / 1000.0)
                at = timestamp_ms
        if not in_order:
            offset = bucket.offset if bucket is not None and bucket.partition == partition else -1
        if tokens >= 1.0:
            return Verdict(True, Bucket(tokens - 1.0, at, partition, offset))
        return Verdict(False, Bucket(tokens, at, partition, offset), self._wait(tokens))

    def _wait(self, tokens: float) -> float:
        return max(0.0, (1.0 - tokens) / self.per_s)
