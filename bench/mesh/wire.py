"""A lean HTTP/1.1 client for the load generator: one keep-alive connection, one request at a time.

httpx spent about 6 ms of CPU per delivered message in the load generator (a send, a long-poll's answer and the
re-poll), five times what the servers spent on it: on two cores, the figure measured the generator. This client
writes a request with one ``write`` and reads the answer in an ``asyncio.Protocol`` (no stream reader, no header
objects): a Muster answer always says its ``content-length`` (no chunked encoding on the mesh's routes), so the
answer is complete when that many bytes follow the head.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit


class Closed(ConnectionError):
    """The server closed the connection (a keep-alive timeout, or it stopped) before answering."""


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is not None and not self.waiter.done():
            answer = self._answer()
            if answer is not None:
                self.waiter.set_result(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(Closed("connection closed before the answer"))

    def _answer(self) -> tuple[int, bytes] | None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self.buffer[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            raise ValueError("an answer without content-length")
        eol = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : eol if eol > 0 else len(head)])
        start = end + 4
        if len(self.buffer) < start + length:
            return None
        body = bytes(self.buffer[start : start + length])
        del self.buffer[: start + length]
        return int(head[9:12]), body


class Connection:
    """``await request(method, path, headers, json=...)`` → (status, body); connects on first use and again after
    the server closed the connection (the failed request is raised as ``Closed``, not repeated)."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.protocol: _Protocol | None = None

    async def _connected(self) -> _Protocol:
        if self.protocol is None or self.protocol.closed:
            loop = asyncio.get_running_loop()
            _, self.protocol = await loop.create_connection(_Protocol, self.host, self.port)
        return self.protocol

    async def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, json_body: Any = None
    ) -> tuple[int, bytes]:
        protocol = await self._connected()
        body = b"" if json_body is None else json.dumps(json_body).encode()
        lines = [f"{method} {path} HTTP/1.1", f"host: {self.host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if json_body is not None:
            lines += ["content-type: application/json", f"content-length: {len(body)}"]
        protocol.waiter = asyncio.get_running_loop().create_future()
        protocol.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        try:
            return await protocol.waiter
        finally:
            protocol.waiter = None

    def close(self) -> None:
        if self.protocol is not None and self.protocol.transport is not None:
            self.protocol.transport.close()
