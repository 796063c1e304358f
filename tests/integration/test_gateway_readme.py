"""The README's ``curl`` examples of the gateway, run as written against a real stage, worker
and gateway (only the address is changed to the test gateway's), and their outputs checked."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.gateway import decode_av, decode_pcm, gateway_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"


def _examples() -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"<!-- gateway-curl-examples -->\n```sh\n(.*?)```", text, re.S)
    assert m, "README lost its gateway curl examples block"
    return m.group(1)


def test_the_readme_curl_examples_work(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    script = _examples()
    assert script.count("curl ") == 4
    with gateway_pipeline(tmp_path / "logs", "gwrd") as gw:
        work = tmp_path / "run"
        work.mkdir()
        port = gw.settings.gateway.gateway_port
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", script.replace("127.0.0.1:8000", f"127.0.0.1:{port}")],
                             cwd=work, capture_output=True, text=True, timeout=400)
        assert run.returncode == 0, run.stderr
    for name, lo, hi in (("hello.mp3", 0.8, 4.0), ("order.wav", 0.8, 4.0)):
        x, rate = decode_av((work / name).read_bytes())
        assert lo < len(x) / rate < hi, name
    x, rate = decode_pcm((work / "stream.pcm").read_bytes())
    assert rate == 24_000 and 1.0 < len(x) / rate < 6.0
    voices = json.loads((work / "voices.json").read_text())
    assert "heart" in [v["id"] for v in voices["voices"]] and voices["aliases"]["alloy"] == "heart"
