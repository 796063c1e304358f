"""``ttsflow gateway``: serve the OpenAI-compatible speech API with uvicorn.

Process start-up only: settings, logging, the key file (a bad one stops the process with
one line, exit 2), the listening socket (``SO_REUSEPORT`` with ``TTS_GATEWAY_REUSE_PORT``,
so replicas on one host share a port), then uvicorn runs :func:`~streams.gateway.app.build_app`.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys

from streams.settings import SettingsError, load_settings

__all__ = ["main"]


def _socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    s.listen(2048)
    s.set_inheritable(True)
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ttsflow gateway", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--host", default=None, help="address to listen on (default TTS_GATEWAY_HOST)")
    ap.add_argument("--port", type=int, default=None, help="port (default TTS_GATEWAY_PORT)")
    ap.add_argument("--keys", default=None, help="API key file (default TTS_GATEWAY_KEYS_FILE; empty: open)")
    ns = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(gateway_host=ns.host, gateway_port=ns.port, gateway_keys_file=ns.keys)
    except SettingsError as e:
        print(f"ttsflow gateway: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.process.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        import uvicorn

        from streams.gateway.app import build_app
    except ImportError as e:
        print(f"ttsflow gateway: {e.name} is missing; install the gateway extra: pip install 'ttsflow[gateway]'",
              file=sys.stderr)
        return 2
    from streams.gateway.errors import KeyFileError

    gw = settings.gateway
    try:
        app = build_app(settings)
    except KeyFileError as e:
        print(f"ttsflow gateway: {e}", file=sys.stderr)
        return 2
    try:
        sock = _socket(gw.gateway_host, gw.gateway_port, gw.gateway_reuse_port)
    except OSError as e:
        print(f"ttsflow gateway: cannot listen on {gw.gateway_host}:{gw.gateway_port}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    config = uvicorn.Config(app, log_level=settings.process.log_level.lower(), access_log=False, timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
