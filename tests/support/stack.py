"""The one check every test that needs the local stack starts with."""

from __future__ import annotations

import time

import pytest

from streams.devstack.stack import status
from streams.settings import Settings, load_settings


def require_stack(deadline_s: float = 120.0) -> Settings:
    """The stack's settings (``TTS_*`` env) once Kafka, S3 and Redis all answer.

    Polls with a deadline: on a loaded 2-core machine a healthy broker can miss one short
    metadata probe, and that must not turn every test into an error. Fails with one line
    saying how to start the stack; nothing is skipped.
    """
    s = load_settings()
    deadline = time.monotonic() + deadline_s
    while True:
        st = status(s)
        down = {name: e.get("error", "?") for name, e in st.items() if not e["ok"]}
        if not down or time.monotonic() > deadline:
            break
        time.sleep(2)
    if down:
        detail = "; ".join(f"{n} {st[n]['address']}: {why}" for n, why in down.items())
        pytest.fail(f"the local stack is not up ({detail}). Start it with `make up` "
                    f"(or `.venv/bin/ttsflow stack up`) and run the tests again.", pytrace=False)
    return s
