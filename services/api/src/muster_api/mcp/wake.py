"""Herdr auto-wake, in the MCP server process: follow the agent's inbox (SSE) and, when messages arrive that the
agent has not fetched, have ``muster_mesh.PaneWaker`` submit the fixed prompt to its pane.

Arrivals are first let settle (a burst of messages is one arrival), then handed to the waker, which counts what is
still unfetched at wake time (nothing → no wake) and allows at most one wake per interval. The pane id stays in
this process: it is an argument of the local ``herdr`` command only, never part of a request to the service. While
the inbox is followed, the agent's lease is renewed by the stream's reads: an agent that can be woken is reachable.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from muster_client import AsyncMusterClient, MusterClientError, Unauthorized
from muster_mesh import PaneWaker

log = logging.getLogger("muster.mcp.wake")

RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)
SETTLE_ROUNDS = 8


class InboxFollower:
    """Wakes ``pane`` for the session ``client`` holds the token of, from the inbox sequence ``after`` on."""

    def __init__(
        self,
        client: AsyncMusterClient,
        pane: str,
        *,
        after: int,
        unread: Callable[[], Awaitable[int]],
        interval: float,
        settle: float,
        herdr: str = "herdr",
    ) -> None:
        self.client = client
        self.after = after
        self.settle = settle
        self.waker = PaneWaker(pane, unread=unread, min_interval=interval, herdr=(herdr,))
        self._arrived = anyio.Event()

    async def run(self) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(self.waker.run)
            group.start_soon(self._coalesce)
            await self._follow()
            group.cancel_scope.cancel()

    async def _follow(self) -> None:
        """Until the session ends (401): a dropped stream is resumed after the last message seen."""
        failures = 0
        while True:
            try:
                async for message in self.client.stream_inbox(after=self.after):
                    self.after = message.seq
                    failures = 0
                    self._arrived.set()
            except Unauthorized as exc:
                log.info("inbox no longer followed: %s", exc.code)
                return
            except MusterClientError as exc:
                log.warning("inbox stream interrupted (%s); following again shortly", type(exc).__name__)
            await anyio.sleep(RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)])
            failures += 1

    async def _coalesce(self) -> None:
        """One notification per burst: after an arrival, wait until none came for ``settle`` seconds (bounded)."""
        while True:
            await self._arrived.wait()
            for _ in range(SETTLE_ROUNDS):
                self._arrived = anyio.Event()
                with anyio.move_on_after(self.settle):
                    await self._arrived.wait()
                if not self._arrived.is_set():
                    break
            self._arrived = anyio.Event()
            self.waker.notify()
