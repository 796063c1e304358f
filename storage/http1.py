"""One kept-alive HTTP/1.1 connection for the signed PUTs and HEADs of :mod:`storage.s3`.

``http.client`` costs ~0.35 ms of CPU for a small PUT on this machine, half of it parsing the
answer's headers through the ``email`` package; a request written in one ``sendall`` and its
answer read from a buffer costs ~0.16 (a worker makes 3-6 PUTs a request: parts, the join, a
timed request's words and captions). This connection does only what those requests need:

* one request at a time, sent whole (head and body in one write); :meth:`Http1.answer` reads the
  whole answer: a body by ``Content-Length``, ``chunked`` or up to the close; none for a HEAD,
  a 204 or a 304; interim ``1xx`` answers are skipped.
* Errors are ``http.client``'s, so callers keep one ``except (OSError, HTTPException)``: a peer
  that closed before its answer's first byte raises ``RemoteDisconnected`` (a kept-alive
  connection the server timed out), a malformed answer ``BadStatusLine`` / ``LineTooLong`` /
  ``IncompleteRead``, a timeout ``TimeoutError``.
* An answer's head is at most 64 KiB and its body at most ``max_body`` bytes (S3 answers a PUT
  or HEAD with none, or an error document of a few hundred bytes).
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from http.client import BadStatusLine, IncompleteRead, LineTooLong, RemoteDisconnected

__all__ = ["Answer", "Http1"]

_MAX_HEAD = 64 * 1024
_RECV = 64 * 1024


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: its status, headers (names in lower case; repeats joined by ``, ``), body,
    and whether the server closes the connection after it."""

    status: int
    headers: dict[str, str]
    body: bytes
    closes: bool


class Http1:
    """A connection to ``host:port`` (TLS when ``tls`` is a context), opened at once."""

    def __init__(self, host: str, port: int, *, connect_timeout_s: float, read_timeout_s: float,
                 tls: ssl.SSLContext | None = None, max_body: int = 1 << 20) -> None:
        self._max_body = max_body
        sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=host)
            sock.settimeout(read_timeout_s)
        except BaseException:
            sock.close()
            raise
        self.sock: socket.socket | None = sock
        self._buf = bytearray()

    def send(self, method: str, target: str, headers: dict[str, str], body: bytes | None = None) -> None:
        """Write one request (``Content-Length`` added for a body; ``Host`` must be in ``headers``)."""
        if self.sock is None:
            raise ConnectionResetError("connection closed")
        lines = [f"{method} {target} HTTP/1.1\r\n", *(f"{k}: {v}\r\n" for k, v in headers.items())]
        if body is not None:
            lines.append(f"content-length: {len(body)}\r\n")
        lines.append("\r\n")
        head = "".join(lines).encode("latin-1")
        self.sock.sendall(head + body if body else head)

    def answer(self, *, head: bool = False) -> Answer:
        """The answer to the request sent last (``head``: it was a HEAD, so it has no body)."""
        while True:
            status, closes, headers = self._head()
            if 100 <= status < 200 and status != 101:  # interim (100 Continue, 103 Early Hints)
                continue
            break
        if head or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            try:
                n = int(headers["content-length"])
            except ValueError:
                raise BadStatusLine(f"content-length {headers['content-length']!r}") from None
            if n < 0 or n > self._max_body:
                raise LineTooLong(f"body of {n} bytes")
            body = self._exactly(n)
        else:  # delimited by the close
            body = self._to_close()
            closes = True
        return Answer(status, headers, body, closes)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    # -- reading ---------------------------------------------------------------------
    def _fill(self) -> bool:
        """More bytes into the buffer; False at the peer's close."""
        assert self.sock is not None
        got = self.sock.recv(_RECV)
        if not got:
            return False
        self._buf += got
        return True

    def _head(self) -> tuple[int, bool, dict[str, str]]:
        if self.sock is None:
            raise ConnectionResetError("connection closed")
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > _MAX_HEAD:
                raise LineTooLong("answer head")
            if not self._fill():
                if not self._buf:
                    raise RemoteDisconnected("the server closed the connection without an answer")
                raise IncompleteRead(bytes(self._buf))
        if end > _MAX_HEAD:
            raise LineTooLong("answer head")
        text = self._buf[:end].decode("latin-1")
        del self._buf[:end + 4]
        lines = text.split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise BadStatusLine(lines[0])
        headers: dict[str, str] = {}
        name = ""
        for line in lines[1:]:
            if line[:1] in (" ", "\t") and name:  # an obsolete folded line continues the header before
                headers[name] += " " + line.strip()
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise BadStatusLine(f"header line {line[:80]!r}")
            name = key.strip().lower()
            headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
        conn = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        closes = "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)
        return int(code), closes, headers

    def _exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not self._fill():
                raise IncompleteRead(bytes(self._buf), n - len(self._buf))
        body = bytes(self._buf[:n])
        del self._buf[:n]
        return body

    def _line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > _MAX_HEAD:
                raise LineTooLong("chunk line")
            if not self._fill():
                raise IncompleteRead(bytes(self._buf))
        line = bytes(self._buf[:end])
        del self._buf[:end + 2]
        return line

    def _chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadStatusLine(f"chunk size {size_text[:40]!r}") from None
            if size == 0:
                while self._line():  # trailers, to the empty line
                    pass
                return bytes(out)
            if len(out) + size > self._max_body:
                raise LineTooLong(f"body over {self._max_body} bytes")
            out += self._exactly(size)
            if self._line():
                raise BadStatusLine("chunk not followed by CRLF")

    def _to_close(self) -> bytes:
        while self._fill():
            if len(self._buf) > self._max_body:
                raise LineTooLong(f"body over {self._max_body} bytes")
        body = bytes(self._buf)
        self._buf.clear()
        return body

