"""A CLI's stderr read as lines without a reader task: lines split across reads anywhere come out whole."""

from __future__ import annotations

import asyncio
import os

import pytest

from muster_dispatch.line_pipe import LinePipe

pytestmark = pytest.mark.anyio


async def test_over_a_real_pipe_every_line_arrives_then_the_stream_closes() -> None:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    pipe = LinePipe(loop, 1 << 20)
    await loop.connect_read_pipe(lambda: pipe, os.fdopen(read_fd, "rb", buffering=0))
    lines: list[bytes] = []
    pipe.consume(lines.append)
    os.write(write_fd, b"".join(b"line %d\n" % n for n in range(1000)) + b"no end")
    os.close(write_fd)
    await pipe.closed
    assert lines == [b"line %d" % n for n in range(1000)] + [b"no end"]


async def test_reads_that_split_lines_anywhere_and_lines_before_the_consumer() -> None:
    pipe = LinePipe(asyncio.get_running_loop(), 1 << 20)
    lines: list[bytes] = []
    pipe.data_received(b"before the consumer\nhal")  # read before anyone consumes: kept for the consumer
    pipe.consume(lines.append)
    for chunk in (b"f a line\r\n\nsecond", b" part\n", b"no end"):
        pipe.data_received(chunk)
    pipe.eof_received()
    pipe.connection_lost(None)
    await pipe.closed
    assert lines == [b"before the consumer", b"half a line\r", b"", b"second part", b"no end"]


async def test_a_failing_consumer_fails_the_stream_and_gets_nothing_more() -> None:
    pipe = LinePipe(asyncio.get_running_loop(), 1 << 20)
    seen: list[bytes] = []

    def consumer(line: bytes) -> None:
        seen.append(line)
        raise RuntimeError("journal down")

    pipe.consume(consumer)
    pipe.data_received(b"one\ntwo\n")
    pipe.data_received(b"three\n")
    pipe.connection_lost(None)
    with pytest.raises(RuntimeError, match="journal down"):
        await pipe.closed
    assert seen == [b"one"]


async def test_a_line_longer_than_the_limit_is_an_error_as_with_a_stream_reader() -> None:
    pipe = LinePipe(asyncio.get_running_loop(), 16)
    pipe.consume(lambda _line: None)
    pipe.data_received(b"x" * 64)
    with pytest.raises(ValueError, match="limit"):
        await pipe.closed


async def test_a_detached_pipe_delivers_nothing() -> None:
    pipe = LinePipe(asyncio.get_running_loop(), 1 << 20)
    lines: list[bytes] = []
    pipe.consume(lines.append)
    pipe.detach()
    pipe.data_received(b"late\n")
    pipe.connection_lost(None)
    await pipe.closed
    assert lines == []
