"""The chattts backend on tiny random-weight assets built from chattts's own classes.

No real weights (CC BY-NC 4.0, never downloaded here): ``make_tiny_assets`` writes a
2-layer, 64-wide model with ChatTTS's architecture, tokenizer special tokens and a
regenerated speaker statistic. The audio is noise; what is checked is the path a user
relies on: a batch goes through ONE padded ``generate`` call and comes back as one finite
waveform per text, each decoded at its own length, with one fixed seeded speaker.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.base import Audio, Failure, Prepared, SynthItem
from engine.engine import Engine
from engine.errors import BackendError, ModelLoadError
from streams.settings import load_settings

try:
    import ChatTTS  # noqa: F401
    import torch

    from engine.chattts import TINY_CONFIG_FILE, ChatTTSBackend, make_tiny_assets
    _MISSING = ""
except ImportError as e:  # the optional extra: tests that need it are skipped with this reason
    _MISSING = f"the chattts extra is not installed ({e}); pip install 'ttsflow[chattts]'"

needs_extra = pytest.mark.skipif(bool(_MISSING), reason=_MISSING or "-")

MAX_TOKENS = 24  # a random model never says its end token reliably: cap it
TEXTS = ["Hello world.", "A b", "This is a longer sentence, with a comma in it.", "x y z"]


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_assets(tmp_path_factory.mktemp("chattts"))


@pytest.fixture(scope="module")
def backend(assets: Path) -> Any:
    be = ChatTTSBackend(assets, device="cpu", threads=1, seed=3, max_new_token=MAX_TOKENS)
    yield be
    be.close()


def _count_generate(monkeypatch: pytest.MonkeyPatch, be: ChatTTSBackend) -> list[dict[str, Any]]:
    """Record every GPT.generate call: its batch size and the token count of each row."""
    calls: list[dict[str, Any]] = []
    gpt = be._chat.gpt
    orig = gpt.generate

    def counting(emb: torch.Tensor, inputs_ids: torch.Tensor, *a: Any, **kw: Any) -> Any:
        call: dict[str, Any] = {"batch": int(inputs_ids.shape[0]), "tokens": []}
        calls.append(call)
        for out in orig(emb, inputs_ids, *a, **kw):
            call["tokens"] = [int(h.size(0)) for h in out.hiddens]
            yield out

    monkeypatch.setattr(gpt, "generate", counting)
    return calls


@needs_extra
def test_batch_of_four_is_one_padded_generate_and_four_finite_waveforms(
        backend: ChatTTSBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    assert backend.info.name == "chattts"
    assert (backend.info.precision, backend.info.provider) == ("fp32", "cpu")
    assert backend._chat.gpt.gpt.dtype == torch.float32
    assert backend.native_batching
    calls = _count_generate(monkeypatch, backend)
    engine = Engine(backend, max_batch=8)
    prepared = engine.prepare_many([SynthItem(t, "") for t in TEXTS])
    assert all(isinstance(p, Prepared) for p in prepared)
    raw = engine.infer_batch(prepared)  # type: ignore[arg-type]
    assert len(calls) == 1, f"expected one generate call for the batch, got {len(calls)}"
    assert calls[0]["batch"] == 4
    out = engine.postprocess_many(raw, prepared)  # type: ignore[arg-type]
    assert len(out) == 4
    for text, audio, tokens in zip(TEXTS, out, calls[0]["tokens"], strict=True):
        assert isinstance(audio, Audio), f"{text!r}: {audio}"
        assert audio.sample_rate == 24_000
        assert audio.samples.dtype == np.float32
        assert np.all(np.isfinite(audio.samples))
        assert 0 < np.abs(audio.samples).max() <= 1.0
        # its own length: 2 mel frames of 256 samples per audio token, no padded tail
        assert 0 < len(audio.samples) <= tokens * 512
        assert len(audio.samples) >= (2 * tokens - 1) * 256 - 2 * 256, (len(audio.samples), tokens)
    assert all(t <= MAX_TOKENS for t in calls[0]["tokens"])


@needs_extra
def test_items_are_decoded_at_their_own_length_not_the_longest(
        backend: ChatTTSBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's batch decode pads every item to the longest; ours cuts each at its tokens."""
    chat = backend._chat
    hidden = int(chat.config.gpt.hidden_size)
    g = torch.Generator().manual_seed(0)
    hiddens = [torch.randn(n, hidden, generator=g) for n in (3, 17)]
    from ChatTTS.model.gpt import GPT

    def fake_infer_code(*_a: Any, **_k: Any) -> Any:
        yield GPT.GenerationOutputs(ids=[], attentions=[], hiddens=[h.clone() for h in hiddens])

    monkeypatch.setattr(chat, "_infer_code", fake_infer_code)
    prepared = [backend.prepare(SynthItem(t, "")) for t in ("short", "long")]
    raw = backend.infer(prepared)
    assert len(raw[0]) < len(raw[1])
    assert len(raw[0]) <= 3 * 512 and len(raw[1]) <= 17 * 512
    alone = chat._decode_to_wavs([hiddens[0].clone()], True)[0][: 3 * 512]
    np.testing.assert_allclose(raw[0], alone, rtol=1e-5, atol=1e-6)
    padded = chat._decode_to_wavs([h.clone() for h in hiddens], True)[0]  # what Chat.infer returns
    assert len(padded) > len(raw[0]) + 10 * 512


@needs_extra
def test_same_batch_same_audio_with_the_seed(backend: ChatTTSBackend) -> None:
    prepared = [backend.prepare(SynthItem(t, "")) for t in TEXTS[:2]]
    a = backend.infer(prepared)
    b = backend.infer(prepared)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@needs_extra
def test_speed_maps_to_chattts_speed_tag(backend: ChatTTSBackend) -> None:
    assert backend.prepare(SynthItem("hi", "", 1.0)).payload.startswith("[speed_5]")
    assert backend.prepare(SynthItem("hi", "", 2.0)).payload.startswith("[speed_9]")
    assert backend.prepare(SynthItem("hi", "", 0.4)).payload.startswith("[speed_2]")
    # text cannot smuggle in its own speaker tags
    assert "[spk_emb]" not in backend.prepare(SynthItem("[spk_emb]hi[Ptts]", "")).payload


@needs_extra
def test_bad_items_fail_alone(backend: ChatTTSBackend) -> None:
    engine = Engine(backend, max_batch=8)
    out = engine.synthesize([SynthItem("", ""), SynthItem("hi", "nobody"), SynthItem("日本語", ""),
                             SynthItem("Fine text.", "")])
    assert isinstance(out[0], Failure) and out[0].code == "synthesis_failed"
    assert isinstance(out[1], Failure) and out[1].code == "unknown_voice"
    assert isinstance(out[2], Failure) and "nothing speakable" in out[2].message  # not in the tiny vocabulary
    assert isinstance(out[3], Audio)


@needs_extra
def test_model_failure_fails_the_batch(backend: ChatTTSBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("CUDA out of memory")
        yield

    monkeypatch.setattr(backend._chat, "_infer_code", boom)
    with pytest.raises(BackendError, match="out of memory"):
        backend.infer([backend.prepare(SynthItem("hi", ""))])


@needs_extra
def test_postprocess_trims_quiet_edges_only(backend: ChatTTSBackend) -> None:
    p = backend.prepare(SynthItem("hi", ""))
    raw = np.array([0, 0, 0.5, 0, 0, 0, -0.25, 1e-6, 0], np.float32)
    out = backend.postprocess(raw, p)
    np.testing.assert_array_equal(out, np.array([0.5, 0, 0, 0, -0.25], np.float32))  # inner silence kept
    with pytest.raises(Exception, match="no audio"):
        backend.postprocess(np.zeros(10, np.float32), p)


@needs_extra
def test_fixed_speaker(assets: Path, backend: ChatTTSBackend, tmp_path: Path) -> None:
    spk = backend._chat.sample_random_speaker()
    f = tmp_path / "speaker.txt"
    f.write_text(spk + "\n")
    a = ChatTTSBackend(assets, device="cpu", speaker=spk, max_new_token=4)
    b = ChatTTSBackend(assets, device="cpu", speaker=str(f), max_new_token=4)
    assert a._spk == b._spk == spk
    assert a.info.version == b.info.version
    assert a.info.version != backend.info.version  # a different speaker is a different model version (cache keys)
    again = ChatTTSBackend(assets, device="cpu", seed=3, max_new_token=MAX_TOKENS)
    assert again._spk == backend._spk  # no speaker set: the same one drawn from the seed every time
    with pytest.raises(ModelLoadError, match="speaker"):
        ChatTTSBackend(assets, device="cpu", speaker="not a speaker")


@needs_extra
def test_load_errors_are_clear(assets: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="TTS_CHATTTS_ASSET_DIR"):
        ChatTTSBackend(None, device="cpu")
    with pytest.raises(ModelLoadError, match="no asset/ folder"):
        ChatTTSBackend(tmp_path, device="cpu")
    with pytest.raises(ModelLoadError, match="fp16 on cpu"):
        ChatTTSBackend(assets, device="cpu", precision="fp16")
    # Without the architecture file the files must be the official ones: chattts's sha256 check refuses.
    copy = tmp_path / "unofficial"
    shutil.copytree(assets, copy)
    (copy / "asset" / TINY_CONFIG_FILE).unlink()
    (copy / "asset" / "tokenizer" / "special_tokens_map.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="sha256"):
        ChatTTSBackend(copy, device="cpu")
    # the asset folder itself is accepted too
    be = ChatTTSBackend(assets / "asset", device="cpu", max_new_token=4)
    assert be.asset_root == assets


@needs_extra
def test_load_engine_builds_a_warm_chattts_engine(assets: Path) -> None:
    from engine.registry import load_engine

    engine = load_engine("chattts", model_path=assets, precision="auto", providers="cpu", threads=1, max_batch=4,
                         backend_options={"seed": 1, "max_new_token": 8})
    try:
        assert engine.cold_start_s is not None and engine.cold_start_s > 0
        assert engine.info.precision == "fp32"
        out = engine.synthesize([SynthItem(t, "") for t in TEXTS])
        assert all(isinstance(o, Audio) and np.all(np.isfinite(o.samples)) for o in out)
    finally:
        engine.backend.close()
    with pytest.raises(ModelLoadError, match="TTS_CHATTTS_ASSET_DIR"):
        load_engine("chattts", precision="fp16", providers="cpu")


def test_settings_name_the_weights_speaker_and_seed_for_load_engine() -> None:
    s = load_settings({"TTS_BACKEND": "chattts", "TTS_CHATTTS_ASSET_DIR": "/data/chattts", "TTS_CHATTTS_SEED": "7",
                       "TTS_CHATTTS_SPEAKER": "/data/spk.txt"})
    assert s.engine.engine_options() == {"model_path": "/data/chattts",
                                  "backend_options": {"speaker": "/data/spk.txt", "seed": 7}}
    assert load_settings({"TTS_BACKEND": "hibari", "TTS_CHATTTS_ASSET_DIR": "/x"}).engine.engine_options() == {}


@pytest.mark.skipif(not _MISSING, reason="the chattts extra is installed: the real backend is tested above")
def test_without_the_extra_load_engine_says_what_to_install(tmp_path: Path) -> None:
    from engine.registry import load_engine

    with pytest.raises(ModelLoadError, match=r"ttsflow\[chattts\]"):
        load_engine("chattts", model_path=tmp_path, warm_up=False)


@needs_extra
@pytest.mark.slow
def test_gpu_bench_script_runs_on_tiny_assets_and_prints_one_json_line() -> None:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "deploy" / "gpu" / "chattts_bench.py"), "--tiny", "--device", "cpu",
                           "--batch", "1,3", "--runs", "1", "--threads", "1", "--max-new-token", "12"],
                          capture_output=True, text=True, timeout=300, cwd=root, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["bench"] == "chattts" and result["tiny"] is True and result["chattts"] == "0.2.5"
    assert [r["batch"] for r in result["results"]] == [1, 3]
    assert all(r["generate_calls_per_batch"] == 1 and r["rtf"] > 0 for r in result["results"])


@needs_extra
def test_numbers_are_read_not_dropped(backend: ChatTTSBackend) -> None:
    """ChatTTS's normalizer deletes digits; the front end spells them out first."""
    from engine.chattts import _spell_numbers

    payload = backend.prepare(SynthItem("I paid $5.99 for 3 books in 1984, 50% off on the 21st.", "")).payload
    assert not any(c.isdigit() for c in payload.removeprefix("[speed_5]"))
    for words in ("five point nine nine dollars", "three books", "nineteen eighty four", "fifty percent",
                  "twenty first"):
        assert words in payload, (words, payload)
    assert _spell_numbers("我有35个苹果,增长了12.5%,2026年,10005人", "zh") == \
        "我有三十五个苹果,增长了百分之十二点五,二零二六年,一万零五人"
