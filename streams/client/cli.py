"""``ttsflow say | submit | watch | fetch``: the client from a shell.

Guarantees:

* Every command that needs the stack checks Kafka with one metadata request first and,
  when it does not answer, prints one line saying so and exits 1.
* ``submit`` is resumable: request ids are derived from the file's content and line
  number (or taken from a JSONL ``request_id``), each finished request is appended to a
  state file in ``--out`` (``.ttsflow-submit.jsonl``), and a rerun skips ids whose audio
  file exists or that the state file records as failed (``--retry-failed`` runs those). Ids submitted by an interrupted run are looked
  for in ``tts.completed`` from the time they were first submitted, so a completion the
  stage would not produce twice (it drops repeated ids) is still collected.
* Exit status: 0 when everything asked for succeeded, 1 otherwise (failed requests,
  timeouts, stack down), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from schemas import Completion, encode
from streams.client.errors import ClientError, CompletionTimeout, RequestFailed
from streams.settings import load_settings

__all__ = ["chunk_path", "main_fetch", "main_say", "main_submit", "main_watch"]

STATE_FILE = ".ttsflow-submit.jsonl"


def _fail(cmd: str, e: object) -> int:
    print(f"ttsflow {cmd}: {e}", file=sys.stderr)
    return 1


def _describe(c: Completion) -> str:
    if c.status == "failed":
        err = f"{c.error.code}: {c.error.message}" if c.error else "no detail"
        return f"failed request_id={c.request_id} user={c.user_id} {err}"
    parts = [f"ok request_id={c.request_id} user={c.user_id}"]
    if c.audio is not None:
        parts.append(f"{c.audio.duration_s:.2f}s {c.audio.format} {c.audio.bytes}B")
    parts.append(f"segments={c.segments} cached={c.cached_segments}")
    if c.timings is not None:
        parts.append(f"e2e={c.timings.e2e_ms:.0f}ms")
    if c.audio is not None:
        parts.append(c.audio.uri)
    if c.marks:  # SSML <mark/>s: where the audio reaches each
        parts.append("marks=" + ",".join(f"{m.name}@{m.time_s:.3f}s" for m in c.marks))
    return " ".join(parts)


class _Watchdog:
    """Says once per stall, on stderr, when nothing completed for ``TTS_GATEWAY_PROBE_S`` seconds
    and the stage or worker group has no active member (the usual reason: not started)."""

    def __init__(self, cmd: str, settings: Any, timeout: float) -> None:
        self.cmd, self.settings, self.timeout = cmd, settings, timeout
        self.probe_s = settings.gateway.gateway_probe_s
        self.last = time.monotonic()
        self.warned = False

    def progressed(self) -> None:
        self.last, self.warned = time.monotonic(), False

    def check(self) -> None:
        if self.warned or time.monotonic() - self.last < self.probe_s:
            return
        self.warned = True
        from streams.client import pipeline_problems

        for p in pipeline_problems(self.settings):
            print(f"ttsflow {self.cmd}: {p}; still waiting (up to {self.timeout:g} s)", file=sys.stderr, flush=True)


# --- say ---------------------------------------------------------------------------------------

def main_say(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow say", description="Publish TEXT, wait for it, save the audio.")
    ap.add_argument("text", nargs="?", help="the text (not with --stdin-stream)")
    ap.add_argument("-o", "--out", required=True, help="audio file to write")
    ap.add_argument("--user", default="cli", help="user id (the partition key)")
    ap.add_argument("--voice", default=None)
    ap.add_argument("--voices", action="append", default=None, metavar="LANG=VOICE[,LANG=VOICE]",
                    help="the voice of each language of a mixed-language text, e.g. ja=jf_alpha,en=heart (zh, ja, "
                         "en; the rest is spoken by --voice); repeatable")
    ap.add_argument("--format", default=None, help="wav, flac or ogg (default: from the file suffix, else wav)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the completion")
    ap.add_argument("--stream", action="store_true",
                    help="ask for streaming: write each segment's audio as it commits to OUT-STEM.NNN.wav "
                         "(NNN = its seq, playable at once), then the whole request to OUT")
    ap.add_argument("--priority", default="interactive", choices=("interactive", "bulk"),
                    help="bulk (audiobooks, backfills) yields to interactive requests for a while")
    ap.add_argument("--captions", default=None, metavar="FILE",
                    help="ask for word timings and write the captions to FILE (.vtt: WebVTT, .srt: SubRip)")
    ap.add_argument("--timestamps", action="store_true", help="ask for word timings (implied by --captions)")
    ap.add_argument("--json", action="store_true",
                    help="print the completion as one JSON object (with its words, when timed) instead of a line")
    ap.add_argument("--ssml", action="store_true", help="TEXT is an SSML document (text_type ssml)")
    ap.add_argument("--lexicon", action="append", default=None, metavar="NAME",
                    help="apply this lexicon (yours by name, global/NAME a global one); repeat for up to 5, in order")
    ap.add_argument("--stdin-stream", action="store_true",
                    help="read the text from standard input as it is typed or piped and send it in pieces: each "
                         "sentence is spoken as soon as it is complete (chunks written like --stream); end of input "
                         "ends the request (docs/using/streaming-input.md)")
    a = ap.parse_args(argv)
    if (a.text is None) != a.stdin_stream:
        ap.error("give TEXT, or --stdin-stream (and no TEXT)")
    try:
        a.voices = parse_voice_map(a.voices or [])
    except ValueError as e:
        ap.error(str(e))
    if a.voices and (a.stdin_stream or a.ssml):
        ap.error("--voices needs the whole plain text: not with --stdin-stream or --ssml")
    fmt = a.format or (Path(a.out).suffix.lstrip(".").lower() if Path(a.out).suffix else "wav")
    if a.captions is not None and Path(a.captions).suffix.lower() not in (".vtt", ".srt"):
        return _fail("say", f"captions go to a .vtt or .srt file, not {a.captions!r}")
    a.timestamps = a.timestamps or a.captions is not None
    from streams.client import TTSClient

    try:
        settings = load_settings()
        with TTSClient(settings, connect_timeout=3.0) as client:
            t0 = time.monotonic()
            if a.stdin_stream:
                c = _say_streaming(client, a, fmt, t0, client.stream_text(
                    _stdin_pieces(), a.user, voice=a.voice, format=fmt, priority=a.priority, timeout=a.timeout))
            elif a.stream:
                c = _say_streaming(client, a, fmt, t0)
            else:
                rid = client.submit(a.text, a.user, voice=a.voice, format=fmt, priority=a.priority,
                                    text_type="ssml" if a.ssml else None, lexicons=a.lexicon,
                                    timestamps=a.timestamps, voices=a.voices)
                dog = _Watchdog("say", settings, a.timeout)
                try:
                    c = client.wait(rid, min(a.timeout, dog.probe_s))
                except CompletionTimeout:
                    dog.check()
                    c = client.wait(rid, max(a.timeout - (time.monotonic() - t0), 0.0))
            path = client.save(c, a.out)
            words = _timed_words(client, c, a)
    except ClientError as e:
        return _fail("say", e)
    if a.json:
        obj = json.loads(encode(c))
        if words is not None:
            obj["words"] = [json.loads(encode(w)) for w in words]
        print(json.dumps(obj, ensure_ascii=False))
        return 0
    print(f"saved {path} ({_describe(c)}; {time.monotonic() - t0:.2f}s wall)")
    if a.timestamps and c.words_reason:
        print(f"no word timings: {c.words_reason}", file=sys.stderr)
    return 0


def parse_voice_map(specs: list[str]) -> dict[str, str] | None:
    """``--voices`` values (``ja=jf_alpha,en=heart``, repeatable) as a request's voice map (None: none).
    Raises ``ValueError`` for a pair without ``=`` or a language given twice."""
    out: dict[str, str] = {}
    for spec in specs:
        for pair in filter(None, (p.strip() for p in spec.split(","))):
            lang, sep, voice = pair.partition("=")
            if not sep or not lang.strip() or not voice.strip():
                raise ValueError(f"--voices: {pair!r} is not LANG=VOICE")
            if lang.strip() in out:
                raise ValueError(f"--voices: {lang.strip()!r} is given twice")
            out[lang.strip()] = voice.strip()
    return out or None


def _timed_words(client: Any, c: Completion, a: argparse.Namespace) -> list[Any] | None:
    """The completion's words (for ``--json``) and its captions written to ``--captions``; None
    without them (not asked for, or the voice cannot time words: the completion says why)."""
    from streams.client.audio import write_atomic

    if not a.timestamps or c.words is None:
        return None
    if a.captions is not None:
        fmt = Path(a.captions).suffix.lower().lstrip(".")
        write_atomic(Path(a.captions), client.captions(c, fmt).encode("utf-8"))
    return list(client.words(c)) if a.json else None


def chunk_path(out: str | Path, seq: int) -> Path:
    """Where ``say --stream`` writes chunk ``seq`` of the request saved to ``out``: ``a.wav`` ->
    ``a.000.wav``, ``a.001.wav`` ... (a chunk is one segment, WAV at the engine's rate)."""
    out = Path(out)
    return out.with_name(f"{out.stem}.{seq:03d}.wav")


def _stdin_pieces() -> Iterator[str]:
    """Standard input as it arrives (what a read returns: a typed line, or a pipe's next bytes)."""
    import codecs
    import os

    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fd = sys.stdin.fileno()
    while True:
        data = os.read(fd, 4096)
        text = dec.decode(data, final=not data)
        if text:
            yield text
        if not data:
            return


def _say_streaming(client: Any, a: argparse.Namespace, fmt: str, t0: float, items: Any = None) -> Completion:
    from schemas import Chunk
    from streams.client.audio import write_atomic

    if items is None:
        items = client.stream(a.text, a.user, voice=a.voice, format=fmt, priority=a.priority, timeout=a.timeout,
                              timestamps=a.timestamps, voices=a.voices)
    for item in items:
        if isinstance(item, Chunk):
            path = write_atomic(chunk_path(a.out, item.seq), client.fetch_chunk(item))
            if not a.json:
                of = "" if item.more else f"/{item.total}"  # a request sent in pieces: its count is known at the end
                said = f" words={len(item.words)}" if item.words is not None else ""
                if a.voices and item.model is not None:  # a voice map: which voice spoke this part
                    said += f" voice={item.model.voice}"
                print(f"chunk {item.seq + 1}{of} {path} {item.audio.duration_s:.2f}s "
                      f"at {time.monotonic() - t0:.2f}s{said}", flush=True)
        else:
            return item
    raise AssertionError("stream() ends with the completion")


# --- submit ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Item:
    request_id: str
    user_id: str
    text: str
    voice: str | None
    format: str


def _read_items(path: Path, *, user: str, voice: str | None, fmt: str) -> list[_Item]:
    """One request per non-empty line: plain text, or a JSON object with at least ``text``."""
    stem = hashlib.sha256(path.name.encode()).hexdigest()[:8]
    items: list[_Item] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: not valid JSON: {e}") from None
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    raise ValueError(f"{path}:{n}: a JSON line needs a string field \"text\"")
                text = obj["text"]
                u = str(obj.get("user_id") or user)
                v = obj.get("voice", voice)
                fm = str(obj.get("format") or fmt)
                rid = obj.get("request_id")
            else:
                text, u, v, fm, rid = line, user, voice, fmt, None
            if not rid:
                h = hashlib.sha256(json.dumps([n, text, u, v, fm]).encode()).hexdigest()[:16]
                rid = f"{stem}-{n}-{h}"
            if rid in seen:
                raise ValueError(f"{path}:{n}: request_id {rid!r} appears twice")
            seen.add(rid)
            items.append(_Item(str(rid), u, text, v, fm))
    return items


def _load_state(out: Path) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """(done records by id, first submit time by id) from the state file."""
    done: dict[str, dict[str, Any]] = {}
    submitted: dict[str, float] = {}
    p = out / STATE_FILE
    if not p.exists():
        return done, submitted
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        if rec.get("event") == "done":
            done[rec["request_id"]] = rec
        elif rec.get("event") == "submitted":
            submitted.setdefault(rec["request_id"], float(rec.get("t", time.time())))
    return done, submitted


class _Progress:
    def __init__(self, total: int, stream: TextIO) -> None:
        self.total = total
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0

    def line(self, ok: int, failed: int) -> str:
        done = ok + failed
        el = max(time.monotonic() - self.t0, 1e-9)
        rate = done / el
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        eta_s = "?" if eta == float("inf") else f"{int(eta // 60)}m{int(eta % 60):02d}s"
        pct = 100.0 * done / self.total if self.total else 100.0
        width = 24
        fill = int(width * done / self.total) if self.total else width
        return (f"[{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} {pct:5.1f}% "
                f"ok={ok} failed={failed} {rate:.2f} req/s ETA {eta_s}")

    def update(self, ok: int, failed: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        end = "\r" if self.tty and not force else "\n"
        print(self.line(ok, failed), end=end, file=self.stream, flush=True)


def main_submit(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow submit",
                                 description="Publish a file of requests (text or JSONL lines) and collect the audio.")
    ap.add_argument("file", type=Path)
    ap.add_argument("--out", required=True, type=Path, help="directory for <request_id>.<format> files and state")
    ap.add_argument("--user", default="cli", help="user id for lines that do not name one")
    ap.add_argument("--voice", default=None)
    ap.add_argument("--format", default="wav")
    ap.add_argument("--max-inflight", type=int, default=500, help="requests submitted but not yet completed")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up when nothing completes for this long")
    ap.add_argument("--retry-failed", action="store_true", help="resubmit requests recorded as failed")
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    a = ap.parse_args(argv)
    try:
        items = _read_items(a.file, user=a.user, voice=a.voice, fmt=a.format)
    except (OSError, ValueError) as e:
        return _fail("submit", e)
    a.out.mkdir(parents=True, exist_ok=True)
    done, submitted = _load_state(a.out)
    todo: list[_Item] = []
    skipped = 0
    for it in items:
        rec = done.get(it.request_id)
        # done: its audio is in --out, or it failed for good (the state file says so);
        # an ok whose file went missing runs again
        if (a.out / f"{it.request_id}.{it.format}").exists() or (
                rec is not None and rec.get("status") == "failed" and not a.retry_failed):
            skipped += 1
        else:
            todo.append(it)
    from streams.client import TTSClient

    earliest = min((submitted[it.request_id] for it in todo if it.request_id in submitted), default=None)
    lookback = 30.0 if earliest is None else max(30.0, time.time() - earliest + 30.0)
    counts: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    t0 = time.monotonic()
    prog = _Progress(len(todo), sys.stderr)
    settings = load_settings()
    dog = _Watchdog("submit", settings, a.timeout)
    try:
        with TTSClient(settings, lookback_s=lookback, connect_timeout=3.0) as client, \
                (a.out / STATE_FILE).open("a", encoding="utf-8") as state:
            pending: dict[concurrent.futures.Future[Completion], _Item] = {}
            queue = list(reversed(todo))
            last_progress = time.monotonic()
            while queue or pending:
                while queue and len(pending) < a.max_inflight:
                    it = queue.pop()
                    client.submit(it.text, it.user_id, voice=it.voice, format=it.format, request_id=it.request_id,
                                  block=False)
                    if it.request_id not in submitted:
                        state.write(json.dumps({"event": "submitted", "request_id": it.request_id,
                                                "t": time.time()}) + "\n")
                    pending[client.wait_future(it.request_id)] = it
                state.flush()
                finished, _ = concurrent.futures.wait(list(pending), timeout=0.5,
                                                      return_when=concurrent.futures.FIRST_COMPLETED)
                if finished:
                    dog.progressed()
                elif pending:
                    dog.check()
                for f in finished:
                    it = pending.pop(f)
                    c = f.result()
                    out: dict[str, Any] = {"event": "done", "request_id": it.request_id, "status": c.status}
                    try:
                        if c.status == "ok":
                            path = client.save(c, a.out / f"{it.request_id}.{it.format}")
                            out["file"] = path.name
                            counts["ok"] += 1
                        else:
                            raise RequestFailed(c.request_id, c.error.code if c.error else "unknown",
                                                c.error.message if c.error else "", completion=c)
                    except RequestFailed as e:
                        out["code"], out["message"] = e.code, e.message
                        counts["failed"] += 1
                        codes[e.code] += 1
                    except ClientError as e:  # audio fetch: recorded, retried by the next run
                        out = {"event": "fetch_failed", "request_id": it.request_id, "message": str(e)}
                        counts["fetch_failed"] += 1
                    state.write(json.dumps(out) + "\n")
                    last_progress = time.monotonic()
                state.flush()
                prog.update(counts["ok"], counts["failed"] + counts["fetch_failed"])
                if pending and time.monotonic() - last_progress > a.timeout:
                    counts["timed_out"] = len(pending) + len(queue)
                    break
            if client.flush(30):
                counts["undelivered"] += 1
    except ClientError as e:
        return _fail("submit", e)
    prog.update(counts["ok"], counts["failed"] + counts["fetch_failed"], force=True)
    el = time.monotonic() - t0
    summary = {"requests": len(items), "skipped": skipped, "submitted": len(todo), "ok": counts["ok"],
               "failed": counts["failed"], "failed_by_code": dict(codes), "fetch_failed": counts["fetch_failed"],
               "timed_out": counts["timed_out"], "elapsed_s": round(el, 2),
               "requests_per_s": round((counts["ok"] + counts["failed"]) / el, 2) if el > 0 else 0.0,
               "out": str(a.out)}
    if a.json:
        print(json.dumps(summary))
    else:
        by_code = ", ".join(f"{k}={v}" for k, v in sorted(codes.items())) or "-"
        print(f"{summary['requests']} requests: {skipped} already done, {counts['ok']} ok, {counts['failed']} failed "
              f"({by_code}), {counts['fetch_failed']} fetch errors, {counts['timed_out']} timed out; "
              f"{el:.1f}s, {summary['requests_per_s']} req/s -> {a.out}")
    bad = counts["failed"] + counts["fetch_failed"] + counts["timed_out"]
    return 0 if bad == 0 else 1


# --- watch -------------------------------------------------------------------------------------

def main_watch(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow watch", description="Tail completions as they commit.")
    ap.add_argument("--json", action="store_true", help="one completion JSON object per line")
    ap.add_argument("--from-beginning", action="store_true")
    ap.add_argument("--lookback", type=float, default=0.0, help="start this many seconds back")
    ap.add_argument("--count", type=int, default=0, help="stop after this many completions (0: never)")
    a = ap.parse_args(argv)
    from streams.client import tail_completions

    n = 0
    try:
        for c, m in tail_completions(load_settings().kafka, from_beginning=a.from_beginning, lookback_s=a.lookback):
            if a.json:
                print(encode(c).decode(), flush=True)
            else:
                ts = time.strftime("%H:%M:%S", time.localtime(m.timestamp()[1] / 1000))
                print(f"{ts} p{m.partition()}@{m.offset()} {_describe(c)}", flush=True)
            n += 1
            if a.count and n >= a.count:
                break
    except ClientError as e:
        return _fail("watch", e)
    return 0


# --- fetch -------------------------------------------------------------------------------------

def main_fetch(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow fetch", description="Download a completed request's audio.")
    ap.add_argument("request_id")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds allowed for scanning tts.completed")
    a = ap.parse_args(argv)
    from streams.client.audio import fetch_audio, write_atomic
    from streams.client.history import find_completion

    settings = load_settings()
    try:
        c = find_completion(settings.kafka, a.request_id, timeout=a.timeout)
        if c is None:
            print(f"ttsflow fetch: no completion for request {a.request_id!r} in {settings.kafka.topic_completed} "
                  "(not finished yet, or older than the topic's retention)", file=sys.stderr)
            return 1
        path = write_atomic(Path(a.out), fetch_audio(settings.s3, c))
    except CompletionTimeout:
        return _fail("fetch", f"scanning {settings.kafka.topic_completed} took longer than {a.timeout:g} s")
    except ClientError as e:
        return _fail("fetch", e)
    print(f"saved {path} ({_describe(c)})")
    return 0


def main_lexicon(argv: list[str]) -> int:
    """``ttsflow lexicon put|get|list|delete``: a user's pronunciation lexicons (W3C PLS) on their topic."""
    ap = argparse.ArgumentParser(prog="ttsflow lexicon", description=(
        "Store, show, list or delete pronunciation lexicons (W3C PLS 1.0). NAME is yours; global/NAME is a "
        "global one (operators write those)."))
    sub = ap.add_subparsers(dest="op", required=True)
    put = sub.add_parser("put", help="store or replace lexicon NAME from a PLS file")
    put.add_argument("name")
    put.add_argument("file", help="the PLS document (- for stdin)")
    for op in ("get", "delete"):
        sp = sub.add_parser(op, help=f"{op} lexicon NAME")
        sp.add_argument("name")
    sub.add_parser("list", help="your lexicons and the global ones")
    for sp in sub.choices.values():
        sp.add_argument("--user", default="cli", help="the owner (user id)")
    a = ap.parse_args(argv)
    from streams.client import lexicons

    try:
        settings = load_settings()
        if a.op == "put":
            pls = sys.stdin.read() if a.file == "-" else Path(a.file).read_text(encoding="utf-8")
            print(lexicons.put_lexicon(settings, a.user, a.name, pls))
        elif a.op == "get":
            doc = lexicons.get_lexicon(settings, a.user, a.name)
            if doc is None:
                return _fail("lexicon", f"no lexicon {a.name!r} for {a.user}")
            sys.stdout.write(doc if doc.endswith("\n") else doc + "\n")
        elif a.op == "list":
            for row in lexicons.list_lexicons(settings, a.user):
                print(f"{row['key']}\t{row['version']}\t{row['entries']}\t{row['updated_at'] or ''}")
        elif not lexicons.delete_lexicon(settings, a.user, a.name):
            return _fail("lexicon", f"no lexicon {a.name!r} for {a.user}")
    except (lexicons.LexiconError, OSError, ClientError) as e:
        return _fail("lexicon", e)
    return 0
