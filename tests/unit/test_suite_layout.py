"""The suite is collected as one tree by ``make test``: two test modules with one basename stop collection.

``tests/`` has no ``__init__.py`` packages (pytest's default ``prepend`` import mode), so
``tests/unit/test_x.py`` and ``tests/integration/test_x.py`` import as the same module name and the
whole run errors before a single test (CI failed exactly so). Running one directory alone hides it;
this test does not.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_basename_is_unique_across_the_suite() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (rename one): {clashes}"
