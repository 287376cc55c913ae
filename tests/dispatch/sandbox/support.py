"""What the egress tests share: a server on the host's loopback that is not the model, and a fetch run inside."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

OTHER_BODY = b"the-other-server"


class _Other(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(OTHER_BODY)))
        self.end_headers()
        self.wfile.write(OTHER_BODY)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_port() -> Iterator[int]:
    """A server on the host's loopback that is not the model's."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Other)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def fetch(url: str, *, proxy: bool) -> str:
    """A shell command that fetches ``url`` with the sandbox's own Python (through the proxy variables, or around
    them) and exits 0 only on an HTTP answer carrying the body it expects (any status for the model)."""
    opener = (
        "urllib.request.build_opener()" if proxy else "urllib.request.build_opener(urllib.request.ProxyHandler({}))"
    )
    code = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n"
        f"    body = {opener}.open({url!r}, timeout=10).read()\n"
        "except urllib.error.HTTPError as e:\n"
        "    body = b'status %d' % e.code\n"
        "sys.exit(0 if len(sys.argv) < 2 or sys.argv[1].encode() in body else 1)"
    )
    return f"python3 -c {shlex.quote(code)}"
