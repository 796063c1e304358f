"""``TTSClient.stream`` / ``AsyncTTSClient.stream`` / ``ttsflow say --stream`` against a real
``ttsflow stage`` and ``ttsflow worker`` (processes) on the shared stack: the chunks of a
streaming request come once each, in ``seq`` order, before its completion; each chunk's
audio is in S3 with its sha256; the completion's audio is the whole request."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

import pytest

from schemas import Chunk, Completion
from streams.client import AsyncTTSClient, TTSClient
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = ("The first sentence is short. The second one says a little more than the first. "
        "And the third sentence ends the request.")


@pytest.mark.timeout(600)
def test_stream_yields_chunks_in_order_then_the_completion(settings: Settings, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from streams.client.cli import chunk_path, main_say
    from streams.devstack.procs import Supervisor, settings_env

    with Supervisor(tmp_path / "logs") as sup:
        stage = sup.stage("stage", settings)
        worker = sup.worker("worker-0", settings)
        sup.wait_ready(stage, timeout=120)
        sup.wait_ready(worker, timeout=300)
        with TTSClient(settings) as client:
            t0 = time.monotonic()
            seen: list[tuple[float, Chunk | Completion]] = [(time.monotonic() - t0, x) for x in
                                                            client.stream(TEXT, "alice", timeout=240)]
            chunks = [x for _, x in seen if isinstance(x, Chunk)]
            c = seen[-1][1]
            assert isinstance(c, Completion) and c.status == "ok" and c.segments == 3
            assert [ch.seq for ch in chunks] == [0, 1, 2] and {ch.total for ch in chunks} == {3}
            assert all(ch.request_id == c.request_id and ch.user_id == "alice" for ch in chunks)
            for ch in chunks:
                data = client.fetch_chunk(ch)
                assert data[:4] == b"RIFF" and hashlib.sha256(data).hexdigest() == ch.audio.sha256
                assert len(data) == ch.audio.bytes and ch.audio.duration_s > 0.3
            total = sum(ch.audio.duration_s for ch in chunks)
            assert c.audio is not None and c.audio.duration_s >= 0.9 * total
            first_chunk_s, completion_s = seen[0][0], seen[-1][0]
            print(f"\nstream: first chunk {first_chunk_s:.2f} s, completion {completion_s:.2f} s after publish")
            assert first_chunk_s <= completion_s

            async def run_async() -> list[Chunk | Completion]:
                a = AsyncTTSClient(client)
                return [x async for x in a.stream(TEXT + " Once more, asynchronously.", "bob", timeout=240)]

            got = asyncio.run(run_async())
            assert [x.seq for x in got if isinstance(x, Chunk)] == [0, 1, 2, 3]
            assert isinstance(got[-1], Completion) and got[-1].status == "ok"

        for k, v in settings_env(settings).items():  # the CLI reads its settings from the environment
            monkeypatch.setenv(k, v)
        out = tmp_path / "say.wav"
        capsys.readouterr()
        assert main_say([TEXT + " Said by the command line.", "-o", str(out), "--user", "carol", "--stream",
                         "--timeout", "240"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert [ln.split()[1] for ln in lines[:-1]] == ["1/4", "2/4", "3/4", "4/4"], lines
        assert lines[-1].startswith(f"saved {out}")
        for seq in range(4):
            assert chunk_path(out, seq).read_bytes()[:4] == b"RIFF"
        assert out.read_bytes()[:4] == b"RIFF"
