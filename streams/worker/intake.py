"""Step 2 of the loop: one consumed record decoded and entered into the ledger.

Invariant: every consumed offset is tracked before anything else happens to it, so it
holds the committed offset back until the ledger says it is done; a record that does not
decode fails its request (when its id can be read) instead of stopping the partition; a
consumer position that went back without a rebalance is an abort (redo from committed),
never a silent re-admission.
"""

from __future__ import annotations

import logging
from typing import Any

from schemas import End, ErrorInfo, Rejection, SchemaError, decode_segment_event, peek_request_id
from streams.errors import AbortableError
from streams.worker.keys import part_id
from streams.worker.ledger import Ledger, Seg

__all__ = ["admit_record"]

_log = logging.getLogger("ttsflow.worker")


def admit_record(msg: Any, ledger: Ledger, metrics: Any, *, identity: str, now: float) -> Seg | None:
    """The work to synthesize for ``msg`` (a confluent-kafka ``Message``), or None."""
    p, off = msg.partition(), msg.offset()
    try:
        ledger.consumed(p, off)
    except ValueError as e:  # the consumer's position went back without a rebalance (librdkafka
        # reset it, seen right after a broker restart): redo from the committed offsets
        raise AbortableError(f"partition {p} went back to offset {off}: {e}") from e
    metrics.consumed()
    raw = msg.value()
    try:
        seg = decode_segment_event(raw if raw is not None else b"")
    except SchemaError as e:
        metrics.bad_segment()
        rid = peek_request_id(raw)
        _log.error("event=bad_segment partition=%d offset=%d request_id=%s code=%s error=%s",
                   p, off, rid, e.code, e.message)
        key = msg.key()
        user = (key.decode("utf-8", "replace") if key else "") or "unknown"
        ledger.admit_unreadable(p, off, rid, user, ErrorInfo(code=f"bad_segment_{e.code}", message=e.message))
        return None
    work: Seg | None = None
    if isinstance(seg, Rejection):
        skipped = ledger.admit_rejection(p, off, seg)
    elif isinstance(seg, End):
        skipped = ledger.admit_end(p, off, seg)
    else:
        work, skipped = ledger.admit(p, off, seg, part_id(seg.hash, identity, seg.timestamps), now)
    if skipped is not None:
        metrics.skipped(skipped)
    if work is not None:
        ts_type, ts_ms = msg.timestamp()
        work.read_at = ledger.wall()
        work.size = len(raw) if raw is not None else 0
        work.written_at = ts_ms / 1000 if ts_type != 0 and ts_ms > 0 else work.read_at
        work.owed_s = ledger.owed(p, work.written_at)
    return work
