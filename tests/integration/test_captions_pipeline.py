# ruff: noqa: RUF001 - full-width letters are the subject here
"""Word timings through the real pipeline (stage, worker, gateway, S3, Redis; hibari): ``"timestamps": true``.

One stage, one worker and one gateway for the module (hibari, segments of at most 64 characters
so short texts make several). Checked: every written word is timed, in order, inside the audio, its
offsets pointing at the text as sent (through normalization and splitting); a chunk's words
are the completion's, moved by the chunk's ``offset_s``; the captions keep to 2 lines of 42
characters; a cached part answers with the timings it was made with, and a part made without
them is made again with them; a 3,000-character request (about 60 segments) keeps its times
right to its end. The gateway answers ``extra_body={"timestamps": True}`` (OpenAI SDK) with
base64 audio and words, sends each chunk's words on its SSE events, and speaks Kokoro-FastAPI's
``/dev/captioned_speech`` (streamed and not); the playground, in a real headless chromium,
highlights the word being spoken while the audio plays (a screenshot is saved).
"""

from __future__ import annotations

import base64
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine import decode
from engine.timing import words_of
from schemas import Chunk, Completion, WordSpan
from streams.bench.align import voiced_end_s
from streams.bench.corpus import ASR_SENTENCES
from streams.bench.harness import isolated
from streams.client import TTSClient
from streams.devstack.procs import Supervisor
from streams.devstack.stack import ensure_topics
from streams.settings import Settings
from streams.stage.text import normalize, split_segments
from streams.worker.timings import part_words
from tests.integration.conftest import TEST_PARTITIONS, _cleanup
from tests.support.gateway import http
from tests.support.stack import require_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Ｈｅｌｌｏ  there… On 3/4, 42 people paid $9.99 each. The third sentence ends the request."
MAX_SEGMENT = 64


@dataclass
class Rig:
    settings: Settings
    client: TTSClient
    url: str


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    unique = f"cap-{uuid.uuid4().hex[:8]}"
    s = isolated(require_stack(), unique).replace(partitions=TEST_PARTITIONS, max_segment_chars=MAX_SEGMENT)
    ensure_topics(s, partitions=TEST_PARTITIONS)
    try:
        with Supervisor(tmp_path_factory.mktemp("cap-logs")) as sup:
            sup.stage("stage", s)
            sup.worker("worker", s)
            gw = sup.gateway("gateway", s)
            sup.wait_ready(gw, timeout=120)
            sup.wait_ready("stage", timeout=240)
            sup.wait_ready("worker", timeout=300)
            with TTSClient(s) as client:
                yield Rig(s, client, f"http://127.0.0.1:{gw.settings.gateway.gateway_port}")
            sup.check_alive()
    finally:
        _cleanup(s, unique)


def _expected_spans(text: str) -> int:
    """How many words the stage's segments of ``text`` hold (what the worker times)."""
    return sum(len(words_of(seg)) for seg in split_segments(normalize(text), MAX_SEGMENT))


def _check_words(text: str, words: list[WordSpan], duration_s: float) -> None:
    assert len(words) == _expected_spans(text)
    starts = [w.start_s for w in words]
    assert starts == sorted(starts), "starts never decrease"
    assert all(0 <= w.start_s <= w.end_s <= duration_s + 1e-3 for w in words), "inside the audio"
    offsets = [w.start for w in words]
    assert offsets == sorted(offsets) and all(w.start < w.end <= len(text) for w in words)
    # each word points at what the user wrote: the stage's normalization of that stretch is the word read
    assert all(normalize(text[w.start:w.end]).replace(" ", "") == w.word.replace(" ", "") for w in words), \
        [(text[w.start:w.end], w.word) for w in words]


@pytest.mark.timeout(900)
def test_chunks_and_completion_carry_the_same_words_and_a_cache_hit_keeps_them(rig: Rig) -> None:
    client = rig.client
    seen = list(client.stream(TEXT, "alice", timeout=300, timestamps=True))
    c = seen[-1]
    assert isinstance(c, Completion) and c.status == "ok" and c.segments >= 3
    chunks = [x for x in seen if isinstance(x, Chunk)]
    assert c.audio is not None and c.words is not None and c.captions is not None and c.words_reason is None
    words = client.words(c)
    assert c.words_count == len(words)
    _check_words(TEXT, words, c.audio.duration_s)
    assert TEXT[words[0].start:words[0].end] == "Ｈｅｌｌｏ" and words[0].word == "Hello"
    assert [TEXT[w.start:w.end] for w in words if w.word in ("42", "$9.99", "3/4")] == ["3/4", "42", "$9.99"]

    # a chunk's words are the completion's: same offsets, times moved by where the chunk starts
    flat = [(ch, w) for ch in chunks for w in ch.words or []]
    assert len(flat) == len(words) and all(ch.words is not None for ch in chunks)
    for (ch, cw), w in zip(flat, words, strict=True):
        assert ch.offset_s is not None and (cw.start, cw.end, cw.word) == (w.start, w.end, w.word)
        assert abs(ch.offset_s + cw.start_s - w.start_s) < 0.002 and 0 <= cw.start_s <= ch.audio.duration_s
    assert chunks[0].offset_s == 0.0
    # the chunk's audio is its part's object: a WAV that reads as audio and carries the part's words
    data = client.fetch_chunk(chunks[-1])  # sha256 checked
    pw = part_words(data)
    assert pw is not None and [(w.word, w.start_s) for w in pw.words] == \
        [(w.word, w.start_s) for w in chunks[-1].words or []]
    assert abs(len(decode(data)[0]) / chunks[-1].audio.sample_rate - chunks[-1].audio.duration_s) < 1e-3

    for fmt in ("vtt", "srt"):
        cap = client.captions(c, fmt)
        assert cap.startswith("WEBVTT\n\n") if fmt == "vtt" else cap.startswith("1\n00:00:")
        blocks = [b.splitlines() for b in cap.strip().split("\n\n")[1 if fmt == "vtt" else 0:]]
        text_lines = [ln for b in blocks for ln in b[(1 if fmt == "vtt" else 2):]]
        assert all(len(b) <= (3 if fmt == "vtt" else 4) for b in blocks) and all(len(ln) <= 42 for ln in text_lines)
        assert "Hello there..." in " ".join(text_lines)

    # the same text again: every part from the cache, with the timings it was made with
    again = client.wait(client.submit(TEXT, "alice", timestamps=True), 300)
    assert again.cached_segments == again.segments == c.segments
    assert client.words(again) == words and again.words == c.words

    # a part made without timings is made again with them (under its own key), never a word-less hit
    plain = f"Sentence {uuid.uuid4().int % 10**6} is first spoken without timings, then with them."  # new audio
    first = client.wait(client.submit(plain, "bob"), 300)
    assert first.words is None and first.words_reason is None
    timed = client.wait(client.submit(plain, "bob", timestamps=True), 300)
    assert timed.cached_segments == 0 and timed.audio is not None and first.audio is not None
    assert timed.audio.sha256 == first.audio.sha256
    _check_words(plain, client.words(timed), timed.audio.duration_s)


@pytest.mark.timeout(600)
def test_say_writes_captions_and_prints_words_with_json(rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from streams.client.cli import main_say
    from streams.devstack.procs import settings_env

    for k, v in settings_env(rig.settings).items():  # the CLI reads its settings from the environment
        monkeypatch.setenv(k, v)
    text = "The command line writes captions. And prints every word as JSON."
    out, vtt = tmp_path / "say.wav", tmp_path / "say.vtt"
    capsys.readouterr()
    assert main_say([text, "-o", str(out), "--user", "dave", "--captions", str(vtt), "--json", "--timeout", "240"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["status"] == "ok" and c["words_count"] == len(c["words"]) == len(words_of(text))
    assert [text[w["start"]:w["end"]] for w in c["words"]] == [text[a:b] for a, b in words_of(text)]
    cap = vtt.read_text(encoding="utf-8")
    assert cap.startswith("WEBVTT\n\n") and "The command line writes captions." in cap
    assert main_say([text, "-o", str(out), "--captions", str(tmp_path / "x.txt")]) == 1  # .vtt or .srt only


def _sentences(chars: int) -> str:
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < chars:
        out.append(ASR_SENTENCES[len(out) % len(ASR_SENTENCES)])
    return " ".join(out)


@pytest.mark.timeout(1200)
def test_a_3000_character_request_keeps_its_times_to_the_end(rig: Rig) -> None:
    text = _sentences(3000)
    c = rig.client.wait(rig.client.submit(text, "carol", timestamps=True), 900)
    assert c.audio is not None and c.segments >= 40
    words = rig.client.words(c)
    assert [(w.start, w.end) for w in words] == words_of(text)
    _check_words(text, words, c.audio.duration_s)
    samples, sr = decode(rig.client.fetch(c))
    # ~60 parts, 150 ms between each two: an error in any part's start would move the last word
    assert abs(words[-1].end_s - voiced_end_s(samples, sr)) < 0.1, (words[-1], voiced_end_s(samples, sr))
    assert c.words is not None
    print(f"\n3000 chars: {c.segments} segments, {len(words)} words, {c.audio.duration_s:.1f} s of audio, "
          f"word-timing object {c.words.bytes} bytes")


# --- the gateway ------------------------------------------------------------------------------

GW_TEXT = "Captions for everyone. The gateway sends every word with its time."


def _gw_words_ok(words: list[dict[str, Any]], text: str, duration_s: float) -> None:
    assert len(words) == _expected_spans(text) and words[0]["start_s"] >= 0
    assert [w["start_s"] for w in words] == sorted(w["start_s"] for w in words)
    assert all(text[w["start"]:w["end"]] == w["word"] for w in words)
    assert words[-1]["end_s"] <= duration_s + 0.05


@pytest.mark.timeout(600)
def test_the_gateway_answers_timestamps_through_the_openai_sdk_sse_and_kokoros_captioned_speech(rig: Rig) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{rig.url}/v1", api_key="unused-open-gateway", max_retries=0, timeout=180)
    try:
        raw = client.audio.speech.with_raw_response.create(model="tts-1", voice="heart", input=GW_TEXT,
                                                           response_format="wav", extra_body={"timestamps": True})
        body = json.loads(raw.content)
    finally:
        client.close()
    assert raw.headers["content-type"].startswith("application/json")
    audio = base64.b64decode(body["audio"])
    samples, sr = decode(audio)
    assert body["format"] == "wav" and abs(len(samples) / sr - body["duration_s"]) < 0.01
    _gw_words_ok(body["words"], GW_TEXT, len(samples) / sr)

    # SSE: each delta event carries the words that came with its audio, times in the whole answer
    text = (f"Streamed words arrive with their audio, take {uuid.uuid4().int % 1000}. A second sentence follows it. "
            "Then comes a third one. And a fourth one ends it.")  # several parts: the first commit before the end
    status, headers, data = http("POST", f"{rig.url}/v1/audio/speech", {
        "model": "tts-1", "voice": "heart", "input": text, "response_format": "wav", "stream_format": "sse",
        "timestamps": True})
    assert status == 200 and headers.get("x-ttsflow-streamed") == "true", data[:300]
    events = [json.loads(ln[6:]) for ln in data.decode().split("\n\n") if ln.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    words = [w for e in deltas for w in e.get("words") or []]
    assert sum(1 for e in deltas if e.get("words")) >= 2, [(len(e["audio"]), e.get("words")) for e in deltas]
    _gw_words_ok(words, text, 60.0)
    assert events[-1]["type"] == "speech.audio.done"

    # timestamps with raw streamed audio has nowhere to go: a clear 400
    status, _, data = http("POST", f"{rig.url}/v1/audio/speech", {
        "model": "tts-1", "voice": "heart", "input": text, "stream_format": "audio", "timestamps": True})
    assert status == 400 and json.loads(data)["error"]["param"] == "timestamps"

    # Kokoro-FastAPI's /dev/captioned_speech, not streamed and streamed (one JSON object per line)
    status, _, data = http("POST", f"{rig.url}/dev/captioned_speech", {
        "model": "kokoro", "input": GW_TEXT, "voice": "heart", "response_format": "mp3", "stream": False})
    assert status == 200, data[:300]
    one = json.loads(data)
    assert one["audio_format"] == "audio/mpeg" and len(base64.b64decode(one["audio"])) > 1000
    assert [t["word"] for t in one["timestamps"]] == [GW_TEXT[a:b] for a, b in words_of(GW_TEXT)]
    assert all(set(t) == {"word", "start_time", "end_time"} and t["start_time"] <= t["end_time"]
               for t in one["timestamps"])
    text = (f"Kokoro clients stream captions too, take {uuid.uuid4().int % 1000}. Line by line. "
            "Each line has its audio. And the words spoken in it.")
    status, headers, data = http("POST", f"{rig.url}/dev/captioned_speech", {
        "input": text, "voice": "heart", "response_format": "wav"})
    assert status == 200 and headers["content-type"].startswith("application/json"), data[:300]
    lines = [json.loads(ln) for ln in data.decode().splitlines() if ln.strip()]
    assert sum(1 for ln in lines if ln["timestamps"]) >= 2 and all(ln["audio_format"] == "audio/wav" for ln in lines)
    stamps = [t for ln in lines for t in ln["timestamps"]]
    assert [t["word"] for t in stamps] == [text[a:b] for a, b in words_of(normalize(text))]
    assert [t["start_time"] for t in stamps] == sorted(t["start_time"] for t in stamps)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.mark.timeout(600)
def test_the_playground_highlights_the_word_being_spoken(rig: Rig, tmp_path: Path) -> None:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--autoplay-policy=no-user-gesture-required", "--mute-audio", "--window-size=900,700"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        d.get(rig.url + "/")
        _until(lambda: len(Select(d.find_element(By.ID, "voice")).options) > 1, 30, "voices listed")
        Select(d.find_element(By.ID, "voice")).select_by_visible_text("heart")
        Select(d.find_element(By.ID, "format")).select_by_visible_text("wav")
        text = "Every word lights up while it is spoken, one after another, until the very last one."
        box = d.find_element(By.ID, "text")
        box.clear()
        box.send_keys(text)
        assert d.find_element(By.ID, "timestamps").is_selected()
        d.find_element(By.ID, "speak").click()
        status = _until(lambda: (t := d.find_element(By.ID, "status").text).startswith(("ok", "HTTP", "error"))
                        and t, 180, "an answer")
        assert status.startswith("ok request_id=") and f"words={len(words_of(text))}" in status, status
        spans = d.find_elements(By.CSS_SELECTOR, "#words span.w")
        assert [s.text for s in spans] == [text[a:b] for a, b in words_of(text)]
        # while it plays, the marked word follows the player's clock: sample it a few times
        seen: list[tuple[float, str]] = []

        def sample() -> bool:
            t, word = d.execute_script(
                "const a = document.getElementById('audio'); const n = document.querySelector('#words span.now');"
                "return [a.currentTime, n ? n.textContent : null];")
            if word is not None:
                if word not in {w for _, w in seen} and len({w for _, w in seen}) == 3:  # a word mid-sentence
                    d.save_screenshot(str(tmp_path / "playground-captions.png"))
                seen.append((t, word))
            return len({w for _, w in seen}) >= 4 or bool(d.execute_script(
                "return document.getElementById('audio').ended"))

        _until(sample, 60, "words highlighted in turn")
        assert len({w for _, w in seen}) >= 4, seen
        starts = {s.text: float(s.get_attribute("data-start") or "nan") for s in spans}
        ends = {s.text: float(s.get_attribute("data-end") or "nan") for s in spans}
        # the marked word is the one whose time holds the clock (or the last one started, in a pause)
        assert all(starts[w] <= t + 0.05 and t <= ends[w] + 0.3 for t, w in seen), (seen, starts, ends)
        print(f"\nplayground screenshot: {tmp_path / 'playground-captions.png'}")
    finally:
        d.quit()


def _until(fn: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout:.0f}s")
        time.sleep(0.05)
