"""Fixtures for end-to-end tests: the whole pipeline as real processes on the real local stack.

Nothing is skipped: if the stack is not up, the tests error with one line saying how to
start it. Commands run as a user would run them (``python -m streams.cli ...``), and
their last stdout line is their JSON report.
"""

from __future__ import annotations

import pytest

from streams.settings import Settings, load_settings
from streams.stack import status


@pytest.fixture(scope="session")
def stack_settings() -> Settings:
    s = load_settings()
    st = status(s)
    down = {name: e.get("error", "?") for name, e in st.items() if not e["ok"]}
    if down:
        pytest.fail(f"the local stack is not up ({', '.join(down)}). Start it with `make up` "
                    "(or `.venv/bin/ttsflow stack up`) and run the tests again.", pytrace=False)
    return s
