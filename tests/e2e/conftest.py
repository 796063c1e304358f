"""Fixtures for end-to-end tests: the whole pipeline as real processes on the real local stack.

Nothing is skipped: if the stack is not up, the tests error with one line saying how to
start it. Commands run as a user would run them (``python -m streams.cli ...``), and
their last stdout line is their JSON report.
"""

from __future__ import annotations

import pytest

from streams.settings import Settings
from tests.support.stack import require_stack


@pytest.fixture(scope="session")
def stack_settings() -> Settings:
    return require_stack()
