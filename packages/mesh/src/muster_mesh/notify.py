"""Wake-ups for readers waiting on an inbox, within one process.

A wake-up may carry the inbox entry just committed: a waiter whose cursor sits right before it answers from it, with
no read of the store (the sender holds the very row it committed; sequences commit in order per inbox).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager

import anyio

from muster_mesh.records import InboxEntry


class LocalSubscription:
    def __init__(self) -> None:
        self._event = anyio.Event()
        self._entries: list[InboxEntry] = []

    def fire(self, entry: InboxEntry | None = None) -> None:
        if entry is not None:
            self._entries.append(entry)
        self._event.set()

    def take(self) -> list[InboxEntry]:
        """The entries handed over since the last ``take`` (committed, in publish order)."""
        entries, self._entries = self._entries, []
        return entries

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

    def fire(self, agent_ids: Iterable[str], entries: Mapping[str, InboxEntry] | None = None) -> None:
        for agent_id in agent_ids:
            entry = entries.get(agent_id) if entries else None
            for sub in self._subs.get(agent_id, ()):
                sub.fire(entry)

    def fire_all(self) -> None:
        """Wake every waiter (e.g. after a cross-process channel reconnected and may have missed wake-ups)."""
        for subs in self._subs.values():
            for sub in subs:
                sub.fire()

    @property
    def waiting(self) -> int:
        return sum(len(s) for s in self._subs.values())

    async def publish(self, agent_ids: Sequence[str], entries: Mapping[str, InboxEntry] | None = None) -> None:
        self.fire(agent_ids, entries)
