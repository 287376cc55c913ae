"""A run's journal as rows: ``muster_dispatch.JournalSink`` on the database.

``record`` runs once per decoded event inside the dispatch, so it only appends in memory and rings the flusher; the
flusher writes whatever accumulated in one INSERT (and one NOTIFY), so a burst of events costs one round trip while
a lone event leaves at once. ``flush`` returns once everything recorded is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from muster_api.dispatch.store import Clock, SqlRunStore
from muster_dispatch import Observation

BURST_TURNS = 3


class SqlJournal:
    def __init__(self, store: SqlRunStore, run_id: str, clock: Clock, stored: list[Observation] | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.clock = clock
        self._observations: list[Observation] = list(stored or [])
        self._seq = self._observations[-1].seq if self._observations else 0
        self._pending: list[Observation] = []
        self._lock = anyio.Lock()
        self._ring = anyio.Event()
        # Told of each event as it is recorded (the run's presence on the mesh); must not block or raise.
        self.observers: list[Callable[[dict[str, Any]], None]] = []

    @classmethod
    async def open(cls, store: SqlRunStore, run_id: str, clock: Clock) -> SqlJournal:
        stored: list[Observation] = []
        while True:
            batch = await store.events_after(run_id, stored[-1].seq if stored else 0)
            if not batch:
                return cls(store, run_id, clock, stored)
            stored.extend(batch)

    def record(self, source: str, scope: dict[str, Any], event: dict[str, Any]) -> Observation:
        self._seq += 1
        observation = Observation(self._seq, self.clock().isoformat(), source, scope, event)
        self._observations.append(observation)
        self._pending.append(observation)
        self._ring.set()
        for observer in self.observers:
            observer(event)
        return observation

    @property
    def seq(self) -> int:
        """The sequence number of the last observation recorded."""
        return self._seq

    def observations(self) -> list[Observation]:
        return list(self._observations)

    async def flush(self) -> None:
        async with self._lock:  # batches leave in sequence order
            batch, self._pending = self._pending, []
            if batch:
                # Taken out of the pending list: a cancellation (the run ends) must not drop it half-written.
                with anyio.CancelScope(shield=True):
                    await self.store.append_events(self.run_id, batch)

    async def take_pending(self) -> list[Observation]:
        """What is recorded and not stored yet, handed to the caller to store (the run's last write): no flush
        runs meanwhile, and none will store these."""
        async with self._lock:
            batch, self._pending = self._pending, []
            return batch

    async def keep_flushing(self) -> None:
        """Write each burst of events as it comes, until cancelled (the caller stores what is left with the run's
        outcome). A burst rings at its first event: a few turns of the event loop (no wall-clock wait) let the rest
        of it, and often a short run's whole end, join the one write; a lone event still leaves at once."""
        while True:
            await self._ring.wait()
            for _ in range(BURST_TURNS):
                await anyio.lowlevel.checkpoint()
            self._ring = anyio.Event()
            await self.flush()
