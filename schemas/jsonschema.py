"""Generate the JSON Schema files beside this module from the event types.

``python -m schemas.jsonschema`` rewrites ``schemas/json/*.schema.json``; a unit test
fails when the files and the types disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from schemas.events import (
    Chunk,
    Completion,
    DeadLetter,
    Done,
    End,
    LexiconRecord,
    Rejection,
    Request,
    Segment,
    WordTimings,
)

__all__ = ["MESSAGES", "OBJECTS", "SCHEMAS", "render", "write_all"]

MESSAGES: dict[str, type] = {  # the records of the topics (schemas/asyncapi.yaml)
    "request.v1": Request,
    "segment.v1": Segment,
    "rejection.v1": Rejection,
    "end.v1": End,
    "completion.v1": Completion,
    "chunk.v1": Chunk,
    "dead_letter.v1": DeadLetter,
    "done.v1": Done,
    "lexicon.v1": LexiconRecord,
}
OBJECTS: dict[str, type] = {  # JSON objects in S3 that events point at
    "words.v1": WordTimings,
}
SCHEMAS: dict[str, type] = {**MESSAGES, **OBJECTS}
_DIR = Path(__file__).parent / "json"


def render(name: str) -> str:
    schema: dict[str, Any] = msgspec.json.schema(SCHEMAS[name])
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"ttsflow/{name}", **schema}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_all(directory: Path = _DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name in SCHEMAS:
        p = directory / f"{name}.schema.json"
        p.write_text(render(name))
        out.append(p)
    return out


if __name__ == "__main__":
    for p in write_all():
        print(p)
