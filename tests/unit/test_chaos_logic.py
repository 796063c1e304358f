"""The chaos run's bookkeeping: counting lost/duplicated answers, planning disruptions, judging audio."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
import soundfile as sf

from streams.bench.chaos import Event, check_audio, classify_lost, plan_events, plausible_duration, tally
from streams.bench.harness import isolated, percentile
from streams.settings import Settings, describe


def test_tally_counts_each_kind_of_answer() -> None:
    expected = ["a", "b", "c", "d", "e"]
    seen = [("a", "ok"), ("b", "failed"), ("a", "ok"), ("c", "ok"), ("zz", "ok"), ("a", "failed"), ("c", "ok")]
    t = tally(expected, seen)
    assert (t.requests, t.completed, t.lost, t.duplicates, t.failed, t.unexpected) == (5, 3, 2, 3, 1, 1)
    assert t.lost_ids == ("d", "e")
    assert t.duplicate_ids == ("a", "c")


def test_tally_status_is_taken_from_the_first_answer() -> None:
    t = tally(["x"], [("x", "ok"), ("x", "failed")])
    assert t.failed == 0 and t.duplicates == 1


def test_tally_of_a_clean_run_is_all_zero() -> None:
    ids = [f"r{i}" for i in range(100)]
    t = tally(ids, [(r, "ok") for r in reversed(ids)])
    assert (t.completed, t.lost, t.duplicates, t.failed, t.unexpected) == (100, 0, 0, 0, 0)


def test_tally_ignores_repeated_expected_ids() -> None:
    assert tally(["a", "a"], [("a", "ok")]).requests == 1


def test_plan_events_is_seeded_and_inside_the_window() -> None:
    a = plan_events(7, 100.0, kill_workers=5, kill_stage=2, restart_broker=1, workers=2)
    b = plan_events(7, 100.0, kill_workers=5, kill_stage=2, restart_broker=1, workers=2)
    c = plan_events(8, 100.0, kill_workers=5, kill_stage=2, restart_broker=1, workers=2)
    assert a == b and a != c
    kinds = [e.action for e in a]
    assert kinds.count("kill_worker") == 5 and kinds.count("kill_stage") == 2 and kinds.count("restart_broker") == 1
    # workers die at points of the answering, the stage and the broker while requests arrive
    for e in a:
        if e.action == "kill_worker":
            assert e.by == "progress" and 0.1 <= e.at <= 0.9 and e.target in (0, 1)
        else:
            assert e.by == "time" and 10.0 <= e.at <= 90.0
    for by in ("time", "progress"):
        ats = [e.at for e in a if e.by == by]
        assert ats == sorted(ats)
    # spread out: five worker kills fall in five different fifths of the answering
    kills = [e.at for e in a if e.action == "kill_worker"]
    assert sorted(int((k - 0.1) / 0.16) for k in kills) == [0, 1, 2, 3, 4]


def test_plan_events_puts_broker_kills_in_the_first_two_thirds() -> None:
    kills = [e.at for e in plan_events(3, 225.0, kill_workers=0, kill_stage=0, restart_broker=0, kill_brokers=3)]
    assert len(kills) == 3 and kills == sorted(kills)
    assert 22.5 <= kills[0] and kills[-1] <= 22.5 + 180.0 * 2 / 3  # room after the last for its restart


def test_plan_events_none_requested() -> None:
    assert plan_events(1, 10.0, kill_workers=0, kill_stage=0, restart_broker=0) == []
    with pytest.raises(ValueError):
        plan_events(1, 10.0, kill_workers=1, kill_stage=0, restart_broker=0, start=0.9, end=0.1)
    assert isinstance(plan_events(1, 1.0, kill_workers=1, kill_stage=0, restart_broker=0)[0], Event)


def _wav(seconds: float, sr: int = 24000, amp: float = 0.3) -> bytes:
    t = np.arange(int(seconds * sr)) / sr
    buf = io.BytesIO()
    sf.write(buf, (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32), sr, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _check(data: bytes | None, **over: object) -> list[str]:
    ref = _wav(2.0)
    kw: dict[str, object] = {"sha256": hashlib.sha256(ref).hexdigest(), "nbytes": len(ref), "sample_rate": 24000,
                             "duration_s": 2.0, "text_chars": 30}
    kw.update(over)
    return check_audio(data, **kw)  # type: ignore[arg-type]


def test_check_audio_accepts_good_audio() -> None:
    assert _check(_wav(2.0)) == []


def test_check_audio_finds_each_problem() -> None:
    assert _check(None) == ["missing"]
    other = _wav(2.0, amp=0.31)
    assert _check(other) == ["sha256 mismatch"]
    assert any("undecodable" in p for p in _check(b"RIFF" + b"\0" * 100))
    silent = _wav(2.0, amp=0.0)
    assert "silent" in _check(silent, sha256=hashlib.sha256(silent).hexdigest(), nbytes=len(silent))
    ref = _wav(2.0)
    assert any("bytes" in p for p in _check(ref, nbytes=len(ref) + 1))
    assert any("sample rate" in p for p in _check(ref, sample_rate=22050))
    assert any("announced" in p and "duration" in p for p in _check(ref, duration_s=3.0))
    # two seconds cannot be 400 characters of speech, nor one character
    assert any("implausible" in p for p in _check(ref, text_chars=400))
    assert any("implausible" in p for p in _check(_wav(9.0), sha256=hashlib.sha256(_wav(9.0)).hexdigest(),
                                                nbytes=len(_wav(9.0)), duration_s=9.0, text_chars=1))


def test_plausible_duration_grows_with_text() -> None:
    lo1, hi1 = plausible_duration(50)
    lo2, hi2 = plausible_duration(500)
    assert lo1 < lo2 and hi1 < hi2 and lo1 < 50 / 15 < hi1 and lo2 < 500 / 15 < hi2


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)
    assert percentile([10, 0], 100) == 10


def test_isolated_settings_share_nothing_named() -> None:
    base = Settings()
    a, b = isolated(base, "r1"), isolated(base, "r2")
    names = ("topic_requests", "topic_segments", "topic_completed", "topic_dlq", "topic_done", "stage_app_id",
             "worker_group", "s3_prefix")
    section = {d.name: d.section for d in describe()}

    def get(s: Settings, name: str) -> object:
        return getattr(getattr(s, section[name]), name)

    for n in names:
        assert get(a, n) != get(base, n) and get(a, n) != get(b, n)
    assert a.kafka.bootstrap_servers == base.kafka.bootstrap_servers
    assert a.s3.s3_prefix == f"{base.s3.s3_prefix}runs/r1/"  # the run's audio, deleted with it (harness.cleanup_run)


def test_only_a_runs_own_prefix_is_ever_emptied() -> None:
    from streams.bench.harness import delete_run_objects

    for prefix in ("", "audio/", "runs"):
        with pytest.raises(ValueError):
            delete_run_objects(Settings().replace(s3_prefix=prefix))


def test_classify_lost_names_the_hop_that_dropped_each_request() -> None:
    published = ["a", "b", "c", "d"]
    segments = [("b", 0, 2), ("c", 0, 2), ("c", 1, 2), ("c", 1, 2), ("ok", 0, 1)]
    assert classify_lost(["a", "b", "c", "x"], published, segments) == {
        "not_published": 1, "no_segments": 1, "partial_segments": 1, "segments_unanswered": 1}
    assert classify_lost([], published, segments) == dict.fromkeys(
        ("not_published", "no_segments", "partial_segments", "segments_unanswered"), 0)
