"""``LinePipe``: a pipe read as lines without a reader task (a CLI's stdout and stderr).

A reader task and a ``StreamReader`` cost a task, its steps, a ``readline`` and its wake-ups per line on every turn.
Here each complete line goes to the consumer from the loop's own read callback; lines that arrive before a consumer is
attached are kept for it. ``closed`` is done at the end of the stream, or holds the consumer's exception (the first
one; delivery stops there) as a failed reader task would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

Consumer = Callable[[bytes], None]


class LinePipe(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._early: list[bytes] | None = []  # lines before a consumer is attached; None once one is
        self._consumer: Consumer | None = None
        self._failed = False
        self.closed: asyncio.Future[None] = loop.create_future()

    def consume(self, consumer: Consumer) -> None:
        """Hand every line, those already read first, to ``consumer`` (bytes without the line end)."""
        early, self._early = self._early or [], None
        self._consumer = consumer
        for line in early:
            self._deliver(line)

    def detach(self) -> None:
        """Deliver nothing more (the run is over); an exception in ``closed`` counts as seen."""
        self._consumer = None
        self._early = None
        if self.closed.done() and not self.closed.cancelled():
            self.closed.exception()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        end = buffer.rfind(b"\n")
        if end < 0:
            if len(buffer) > self._limit:  # as StreamReader.readline: a line longer than the limit is an error
                buffer.clear()
                self._fail(ValueError("Separator is not found, and chunk exceed the limit"))
            return
        lines = bytes(buffer[:end]).split(b"\n")
        del buffer[: end + 1]
        for line in lines:
            self._deliver(line)

    def eof_received(self) -> None:
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._flush()
        if not self.closed.done():
            self.closed.set_result(None)

    def _flush(self) -> None:
        if self._buffer:
            rest = bytes(self._buffer)
            self._buffer.clear()
            self._deliver(rest)

    def _deliver(self, line: bytes) -> None:
        if self._failed:
            return
        if self._early is not None:
            self._early.append(line)
            return
        consumer = self._consumer
        if consumer is None:
            return
        try:
            consumer(line)
        except BaseException as exc:  # the reader's failure is the run's, as with a reader task
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._failed = True
        if not self.closed.done():
            self.closed.set_exception(exc)


__all__ = ["LinePipe"]
