"""A small HTTP receiver on loopback for Apprise's ``json://`` URLs: it records what it is sent, and can be told to
fail the first requests, to hold each request until the test releases it, or never to answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio

SECRET = "pw-5ecr3t-n0tify-91c7"


@dataclass
class Receiver:
    port: int = 0
    fail_first: int = 0
    hold: bool = False
    never_answer: bool = False
    received: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    authorizations: list[str] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    closing: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        """Apprise's JSON webhook form, with a password in it: the secret no log or answer may show."""
        return f"json://muster:{SECRET}@127.0.0.1:{self.port}/hook"

    def titles(self) -> list[str]:
        with self.lock:
            return [str(item.get("title", "")) for item in self.received]

    async def wait_for(self, count: int, within: float = 60.0) -> list[dict[str, Any]]:
        """At least ``count`` notifications received (a bound for a failure; never waited out when all is well)."""
        deadline = time.monotonic() + within
        while True:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            if time.monotonic() > deadline:
                raise AssertionError(f"{count} notification(s) expected, {len(self.received)} received")
            await anyio.sleep(0.02)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length) or b"{}")
            with receiver.lock:
                receiver.requests += 1
                number = receiver.requests
                receiver.authorizations.append(self.headers.get("Authorization", ""))
            if receiver.never_answer:
                receiver.holding.set()
                receiver.closing.wait()
                return
            if number <= receiver.fail_first:
                self.send_response(500)
                self.end_headers()
                return
            if receiver.hold and not receiver.release.is_set():
                receiver.holding.set()
                receiver.release.wait()
            with receiver.lock:
                receiver.received.append(payload)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextmanager
def receiving(**options: Any) -> Iterator[Receiver]:
    receiver = Receiver(**options)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.closing.set()
        receiver.release.set()
        server.shutdown()
        server.server_close()
