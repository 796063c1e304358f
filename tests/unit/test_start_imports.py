"""What a worker's start imports: a restart after a crash is downtime, so the SDK's asyncio
clients stay out of it while ``from streams import TTSClient`` keeps working."""

from __future__ import annotations

import subprocess
import sys


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_the_worker_module_does_not_import_the_sdk() -> None:
    mods = _loaded_after("import streams.worker.main")
    assert "streams.worker.main" in mods
    assert not {"aiokafka", "streams.client", "streams.client.aio"} & mods


def test_the_sdk_is_still_imported_from_the_package() -> None:
    from streams import AsyncTTSClient, TTSClient
    from streams.client import AsyncTTSClient as A
    from streams.client import TTSClient as T

    assert (TTSClient, AsyncTTSClient) == (T, A)
    mods = _loaded_after("from streams import TTSClient")
    assert "streams.client" in mods


def test_work_beside_the_load_returns_or_raises_what_it_did() -> None:
    import pytest

    from streams.worker.main import _beside_the_load

    assert _beside_the_load(lambda a, b=0: a + b, 2, b=3).result(timeout=10) == 5
    with pytest.raises(ZeroDivisionError):
        _beside_the_load(lambda: 1 / 0).result(timeout=10)
