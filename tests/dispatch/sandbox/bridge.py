"""The host side of a loopback bridge for the container tests: a unix socket whose every connection is carried to a
TCP port of the host's loopback (the fake model), so a container without a network reaches the fake and nothing
else of the host."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


@contextlib.asynccontextmanager
async def unix_to_tcp(socket_path: Path, port: int) -> AsyncIterator[Path]:
    """Listen on ``socket_path``; carry each connection to ``127.0.0.1:port``."""
    tasks: set[asyncio.Task[None]] = set()

    async def carry(inner_reader: asyncio.StreamReader, inner_writer: asyncio.StreamWriter) -> None:
        try:
            outer_reader, outer_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            inner_writer.close()
            return
        await asyncio.gather(_pump(inner_reader, outer_writer), _pump(outer_reader, inner_writer))
        outer_writer.close()
        inner_writer.close()

    def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(carry(reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    server = await asyncio.start_unix_server(serve, path=str(socket_path))
    try:
        yield socket_path
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        socket_path.unlink(missing_ok=True)
