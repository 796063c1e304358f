"""The playground page in a real headless browser (Debian's chromium and chromium-driver,
driven by selenium): it loads, lists voices, speaks a phrase through the gateway, and its
audio element ends up with playable audio of the right length.

Skipped, with the reason, only where chromium cannot be had (CI installs it with apt).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from tests.support.gateway import gateway_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[object]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver; "
                    ".ci/run does it as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--autoplay-policy=no-user-gesture-required", "--mute-audio"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _until(fn, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout:.0f}s")
        time.sleep(0.2)


@pytest.mark.parametrize("stream", [False, True])
def test_the_playground_speaks_a_phrase(browser, tmp_path, stream: bool) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with gateway_pipeline(tmp_path / "logs", "gwpg") as gw:
        d = browser
        d.get(f"http://127.0.0.1:{gw.settings.gateway.gateway_port}/")  # type: ignore[attr-defined]
        assert "ttsflow playground" in d.title  # type: ignore[attr-defined]
        _until(lambda: len(Select(d.find_element(By.ID, "voice")).options) > 1, 30, "voices listed")
        Select(d.find_element(By.ID, "voice")).select_by_visible_text("nova")
        Select(d.find_element(By.ID, "format")).select_by_visible_text("mp3")
        text = d.find_element(By.ID, "text")
        text.clear()
        text.send_keys("Please call me back as soon as you get this message.")
        if stream:
            d.find_element(By.ID, "stream").click()
        d.find_element(By.ID, "speak").click()
        status = _until(lambda: (t := d.find_element(By.ID, "status").text).startswith(("ok", "HTTP", "error"))
                        and t, 180, "an answer")
        assert status.startswith("ok request_id="), status
        assert "latency=" in status and "cached=" in status and "streamed=" in status
        duration = _until(lambda: d.execute_script(
            "const a = document.getElementById('audio');"
            "return a.readyState >= 1 && isFinite(a.duration) ? a.duration : 0;"), 30, "playable audio")
        assert 2.0 < duration < 8.0, duration
        assert d.execute_script("return document.getElementById('audio').error") is None
