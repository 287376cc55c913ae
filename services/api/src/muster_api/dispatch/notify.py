"""Wake-ups for run readers and workers: in-process on one instance, LISTEN/NOTIFY across instances.

Keys are run ids (new events, a finish: SSE readers), ``control_key(run_id)`` (a steer or cancel: the worker
executing the run) and ``NEW_RUN`` (a run was queued: idle workers look for it). Controls have a key of their own so
that the worker is not woken by its own events. The writing transaction NOTIFYs (delivered at its commit); after the
commit the writer fires its own instance's waiters, which skip the echo. Waiters always re-read the database: a
wake-up says "look", never what changed.

SQLite has no NOTIFY: a process sharing the file learns of another's commits from the file's ``data_version``
(``FileWatch``), which wakes its run readers and idle workers; controls are not woken by it (a worker's own journal
writes change the file too), their waiters look again now and then.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskStatus
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.dialect import Dialect, dialect_of
from muster_api.db.engine import UNLOCKED_READS
from muster_api.db.notify import PgNotifier
from muster_api.db.url import sqlite_path
from muster_mesh import LocalNotifier
from muster_mesh.notify import LocalSubscription

log = logging.getLogger("muster.dispatch.notify")

CHANNEL = "muster_dispatch"
NEW_RUN = "queued"


CONTROL_PREFIX = "control:"


def shielded() -> anyio.CancelScope:
    """Around one database call: a shutdown waits for it rather than tearing the connection down in the middle of
    it (aiosqlite then leaves a close pending that the loop cannot finish)."""
    return anyio.CancelScope(shield=True)


def control_key(run_id: str) -> str:
    return f"{CONTROL_PREFIX}{run_id}"


class FileWatch:
    """Wakes a process's waiters when another connection committed to the SQLite file: ``PRAGMA data_version`` on one
    connection of its own changes with every commit made by any other connection. Looked at every ``FASTEST``
    seconds while the file changes, backing off to ``SLOWEST`` while it does not (a few cheap reads a second).
    The version also moves with every commit of this process's own other connections (the mesh's, for one), and
    each move wakes the idle workers to look for runs: looked at every 10 ms, a busy mesh on SQLite lost about 30%
    of its check-in throughput to it; every 100 ms, a few percent."""

    FASTEST = 0.1
    SLOWEST = 0.25

    def __init__(self, engine: AsyncEngine, wake: Callable[[], None]) -> None:
        self._engine = engine.execution_options(**{UNLOCKED_READS: True})
        self._wake = wake

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Started once the first version is read: a commit after that wakes the waiters."""
        started = False
        while True:
            try:
                conn = self._engine.connect()
                with shielded():
                    await conn.start()
                try:
                    last = await self._version(conn)
                    if not started:
                        started = True
                        task_status.started()
                    await self._watch(conn, last)
                finally:
                    with shielded():
                        await conn.close()
            except Exception:  # a lost connection: open another one; waiters keep their own timed looks meanwhile
                if not started:
                    raise
                log.exception("SQLite change watch failed; retrying")
            await anyio.sleep(1.0)
            self._wake()

    @staticmethod
    async def _version(conn: AsyncConnection) -> object:
        with shielded():
            result = await conn.exec_driver_sql("PRAGMA data_version")
        return result.scalar()

    async def _watch(self, conn: AsyncConnection, last: object) -> None:
        pause = self.FASTEST
        while True:
            await anyio.sleep(pause)
            version = await self._version(conn)
            if version != last:
                last, pause = version, self.FASTEST
                self._wake()
            else:
                pause = min(self.SLOWEST, pause * 2)


class RunNotifier:
    def __init__(self, engine: AsyncEngine, dialect: Dialect | None = None) -> None:
        dialect = dialect or dialect_of(engine)
        listener: type[PgNotifier] | None = dialect.pick(sqlite=None, postgresql=PgNotifier)
        self._pg = listener(engine, channel=CHANNEL) if listener is not None else None
        self._local = self._pg.local if self._pg is not None else LocalNotifier()
        # An in-memory SQLite database has no other process to hear from.
        on_file = self._pg is None and sqlite_path(engine.url.render_as_string()) is not None
        self._watch = FileWatch(engine, self._wake_readers) if on_file else None
        self._keys: Counter[str] = Counter()

    @property
    def shared(self) -> bool:
        """Whether other processes' writes wake this one (otherwise waiters also look again now and then)."""
        return self._pg is not None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        if self._pg is not None:
            await self._pg.run(task_status=task_status)
        elif self._watch is not None:
            await self._watch.run(task_status=task_status)
        else:
            task_status.started()

    @asynccontextmanager
    async def subscribe(self, key: str) -> AsyncIterator[LocalSubscription]:
        self._keys[key] += 1
        try:
            async with self._local.subscribe(key) as sub:
                yield sub
        finally:
            self._keys[key] -= 1
            if not self._keys[key]:
                del self._keys[key]

    def _wake_readers(self) -> None:
        self._local.fire([key for key in self._keys if not key.startswith(CONTROL_PREFIX)])

    async def in_transaction(self, conn: AsyncConnection, keys: Sequence[str]) -> None:
        if self._pg is not None:
            await self._pg.notify_in_transaction(conn, keys)

    def payload(self, keys: Sequence[str]) -> tuple[str | None, str | None]:
        """(channel, payload) of the one NOTIFY for these keys, for a statement that notifies itself; (None, None)
        without LISTEN/NOTIFY or when the keys need several notifications."""
        return self._pg.payload(keys) if self._pg is not None else (None, None)

    def fire(self, keys: Sequence[str]) -> None:
        self._local.fire(keys)
