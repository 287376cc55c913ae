"""httpcore's network on asyncio's own streams, for the asynchronous client (its methods take the ``timeout``
arguments of httpcore's interface).

httpcore's default network on asyncio goes through anyio (a cancel scope around every read and write) and sends a
request's head and body in two system calls. Here the reads and writes are asyncio's (a timeout only where a wait
can happen) and what httpcore writes is held until it reads the answer, so a request leaves in one ``send``. The
asynchronous client therefore runs on asyncio's event loop (uvloop's included).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore

HELD_AT_MOST = 64 * 1024
"""Bytes written that are held before the read that sends them; more is sent at once (a large body)."""


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._held: list[bytes] = []
        self._held_size = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        try:
            if self._held:
                await self._send(timeout)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        self._held.append(buffer)
        self._held_size += len(buffer)
        if self._held_size > HELD_AT_MOST:
            try:
                await self._send(timeout)
            except TimeoutError as exc:
                raise httpcore.WriteTimeout(str(exc)) from exc
            except OSError as exc:
                raise httpcore.WriteError(str(exc)) from exc

    async def _send(self, seconds: float | None) -> None:
        data = b"".join(self._held)
        self._held.clear()
        self._held_size = 0
        self._writer.write(data)
        if self._writer.transport.get_write_buffer_size():
            async with asyncio.timeout(seconds):
                await self._writer.drain()

    async def aclose(self) -> None:
        self._held.clear()
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        try:
            if self._held:
                await self._send(timeout)
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError as exc:
            await self.aclose()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            await self.aclose()
            raise httpcore.ConnectError(str(exc)) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # An idle kept-alive connection is readable when the service closed it (or sent what was not asked).
            return self._reader.at_eof() or self._writer.transport.is_closing() or self._reader.exception() is not None
        names = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername", "socket": "socket"}
        return self._writer.get_extra_info(names[info]) if info in names else None


class AsyncioNetwork(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(host, port, local_addr=local)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = writer.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
