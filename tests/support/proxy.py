"""A TCP proxy on loopback that a test can cut and restore: the database "goes away" for the service under test
while the real server keeps running (connections through the proxy die, new ones are refused)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio
from anyio.abc import SocketStream, TaskGroup

from tests.support.net import free_port


class CuttableProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = free_port()
        self._group: TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None

    async def _pipe(self, source: SocketStream, sink: SocketStream) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in source:
                await sink.send(chunk)
        with suppress(Exception):
            await sink.send_eof()

    async def _handle(self, client: SocketStream) -> None:
        async with client:
            try:
                upstream = await anyio.connect_tcp(*self.upstream)
            except OSError:
                return
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(self._pipe, client, upstream)
                tg.start_soon(self._pipe, upstream, client)

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
            task_status.started()
            async with listener:
                await listener.serve(self._handle)

    async def restore(self) -> None:
        assert self._group is not None and self._scope is None
        await self._group.start(self._serve)

    def cut(self) -> None:
        """Stop listening and drop every connection through the proxy at once."""
        assert self._scope is not None
        self._scope.cancel()
        self._scope = None


@asynccontextmanager
async def cuttable_proxy(host: str, port: int) -> AsyncIterator[CuttableProxy]:
    proxy = CuttableProxy(host, port)
    async with anyio.create_task_group() as tg:
        proxy._group = tg
        await proxy.restore()
        try:
            yield proxy
        finally:
            tg.cancel_scope.cancel()
