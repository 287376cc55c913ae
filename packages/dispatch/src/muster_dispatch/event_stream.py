"""``EventStream``: the events of a turn on their way to whoever iterates the ``Dispatch``.

Not an ``asyncio.Queue``: a put there is five Python calls (a full check, the unfinished-task event, the getter
wake-up), paid for every event of every turn even when nobody iterates (``result()`` alone). Here a put is an append
and a look at the waiting readers. Unbounded, like the queue it replaces; ``None`` ends the stream.
"""

from __future__ import annotations

import asyncio
from collections import deque

from muster_dispatch.events import AgentEvent


class EventStream:
    __slots__ = ("_items", "_waiters")

    def __init__(self) -> None:
        self._items: deque[AgentEvent | None] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    def put(self, item: AgentEvent | None) -> None:
        self._items.append(item)
        if self._waiters:
            self._wake_next()

    async def get(self) -> AgentEvent | None:
        """The next item, waiting for one; readers are served in the order they came."""
        while not self._items:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                waiter.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                if self._items:
                    self._wake_next()  # the item this reader was woken for goes to the next one
                raise
        return self._items.popleft()

    def _wake_next(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


__all__ = ["EventStream"]
