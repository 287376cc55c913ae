"""stdin and stdout as non-blocking pipes on the event loop, for the SDK's stdio framing.

The SDK's own ``stdio_server()`` reads and writes through ``anyio.wrap_file``: every line read and every answer
written is a hop to a worker thread and back, which costs more per tool call than the JSON-RPC work itself. Here the
event loop watches the pipes directly; the SDK still parses and frames every message (its ``stdio_server`` is given
these streams). As the SDK does, the process's own descriptors 0 and 1 point at the null device and at stderr while
serving, so that a child (``herdr``) or a stray print can neither read the host's requests nor write into the wire.

Only pipes and sockets (what an MCP host connects): a terminal or a regular file is served by the SDK's transport,
since making a terminal non-blocking would leave the user's shell with it if the process were killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.stdio import stdio_server

LINE_LIMIT = 64 * 1024 * 1024
"""The longest request line read (a tool call's arguments are far smaller); a longer one is refused, not read."""

UNREADABLE = "<request line too long>\n"
"""Stands for a line beyond the limit: not JSON, so the SDK reports it as a parse error and serves on."""


class LineReader:
    """The lines of the host's requests, as the SDK reads them from an ``anyio.AsyncFile``."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self._reader.readline()
        except ValueError:  # longer than LINE_LIMIT: the reader skipped it
            return UNREADABLE
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class LineWriter:
    """The answers, written without blocking; ``flush`` waits only while the host is not reading."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _divert(fd: int, target: Callable[[], int]) -> tuple[int, Callable[[], None]]:
    """A private duplicate of ``fd`` for the wire, ``fd`` itself pointed at ``target``; and how to undo both."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    blocking = os.get_blocking(private)
    diversion = target()
    try:
        os.dup2(diversion, fd)
    finally:
        os.close(diversion)

    def restore() -> None:
        # The pipe (or terminal) is shared with the host: leave it as blocking as it was found.
        with contextlib.suppress(OSError):
            os.set_blocking(private, blocking)
        with contextlib.suppress(OSError):
            os.dup2(private, fd)

    return private, restore


Pipes = tuple[asyncio.ReadTransport, asyncio.WriteTransport]


async def _connect(loop: asyncio.AbstractEventLoop, stdin: int, stdout: int) -> tuple[LineReader, LineWriter, Pipes]:
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdin, "rb", buffering=0, closefd=False)
    )
    try:
        write_transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(stdout, "wb", buffering=0, closefd=False)
        )
    except BaseException:
        read_transport.close()
        raise
    writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    return LineReader(reader), LineWriter(writer), (read_transport, write_transport)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's (read stream, write stream) over this process's stdin and stdout."""
    if not (_is_pipe(0) and _is_pipe(1)):
        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    stdin, restore_stdin = _divert(0, lambda: os.open(os.devnull, os.O_RDONLY))
    stdout, restore_stdout = _divert(1, lambda: os.dup(2))
    pipes: Pipes | None = None
    try:
        lines_in, lines_out, pipes = await _connect(loop, stdin, stdout)
        async with stdio_server(lines_in, lines_out) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        if pipes is not None:
            pipes[0].close()
            pipes[1].abort()  # every answer was drained already
        restore_stdout()
        restore_stdin()
        for fd in (stdin, stdout):
            with contextlib.suppress(OSError):
                os.close(fd)
