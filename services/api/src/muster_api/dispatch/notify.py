"""Wake-ups for run readers and workers: in-process on one instance, LISTEN/NOTIFY across instances.

Keys are run ids (new events, a finish: SSE readers), ``control_key(run_id)`` (a steer or cancel: the worker
executing the run) and ``NEW_RUN`` (a run was queued: idle workers look for it). Controls have a key of their own so
that the worker is not woken by its own events. The writing transaction NOTIFYs (delivered at its commit); after the
commit the writer fires its own instance's waiters, which skip the echo. Waiters always re-read the database: a
wake-up says "look", never what changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskStatus
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.dialect import Dialect, dialect_of
from muster_api.db.notify import PgNotifier
from muster_mesh import LocalNotifier
from muster_mesh.notify import LocalSubscription

CHANNEL = "muster_dispatch"
NEW_RUN = "queued"


def control_key(run_id: str) -> str:
    return f"control:{run_id}"


class RunNotifier:
    def __init__(self, engine: AsyncEngine, dialect: Dialect | None = None) -> None:
        dialect = dialect or dialect_of(engine)
        listener: type[PgNotifier] | None = dialect.pick(sqlite=None, postgresql=PgNotifier)
        self._pg = listener(engine, channel=CHANNEL) if listener is not None else None
        self._local = self._pg.local if self._pg is not None else LocalNotifier()

    @property
    def shared(self) -> bool:
        """Whether other processes' writes wake this one (otherwise waiters also look again now and then)."""
        return self._pg is not None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        if self._pg is None:
            task_status.started()
            return
        await self._pg.run(task_status=task_status)

    @asynccontextmanager
    async def subscribe(self, key: str) -> AsyncIterator[LocalSubscription]:
        async with self._local.subscribe(key) as sub:
            yield sub

    async def in_transaction(self, conn: AsyncConnection, keys: Sequence[str]) -> None:
        if self._pg is not None:
            await self._pg.notify_in_transaction(conn, keys)

    def fire(self, keys: Sequence[str]) -> None:
        self._local.fire(keys)
