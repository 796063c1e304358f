# ruff: noqa: RUF001 - CJK punctuation is the point
"""Requests sent in pieces, without Kafka: the stage's open text, cuts, order, limits and timers."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import End, Rejection, Segment, decode_segment_event
from streams.settings import Settings
from streams.stage.core import Outcome, StageCore
from streams.stage.cut import budget_for, cut_open, first_end, preload_words, shorten_first, speakable
from streams.stage.pieces import OpenIndex, OpenRequest, decode_open, tick_value

S = Settings().replace(max_segment_chars=60, max_text_chars=2000, dedup_window_s=100, max_open_streams_per_user=2,
                       max_open_streams=3, max_pieces_ahead=2, max_stream_pieces=50)
NOW = 1_700_000_000.0


class Stage:
    """StageCore with a dict for the open table and a dict for the dedup table, as the faust app keeps them."""

    def __init__(self, **changes: Any) -> None:
        s = S.replace(**changes) if changes else S
        self.now = NOW
        self.core = StageCore(s.stage, s.kafka, s.engine, voices=("heart",), clock=lambda: self.now)
        self.open: dict[tuple[bytes, str], bytes] = {}
        self.seen: dict[bytes, dict[str, float]] = {}
        self.off = 0

    def view(self, key: bytes) -> Any:
        stage = self

        class V:
            def get(self, rid: str) -> OpenRequest | None:
                raw = stage.open.get((key, rid))
                return decode_open(raw) if raw else None

            def user_open(self) -> int:
                return sum(1 for k, _ in stage.open if k == key)

            def all_open(self) -> int:
                return len(stage.open)

        return V()

    def send(self, value: bytes, key: bytes = b"alice", *, tick: bool = False) -> Outcome:
        self.off += 1
        out = self.core.handle(key, value, partition=1, offset=self.off, timestamp_ms=int(self.now * 1000),
                               seen=self.seen.setdefault(key, {}), opened=self.view(key), tick=tick)
        if out.remember:
            self.seen[key][out.remember] = self.now
        if out.open is not None:
            rid, state = out.open
            if state is None:
                self.open.pop((key, rid), None)
            else:
                self.open[(key, rid)] = state
        return out

    def piece(self, seq: int, text: str, rid: str = "r1", key: bytes = b"alice", **kw: Any) -> Outcome:
        body = {"request_id": rid, "user_id": key.decode(), "text": text, "seq": seq, **kw}
        return self.send(json.dumps(body).encode(), key)

    def tick(self, rid: str, kind: str, key: bytes = b"alice") -> Outcome:
        st = self.view(key).get(rid)
        return self.send(tick_value(rid, key.decode(), kind, st.changes if st else 0), key, tick=True)  # type: ignore[arg-type]


def events(out: Outcome) -> list[Segment | Rejection | End]:
    return [decode_segment_event(r.value) for r in out.records]


def texts(outs: list[Outcome]) -> list[str]:
    return [e.text for o in outs for e in events(o) if isinstance(e, Segment)]


def test_sentences_go_out_while_later_words_arrive_and_the_final_piece_closes() -> None:
    s = Stage()
    words = "Hello there, my friend. This is the second sentence. And the end".split(" ")
    outs = [s.piece(i, w + " ", stream=True) if i == 0 else s.piece(i, w + " ") for i, w in enumerate(words)]
    sent = [e for o in outs for e in events(o)]
    assert [e.text for e in sent] == ["Hello there,", "my friend.", "This is the second sentence."]  # type: ignore[union-attr]
    assert all(isinstance(e, Segment) and e.more and not e.last and e.total == e.seq + 2 for e in sent)
    assert outs[1].records and not outs[0].records  # the first clause left as soon as it was complete
    last = s.piece(len(words), "", final=True)
    seg, end = events(last)
    assert isinstance(seg, Segment) and seg.text == "And the end" and seg.more and seg.seq == 3
    assert isinstance(end, End) and end.total == 4 and end.parts == [*(e.hash for e in sent), seg.hash]  # type: ignore[union-attr]
    assert last.kind == "closed" and last.remember == "r1" and not s.open
    assert all(e.stream for e in sent) and seg.stream and end.stream  # piece 0's settings on every segment


def test_nothing_left_at_the_final_piece_ends_with_an_end_record() -> None:
    s = Stage()
    s.piece(0, "One sentence. ")
    out = s.piece(1, "", final=True)
    [end] = events(out)
    assert isinstance(end, End) and end.total == 1 and len(end.parts) == 1
    assert end.as_last().last and end.as_last().parts == end.parts


def test_a_repeated_or_late_piece_is_dropped_and_a_gap_is_held_then_filled() -> None:
    s = Stage()
    assert s.piece(0, "Alpha. ").records
    assert s.piece(0, "Alpha. ").kind == "duplicate"  # re-sent
    held = s.piece(2, "Gamma. ")
    assert held.kind == "piece" and not held.records  # waits for 1
    assert s.piece(2, "Gamma. ").kind == "duplicate"
    filled = s.piece(1, "Beta. ")
    assert texts([filled]) == ["Beta.", "Gamma."]  # in order
    done = s.piece(3, "", final=True)
    assert done.kind == "closed"
    late = s.piece(4, "after the end")
    assert late.kind == "duplicate" and not late.records


def test_too_many_pieces_ahead_fails_the_request_with_piece_gap() -> None:
    s = Stage()
    s.piece(0, "Alpha ")
    s.piece(2, "b ")
    s.piece(3, "c ")
    out = s.piece(4, "d ")
    [rej] = events(out)
    assert isinstance(rej, Rejection) and rej.error.code == "piece_gap" and out.remember == "r1" and not s.open


def test_open_requests_are_bounded_per_user_and_per_stage() -> None:
    s = Stage()
    s.piece(0, "a", rid="a1")
    s.piece(0, "a", rid="a2")
    [rej] = events(s.piece(0, "a", rid="a3"))
    assert isinstance(rej, Rejection) and rej.error.code == "too_many_streams"
    s.piece(0, "b", rid="b1", key=b"bob")
    [rej] = events(s.piece(0, "c", rid="c1", key=b"carol"))
    assert isinstance(rej, Rejection) and rej.error.code == "stage_busy"
    # refused at the bound without being recorded (the stage need not wait for the rejection): a later
    # piece is refused again, and the worker's done log drops the repeat
    again = s.piece(1, "more", rid="a3")
    assert again.kind == "failed" and again.remember is None and again.open is None


def test_too_many_pieces_and_too_much_text_fail_the_request() -> None:
    s = Stage(max_stream_pieces=3)
    for i in range(3):
        s.piece(i, "x ")
    [rej] = events(s.piece(3, "x "))
    assert isinstance(rej, Rejection) and rej.error.code == "too_many_pieces"
    s = Stage(max_text_chars=10)
    out = s.piece(0, "Hello world and more")
    assert isinstance(events(out)[-1], Rejection) and events(out)[-1].error.code == "text_too_long"  # type: ignore[union-attr]


def test_idle_tick_cuts_whole_words_and_timeout_closes_with_stream_timeout() -> None:
    s = Stage()
    s.piece(0, "Hello wonderful wor")
    out = s.tick("r1", "idle")
    assert texts([out]) == ["Hello wonderful"]
    assert decode_open(s.open[(b"alice", "r1")]).held.strip() == "wor"
    stale = s.send(tick_value("r1", "alice", "timeout", 0), tick=True)
    assert stale.kind == "duplicate" and stale.code == "tick_stale"  # decided before the last change
    out = s.tick("r1", "timeout")
    [rej] = events(out)
    assert isinstance(rej, Rejection) and rej.error.code == "stream_timeout" and not s.open


def test_flush_speaks_what_is_held_and_keeps_the_request_open() -> None:
    s = Stage()
    out = s.piece(0, "Half a sente", flush=True)
    assert texts([out]) == ["Half a sente"] and s.open


def test_bad_settings_on_piece_zero_fail_the_request() -> None:
    s = Stage()
    [rej] = events(s.piece(0, "Hi. ", voice="nobody"))
    assert isinstance(rej, Rejection) and rej.error.code == "unknown_voice"


def test_timed_pieces_say_where_each_segment_came_from_in_the_text_as_sent() -> None:
    s = Stage()
    sent = ["Well\u2026  the first", " one, it", " ends here.  And", "  then\tthe second", " one.", ""]
    outs = [s.piece(i, t, stream=True, timestamps=True) if i == 0 else s.piece(i, t, final=i == len(sent) - 1)
            for i, t in enumerate(sent)]
    whole = "".join(sent)
    segs = [e for o in outs for e in events(o) if isinstance(e, Segment)]
    [end] = [e for o in outs for e in events(o) if isinstance(e, End)]
    assert len(segs) >= 3 and all(x.timestamps and x.source is not None for x in segs)
    for x in segs:
        assert x.source is not None
        first, last = x.source.offset(0), x.source.offset(len(x.text) - 1)
        assert whole[first] == x.text[0] and whole[last] == x.text[-1], (x.text, whole[first:last + 1])
    assert end.timestamps and end.sources == [x.source for x in segs]


def test_ssml_cannot_come_in_pieces() -> None:
    [rej] = events(Stage().piece(0, "<speak>Hi</speak>", text_type="ssml"))
    assert isinstance(rej, Rejection) and rej.error.code == "invalid_field"


def test_a_piece_that_looks_like_a_speak_document_is_text_when_no_text_type_is_given() -> None:
    """A whole request's absent text_type reads a <speak> document as SSML; a piece is never one."""
    segs = [e for e in events(Stage().piece(0, "<speak>Hi there.</speak>", final=True)) if isinstance(e, Segment)]
    assert "".join(x.text for x in segs) == "<speak>Hi there.</speak>"


def test_a_whole_request_under_an_open_id_is_dropped() -> None:
    s = Stage()
    s.piece(0, "Hi")
    out = s.send(json.dumps({"request_id": "r1", "user_id": "alice", "text": "Whole."}).encode())
    assert out.kind == "duplicate" and not out.records


def test_replayed_records_cut_the_same_segments() -> None:
    """A stage whose table lost its last changes re-reads the same records (its timer's too) and sends
    the same segments under the same numbers."""
    s = Stage()
    s.piece(0, "Hello there, my friend. ", stream=True)
    behind = dict(s.open)
    first = [s.piece(1, "Second one and"), s.tick("r1", "idle"), s.piece(2, " more. ")]
    tick_changes = decode_open(behind[(b"alice", "r1")]).changes + 1
    s.open = behind  # the changelog had not caught up: re-read from piece 1
    again = [s.piece(1, "Second one and"), s.send(tick_value("r1", "alice", "idle", tick_changes), tick=True),
             s.piece(2, " more. ")]
    seg = [(e.seq, e.hash) for o in first for e in events(o)]  # type: ignore[union-attr]
    assert seg and seg == [(e.seq, e.hash) for o in again for e in events(o)]  # type: ignore[union-attr]


# -- cutting -----------------------------------------------------------------------------

def test_first_segment_budget_per_script_and_never_inside_a_word() -> None:
    assert budget_for("你好") == 10 and budget_for("Hello") == 60 and budget_for("안녕") == 24
    assert shorten_first(["今天的天气非常好我们一起去公园散步然后去吃饭吧。"], 10) == [
        "今天的天气非常好我们", "一起去公园散步然后去吃饭吧。"]
    t = "This sentence has no clause marks but it is long enough to pass the budget for sure."
    c = first_end(t, 60, complete=True)
    assert 0 < c <= 60 and t[c] == " "
    assert first_end("Short one.", 60, complete=True) == 0


def test_a_dot_at_the_end_waits_for_the_next_character() -> None:
    assert cut_open("It costs 3.", max_chars=300, budget=None) == ([], "It costs 3.")
    assert cut_open("It costs 3.14 now. Ok", max_chars=300, budget=None) == (["It costs 3.14 now."], " Ok")
    assert cut_open("Really?", max_chars=300, budget=None) == (["Really?"], "")
    assert cut_open("你好。", max_chars=300, budget=None) == (["你好。"], "")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["Hello", " world", ".", ",", " ", "你好", "。", "3.14", "!", "?", " Mr.", " Smith",
                                 "abc", "，"]), min_size=1, max_size=30))
def test_cutting_pieces_loses_and_reorders_nothing(parts: list[str]) -> None:
    held, out, budget = "", [], 10
    for p in parts:
        held += p
        segs, held = cut_open(held, max_chars=20, budget=budget)
        if segs:
            budget = None  # type: ignore[assignment]
        out += segs
    segs, held = cut_open(held, max_chars=20, budget=budget, force="all")
    out += segs
    assert "".join("".join(out).split()) == "".join("".join(parts).split())
    # within the limit, but for marks joined to their segment at either end (alone they would be silence)
    def core(x: str) -> str:
        i, j = 0, len(x)
        while i < j and not x[i].isalnum():
            i += 1
        while j > i and not x[j - 1].isalnum():
            j -= 1
        return x[i:j]

    assert all(len(core(s)) <= 20 for s in out) and all(speakable(s) for s in out[:-1]) and not held


def test_open_index_counts_and_due_ticks_once() -> None:
    ix = OpenIndex()
    st_ = OpenRequest(user_id="u", partition=2, enqueued_at=0, last_at=100.0, changes=3, held="wor")
    ix.put(b"u\x00r1", st_)
    assert ix.user_count(b"u") == 1 and len(ix) == 1
    assert ix.due(100.5, idle_s=0.7, timeout_s=20) == []
    assert ix.due(101.0, idle_s=0.7, timeout_s=20) == [(b"u", 2, "r1", "u", "idle", 3)]
    assert ix.due(101.2, idle_s=0.7, timeout_s=20) == []  # sent once
    assert ix.due(121.0, idle_s=0.7, timeout_s=20)[0][4] == "timeout"
    ix.delete(b"u\x00r1")
    assert ix.user_count(b"u") == 0 and len(ix) == 0


def test_websocket_output_formats() -> None:
    import numpy as np
    import pytest

    from streams.gateway.errors import ApiError
    from streams.gateway.stream_input import WsEncoder

    tone = (np.sin(np.arange(24_000) / 24_000 * 2 * np.pi * 440) * 20_000).astype(np.int16)  # 1 s at 24 kHz
    assert len(WsEncoder("pcm_16000").feed(tone)) == 2 * 16_000
    assert len(WsEncoder("pcm_24000").feed(tone)) == 2 * 24_000
    ulaw = WsEncoder("ulaw_8000").feed(tone)
    assert len(ulaw) == 8000 and ulaw[:1] == b"\xff"  # silence (0) is 0xff in mu-law
    silence = WsEncoder("ulaw_8000").feed(np.zeros(24, np.int16))
    assert set(silence) == {0xFF}
    mp3 = WsEncoder("mp3_44100_128")
    data = mp3.feed(tone) + mp3.close()
    assert data[:3] == b"ID3" or data[0] == 0xFF
    with pytest.raises(ApiError) as e:
        WsEncoder("opus_48000_64")
    assert e.value.code == "invalid_output_format"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["Hello", " world", ".", ",", " ", "abc", "3", "14", "!", "?", " Mr.", " Smith", "x",
                                 "\t"]), min_size=1, max_size=40), st.booleans())
def test_every_piece_is_spoken_once_and_in_order(parts: list[str], stream: bool) -> None:
    """Whatever the pieces, every letter and digit is spoken once, in order, in segments numbered 0..n-1
    (the fast path for pieces of letters only included)."""
    s = Stage(max_stream_pieces=1000)
    outs = [s.piece(i, t, stream=stream) if i == 0 else s.piece(i, t) for i, t in enumerate(parts)]
    outs.append(s.piece(len(parts), "", final=True))
    evs = [e for o in outs for e in events(o)]
    segs = [e for e in evs if isinstance(e, Segment)]
    sent = [c for c in "".join(parts) if c.isalnum()]
    if not sent:
        assert [e.error.code for e in evs if isinstance(e, Rejection)] == ["empty_text"]
        return
    assert [c for c in "".join(e.text for e in segs) if c.isalnum()] == sent
    assert [e.seq for e in segs] == list(range(len(segs))) and isinstance(evs[-1], End)


def test_preload_words_loads_jiebas_dictionary_on_its_own_thread() -> None:
    import jieba

    t = preload_words()
    assert t.daemon and t.name == "jieba-preload"
    t.join(60)
    assert not t.is_alive() and jieba.dt.initialized
    assert first_end("尊敬的客户您好欢迎致电我们的客服中心", 10, complete=True) == 9  # 尊敬|的|客户|您好|欢迎|
