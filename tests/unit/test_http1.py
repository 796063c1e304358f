"""storage.http1: what a kept-alive connection reads from a server's bytes (a local socket that
answers each request with canned bytes: the parser's cases without an S3 server)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import BadStatusLine, IncompleteRead, LineTooLong, RemoteDisconnected

import pytest

from storage.http1 import Http1


@contextmanager
def _server(answers: list[bytes], seen: list[bytes] | None = None, *, close_after: bool = False) -> Iterator[int]:
    """A server on a free port: for each request it reads (up to the end of its head and
    ``content-length`` bytes of body) it writes the next of ``answers`` (then closes if
    ``close_after`` and the answers are used up)."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]

    def serve() -> None:
        conn, _ = lsock.accept()
        buf = b""
        with conn:
            for answer in answers:
                while b"\r\n\r\n" not in buf:
                    got = conn.recv(65536)
                    if not got:
                        return
                    buf += got
                head, _, buf = buf.partition(b"\r\n\r\n")
                n = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")), 0)
                while len(buf) < n:
                    buf += conn.recv(65536)
                if seen is not None:
                    seen.append(head + b"\r\n\r\n" + buf[:n])
                buf = buf[n:]
                conn.sendall(answer)
            if close_after:
                conn.shutdown(socket.SHUT_RDWR)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield port
    finally:
        lsock.close()
        t.join(5)


def _conn(port: int) -> Http1:
    return Http1("127.0.0.1", port, connect_timeout_s=2, read_timeout_s=2)


def test_a_request_goes_whole_and_answers_are_read_by_length_chunks_or_none() -> None:
    seen: list[bytes] = []
    answers = [b"HTTP/1.1 200 OK\r\nETag: \"x\"\r\nContent-Length: 0\r\n\r\n",
               b"HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nContent-Length: 11\r\n\r\n<Error/>\r\n\n",
               b"HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n<Err\r\n3\r\nor>\r\n0\r\nX-T: 1\r\n\r\n",
               b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Amz-Meta-Sha256: ab\r\n"
               b"X-Dup: a\r\nX-Dup: b\r\n\r\nok",
               b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nContent-Type: audio/wav\r\n\r\n"]  # a HEAD: no body
    with _server(answers, seen) as port:
        c = _conn(port)
        c.send("PUT", "/b/k", {"host": "h", "x-amz-date": "d"}, b"body")
        a = c.answer()
        assert (a.status, a.headers, a.body, a.closes) == (200, {"etag": '"x"', "content-length": "0"}, b"", False)
        c.send("PUT", "/b/k2", {"host": "h"}, b"")
        a = c.answer()
        assert (a.status, a.body) == (404, b"<Error/>\r\n\n")
        c.send("PUT", "/b/k3", {"host": "h"}, b"x" * 70_000)
        a = c.answer()
        assert (a.status, a.body, a.closes) == (403, b"<Error>", False)
        c.send("PUT", "/b/k4", {"host": "h"}, b"y")
        a = c.answer()  # the interim 100 skipped; repeated headers joined
        assert (a.status, a.body, a.headers["x-amz-meta-sha256"], a.headers["x-dup"]) == (200, b"ok", "ab", "a, b")
        c.send("HEAD", "/b/k5", {"host": "h"})
        a = c.answer(head=True)
        assert (a.status, a.body, a.headers["content-length"]) == (200, b"", "1234")
        c.close()
    assert seen[0] == b"PUT /b/k HTTP/1.1\r\nhost: h\r\nx-amz-date: d\r\ncontent-length: 4\r\n\r\nbody"
    assert seen[2].endswith(b"x" * 70_000) and b"content-length: 70000\r\n" in seen[2]
    assert seen[4] == b"HEAD /b/k5 HTTP/1.1\r\nhost: h\r\n\r\n"  # no body, no length


def test_connection_close_and_a_body_to_the_close() -> None:
    with _server([b"HTTP/1.1 500 Internal\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbad"]) as port:
        c = _conn(port)
        c.send("PUT", "/b/k", {"host": "h"}, b"x")
        a = c.answer()
        assert (a.status, a.body, a.closes) == (500, b"bad", True)
        c.close()
    with _server([b"HTTP/1.0 200 OK\r\n\r\nall of it"], close_after=True) as port:
        c = _conn(port)
        c.send("PUT", "/b/k", {"host": "h"}, b"x")
        a = c.answer()
        assert (a.status, a.body, a.closes) == (200, b"all of it", True)
        c.close()


def test_a_kept_alive_connection_the_server_closed_raises_remote_disconnected() -> None:
    with _server([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"], close_after=True) as port:
        c = _conn(port)
        c.send("PUT", "/b/k", {"host": "h"}, b"x")
        assert c.answer().status == 200
        with pytest.raises((RemoteDisconnected, BrokenPipeError, ConnectionResetError)):
            c.send("PUT", "/b/k", {"host": "h"}, b"x")
            c.answer()
        c.close()


@pytest.mark.parametrize("answer, error", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", IncompleteRead),
    (b"HTTP/1.1 200 OK\r\nContent-Le", IncompleteRead),
    (b"SSH-2.0-OpenSSH_9\r\n\r\n", BadStatusLine),
    (b"HTTP/1.1 2x0 OK\r\n\r\n", BadStatusLine),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", BadStatusLine),
    (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", BadStatusLine),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", LineTooLong),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", BadStatusLine),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", BadStatusLine),
    (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", LineTooLong),
])
def test_a_malformed_or_cut_answer_raises_an_http_client_error(answer: bytes, error: type[Exception]) -> None:
    with _server([answer], close_after=True) as port:
        c = _conn(port)
        c.send("PUT", "/b/k", {"host": "h"}, b"x")
        with pytest.raises(error):
            c.answer()
        c.close()


def test_a_silent_server_times_out() -> None:
    lsock = socket.create_server(("127.0.0.1", 0))
    try:
        c = Http1("127.0.0.1", lsock.getsockname()[1], connect_timeout_s=2, read_timeout_s=0.2)
        c.send("PUT", "/b/k", {"host": "h"}, b"x")
        with pytest.raises(TimeoutError):
            c.answer()
        c.close()
        with pytest.raises(ConnectionResetError):  # closed: no more requests on it
            c.send("PUT", "/b/k", {"host": "h"}, b"x")
    finally:
        lsock.close()
