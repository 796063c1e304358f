"""Global test configuration.

* The repository root is importable, so tests can share helpers as ``tests.support.*``.
* Tests under ``tests/integration`` and ``tests/e2e`` carry their marker even where a
  module forgets it, so ``-m "not integration"`` selects the pure unit tests.
* Hypothesis runs without per-example deadlines: the CI box has 2 shared cores and a
  slow example is not a failure of the property.
* ``kokoro_store``: one model store per session for the unit tests that run kokoro (installing
  it from its wheels costs ~8 s; each module made its own).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

hypothesis_settings.register_profile("ttsflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("ttsflow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
        if "e2e" in parts and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kokoro_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from engine.store import ModelStore

    return ModelStore(tmp_path_factory.mktemp("kokoro-models"))
