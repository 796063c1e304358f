"""ttsflow's wire contract: event types v1, JSON Schema files, encode/decode, errors.

Imports nothing else of ttsflow. See ``schemas/asyncapi.yaml`` for the topics.
"""

from schemas.errors import ContentError, InvalidField, InvalidJSON, SchemaError
from schemas.events import (
    FORMATS,
    AudioRef,
    Completion,
    DeadLetter,
    Done,
    ErrorInfo,
    ModelInfo,
    Rejection,
    Request,
    Segment,
    Timings,
    check_content,
    decode_completion,
    decode_dead_letter,
    decode_request,
    decode_segment,
    decode_segment_event,
    encode,
    peek_request_id,
    request_hash,
    segment_hash,
)

__all__ = [
    "FORMATS",
    "AudioRef",
    "Completion",
    "ContentError",
    "DeadLetter",
    "Done",
    "ErrorInfo",
    "InvalidField",
    "InvalidJSON",
    "ModelInfo",
    "Rejection",
    "Request",
    "SchemaError",
    "Segment",
    "Timings",
    "check_content",
    "decode_completion",
    "decode_dead_letter",
    "decode_request",
    "decode_segment",
    "decode_segment_event",
    "encode",
    "peek_request_id",
    "request_hash",
    "segment_hash",
]
