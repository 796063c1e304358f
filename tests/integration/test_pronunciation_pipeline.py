"""SSML through the real stage and one worker (hibari): what users hear, and what hostile SSML gets.

One stage and one worker answer every request of this module in one run (lean: hibari, short texts):

- a 1.5 s ``break`` is a pause of 1.5 s +- 10% at its place in the fetched audio (frames of 10 ms
  under -40 dBFS; the voice's own edge silences counted in);
- ``say-as telephone`` and ``characters`` are heard digit by digit / letter by letter by an offline
  recognizer (pocketsphinx), where the same digits as plain text are read as a quantity;
- a ``sub`` alias is heard;
- hostile SSML (billion laughs, an external entity naming a local file, 100,000 nested elements,
  unclosed tags, ~1 MB of attributes: the most a Kafka record holds) is answered once each with
  ``invalid_ssml`` giving line and column, while other users' plain requests in the same
  partitions are answered ok;
- a lexicon alias (stored on ``tts.lexicons`` before the stage starts) is heard; the lexicon is then
  updated while the stage runs, and the same text is spoken anew with the new alias (not served
  from the cache), the completion naming the new version;
- two SSML marks (in a request's second segment, streamed) are timed in order inside the audio, each
  in the pause right after the words before it; the chunk's marks plus its ``offset_s`` are the
  completion's;
- an owner with more lexicons on the topic than ``TTS_LEXICONS_PER_USER`` (written by a raw producer,
  past the SDK's check) is served its first ones; a request naming a later one fails with
  ``too_many_lexicons``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engine.pron import SILENCE_PEAK
from schemas import Completion, WordSpan, decode_chunk, decode_word_timings
from streams.settings import Settings
from tests.integration.conftest import drain_topic
from tests.support.asr import normalize_text, recognize
from tests.support.pipeline import by_request, check_audio, completions

pytestmark = [pytest.mark.integration]

TIMED = ("break", "phone", "sub")  # SSML requests that ask for word timings (captions)
HOSTILE = {
    "laughs": '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">'
              '<!ENTITY c "&b;&b;&b;&b;">]><speak>&c;</speak>',
    "xxe": '<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]><speak>&x;</speak>',
    "nested": "<speak>" + "<s>" * 100_000 + "x" + "</s>" * 100_000 + "</speak>",
    "unclosed": "<speak>Hello <prosody rate='slow'>world</speak>",
    "attrs": '<speak><prosody rate="slow" data="' + "a" * 900_000 + '">x</prosody></speak>',
}
REASONS = {"laughs": "DTDs", "xxe": "DTDs", "nested": "nested deeper", "unclosed": "mismatched tag",
           "attrs": "attribute"}


@pytest.fixture
def settings(settings: Settings, unique: str) -> Settings:
    return settings.replace(s3_prefix=f"test/{unique}/", max_wait_ms=20, backend="hibari", backends="", voice="",
                            ssml_max_chars=2_000_000, threads=2, lexicons_per_user=2)


def _longest_pause_ms(x: np.ndarray, sr: int) -> int:
    f = sr // 100
    quiet = np.abs(x[: len(x) // f * f]).reshape(-1, f).max(axis=1) < SILENCE_PEAK
    best = cur = 0
    for q in quiet[1:-1]:  # inner pauses only, not the file's own ends
        cur = cur + 1 if q else 0
        best = max(best, cur)
    return best * 10


def _quiet_runs(x: np.ndarray, sr: int, min_ms: int = 400) -> list[tuple[float, float]]:
    """(start, end) seconds of every run of quiet 10 ms frames at least ``min_ms`` long."""
    f = sr // 100
    quiet = np.abs(x[: len(x) // f * f]).reshape(-1, f).max(axis=1) < SILENCE_PEAK
    runs, start = [], None
    for i, q in enumerate([*quiet, False]):
        if q and start is None:
            start = i
        elif not q and start is not None:
            if (i - start) * 10 >= min_ms:
                runs.append((start / 100, i / 100))
            start = None
    return runs


def _raw_lexicons(settings: Settings, owner: str, names: list[str]) -> None:
    """Lexicons written straight to the topic, past the SDK's per-user check (as any producer can)."""
    from confluent_kafka import Producer

    from schemas import LexiconRecord, encode

    p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random"})
    for n in names:
        p.produce(settings.kafka.topic_lexicons, key=f"{owner}/{n}".encode(),
                  value=encode(LexiconRecord(owner=owner, name=n, pls=_lexicon(f"word {n}"))))
    assert p.flush(30) == 0


def _lexicon(alias: str) -> str:
    return ('<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" '
            f'xml:lang="en-US"><lexeme><grapheme>Qzx</grapheme><alias>{alias}</alias></lexeme></lexicon>')


def _words(settings: Settings, c: Completion, text: str) -> list[WordSpan]:
    """``c``'s words, checked: in order, inside the audio, pointing into ``text`` outside its markup,
    every word written outside markup covered by one."""
    from tests.support.pipeline import new_store

    assert c.status == "ok" and c.audio is not None and c.words is not None and c.words_reason is None, c
    words = decode_word_timings(new_store(settings).get(c.words.key)).words
    assert c.words_count == len(words) > 0
    assert [w.start_s for w in words] == sorted(w.start_s for w in words)
    assert all(0 <= w.start_s <= w.end_s <= c.audio.duration_s + 1e-3 for w in words)
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert all(0 <= w.start < w.end <= len(text) for w in words)
    assert all(text[:w.start].count("<") == text[:w.start].count(">") for w in words), "a caption inside markup"
    covered = {i for w in words for i in range(w.start, w.end)}
    for m in re.finditer(r"[A-Za-z0-9]+", re.sub(r"<[^>]*>", lambda t: " " * len(t.group(0)), text)):
        assert covered & set(range(m.start(), m.end())), (m.group(0), text)
    return words


def _publish(settings: Settings, reqs: list[dict[str, object]]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "partitioner": "murmur2_random"})
    for r in reqs:
        p.produce(settings.kafka.topic_requests, key=str(r["user_id"]).encode(), value=json.dumps(r).encode())
    assert p.flush(30) == 0


def test_ssml_and_lexicons_are_heard_as_written_and_hostile_ssml_fails_alone(settings: Settings,
                                                                               tmp_path: Path) -> None:
    import time

    from streams.client.lexicons import put_lexicon
    from streams.devstack.procs import Supervisor

    ssml = {
        "break": '<speak>Please hold on. <break time="1500ms"/> Thank you for waiting.</speak>',
        "nobreak": "<speak>Please hold on. Thank you for waiting.</speak>",
        "phone": '<speak>Call <say-as interpret-as="telephone">415 555 0123</say-as> today.</speak>',
        "chars": '<speak>Your code is <say-as interpret-as="characters">K7B</say-as>.</speak>',
        "sub": '<speak>We use <sub alias="Structured Query Language">SQL</sub> daily.</speak>',
    }
    reqs = [{"request_id": k, "user_id": f"u-{k}", "text": t, "text_type": "ssml", "timestamps": k in TIMED}
            for k, t in ssml.items()]
    reqs.append({"request_id": "plain-phone", "user_id": "u-plain", "text": "Call 4155550123 today."})
    for i, (k, doc) in enumerate(HOSTILE.items()):  # other users' plain requests around each hostile one
        reqs.append({"request_id": f"bad-{k}", "user_id": f"mallory-{i}", "text": doc, "text_type": "ssml"})
        reqs.append({"request_id": f"ok-{k}", "user_id": f"user-{i}", "text": f"Request {i} is fine."})
    # marks in the second segment (the first is plain), each just before a long pause
    reqs.append({"request_id": "marks", "user_id": "u-marks", "text_type": "ssml", "stream": True, "timestamps": True,
                 "text": (
        "<speak><p>Good morning to you.</p><p>Please hold on. <mark name='held'/><break time='700ms'/> "
        "Thank you for waiting. <mark name='thanked'/><break time='700ms'/> Goodbye.</p></speak>")})
    _raw_lexicons(settings, "lex-many", ["one", "two", "three"])  # past TTS_LEXICONS_PER_USER=2
    reqs += [{"request_id": f"many-{n}", "user_id": "lex-many", "text": "Say Qzx.", "lexicons": [n]}
             for n in ("one", "three")]
    v1 = put_lexicon(settings, "lex-user", "brand", _lexicon("green apple"))
    said = "Please buy Qzx today."
    reqs.append({"request_id": "lex-1", "user_id": "lex-user", "text": said, "lexicons": ["brand"], "timestamps": True})
    _publish(settings, reqs)
    with Supervisor(tmp_path / "logs") as sup:
        sup.stage("stage", settings)
        sup.worker("worker", settings)
        cs = completions(settings, count=len(reqs), timeout=240)
        assert by_request(cs) == Counter({r["request_id"]: 1 for r in reqs})
        # the lexicon changes while the stage runs: the same text again until the stage has the new version
        v2 = put_lexicon(settings, "lex-user", "brand", _lexicon("blue ocean"))
        deadline, again = time.monotonic() + 90, None
        for i in range(30):
            _publish(settings, [{"request_id": f"lex-2-{i}", "user_id": "lex-user", "text": said,
                                 "lexicons": ["brand"]}])
            (again,) = [c for c in completions(settings, count=len(reqs) + i + 1, timeout=60)
                        if c.request_id == f"lex-2-{i}"]
            if again.lexicons == [v2] or time.monotonic() > deadline:
                break
        sup.check_alive()
    got = {c.request_id: c for c in cs}
    chunks = [decode_chunk(m.value()) for m in drain_topic(settings.kafka.bootstrap_servers,
                                                           settings.kafka.topic_chunks, count=2, timeout=30)]

    answers = {}
    for k in HOSTILE:
        bad = got[f"bad-{k}"]
        assert bad.status == "failed" and bad.error is not None and bad.error.code == "invalid_ssml", bad
        assert bad.error.message.startswith("line ") and REASONS[k] in bad.error.message
        answers[k] = bad.error.message[:120]
        assert got[f"ok-{k}"].status == "ok"

    assert again is not None and v1 != v2
    first = got["lex-1"]
    assert first.lexicons == [v1] and again.lexicons == [v2], (first.lexicons, again.lexicons)
    assert again.cached_segments == 0 and again.audio is not None and first.audio is not None
    assert again.audio.sha256 != first.audio.sha256
    lex_heard = [normalize_text(recognize(*check_audio(settings, c))) for c in (first, again)]
    audio = {k: check_audio(settings, got[k]) for k in [*ssml, "plain-phone"]}
    pause = _longest_pause_ms(*audio["break"])
    plain_pause = _longest_pause_ms(*audio["nobreak"])
    heard = {k: normalize_text(recognize(*audio[k])) for k in ("phone", "plain-phone", "chars", "sub")}
    print(json.dumps({"pause_ms": pause, "pause_without_break_ms": plain_pause, "heard": heard,
                      "hostile": answers, "lexicon_heard": lex_heard, "lexicon_versions": [v1, v2]}))
    assert abs(pause - 1500) <= 150, pause
    assert plain_pause < 1000
    assert "one five five five five zero one two three" in heard["phone"], heard
    assert "million" in heard["plain-phone"] or "billion" in heard["plain-phone"], heard  # the contrast
    assert "kay seven" in heard["chars"], heard
    assert "structured query language" in heard["sub"], heard
    assert "green apple" in lex_heard[0] and "blue ocean" in lex_heard[1], lex_heard

    assert got["many-one"].status == "ok", got["many-one"].error
    over = got["many-three"]
    assert over.status == "failed" and over.error is not None and over.error.code == "too_many_lexicons", over
    assert "lex-many/three" in over.error.message

    marked = got["marks"]
    x, sr = check_audio(settings, marked)
    (chunk,) = [ch for ch in chunks if ch.request_id == "marks" and ch.marks]
    assert chunk.seq == 1 and chunk.offset_s is not None and chunk.offset_s > 0.5
    names = [m.name for m in marked.marks or ()]
    times = [m.time_s for m in marked.marks or ()]
    # the pauses of the two 700 ms breaks (+-10%): quiet runs of 600 ms or more that start inside the
    # second segment (not the join before it, nor the shorter natural pauses)
    pauses = [(a, b) for a, b in _quiet_runs(x, sr, min_ms=600) if a > chunk.offset_s]
    print(json.dumps({"marks": dict(zip(names, times, strict=True)), "pauses_s": pauses,
                      "segment_1_at_s": chunk.offset_s, "duration_s": marked.audio.duration_s if marked.audio else None}))
    assert names == ["held", "thanked"] and times[0] < times[1]
    assert marked.audio is not None and 0 < times[0] and times[1] < marked.audio.duration_s
    # each mark is where the words before it end: inside the pause after them, before the next words
    inside = [[k for k, (a, b) in enumerate(pauses) if a - 0.06 <= t <= b + 0.06] for t in times]
    assert inside == [[0], [1]], (times, pauses)
    assert [m.name for m in chunk.marks or ()] == names
    assert [round(chunk.offset_s + m.time_s, 3) for m in chunk.marks or ()] == pytest.approx(times, abs=0.002)

    # captions of what was written: every word timed, pointing at the SSML (or the text a lexicon rewrote)
    texts = {r["request_id"]: str(r["text"]) for r in reqs}
    words = {k: _words(settings, got[k], texts[k]) for k in [*TIMED, "marks", "lex-1"]}
    print(json.dumps({k: [(w.word, w.start_s, w.end_s) for w in ws] for k, ws in words.items()}))
    sql = [w for w in words["sub"] if w.word == "SQL"]
    assert len(sql) == 1 and texts["sub"][sql[0].start:sql[0].end] == "SQL"
    assert sql[0].end_s - sql[0].start_s > 0.6  # "Structured Query Language": one caption
    phone = [w for w in words["phone"] if "415" in w.word]
    assert len(phone) == 1 and texts["phone"][phone[0].start:phone[0].end] == "415 555 0123", phone
    qzx = [w for w in words["lex-1"] if w.word == "Qzx"]
    assert len(qzx) == 1 and said[qzx[0].start:qzx[0].end] == "Qzx" and qzx[0].end_s - qzx[0].start_s > 0.3
    held = {w.word: w for w in words["break"]}
    assert held["Thank"].start_s - held["on"].end_s >= 1.3  # the 1.5 s break falls between two words
    # the streamed request's chunks carry the same words, their times from where each chunk starts
    flat = [(ch.offset_s or 0.0, w) for ch in sorted(chunks, key=lambda ch: ch.seq) if ch.request_id == "marks"
            for w in ch.words or ()]
    assert [(w.word, w.start) for _, w in flat] == [(w.word, w.start) for w in words["marks"]]
    assert [round(t + w.start_s, 3) for t, w in flat] == pytest.approx([w.start_s for w in words["marks"]], abs=0.002)
