"""Wake-ups for readers waiting on an inbox, within one process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager

import anyio


class LocalSubscription:
    def __init__(self) -> None:
        self._event = anyio.Event()

    def fire(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        # Re-armed before the caller re-reads the store: a publish after this point fires the new event, and one
        # before it is for a message already committed, which that read sees.
        self._event = anyio.Event()


class LocalNotifier:
    """In-process fan-out of wake-ups: enough for one instance; a shared database needs a cross-process one."""

    def __init__(self) -> None:
        self._subs: dict[str, set[LocalSubscription]] = {}

    @asynccontextmanager
    async def subscribe(self, agent_id: str) -> AsyncIterator[LocalSubscription]:
        sub = LocalSubscription()
        self._subs.setdefault(agent_id, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._subs.get(agent_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[agent_id]

    def fire(self, agent_ids: Iterable[str]) -> None:
        for agent_id in agent_ids:
            for sub in self._subs.get(agent_id, ()):
                sub.fire()

    def fire_all(self) -> None:
        """Wake every waiter (e.g. after a cross-process channel reconnected and may have missed wake-ups)."""
        for subs in self._subs.values():
            for sub in subs:
                sub.fire()

    @property
    def waiting(self) -> int:
        return sum(len(s) for s in self._subs.values())

    async def publish(self, agent_ids: Sequence[str]) -> None:
        self.fire(agent_ids)
