"""Single statements on PostgreSQL straight on asyncpg connections of their own: the paths every message takes (a
send, an inbox read), a claims check, a task claim and a run's statements run here instead of through the engine's
pool.

Checking a connection out of SQLAlchemy's pool and handing it back (the async adapter's greenlet hop, the pool's
events, the reset on return) costs more CPU than the statement it runs; so does asyncpg's own pool (its holders, its
idle timers, and a release shielded in a task of its own). Measured on this project's machine, CPU per ``SELECT 1``:
through the engine's pool to the driver 340 µs, asyncpg's pool 94 µs (without its reset query), a bare asyncpg
connection 41 µs. The pool here is a list of idle connections: taking one and giving it back costs next to nothing
beside the statement. asyncpg's pool stood here while no goal needed the difference; a claims check's does (its
figures in docs/design.md).

Only autocommit statements run here, one at a time per connection, so a connection handed back has no state to
reset: no transaction, no session setting, no LISTEN. A statement the server refused leaves its connection as it
was (unless the refusal ends the session); a connection whose statement was cancelled or broke on the wire is
closed, not reused (its state is unknown), as is one found closed (the server ended it) or, by a mistake in a
statement, left inside a transaction. Errors are asyncpg's own: the service answers those that mean the database
is out of reach with a 503.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncEngine

# The connections a process keeps for these statements, beside the engine's pool (see muster_api.db.engine).
DRIVER_POOL_SIZE = 10
# A connection idle for longer is closed instead of reused, as asyncpg's own pool does by default: a firewall or a NAT
# between the service and the database may have dropped it silently, and a statement sent on such a connection waits
# for TCP to give up. The connection used last is handed out first, so under any load none gets that old.
MAX_IDLE_SECONDS = 300.0


def asyncpg_dsn(engine: AsyncEngine) -> str:
    """The engine's URL as asyncpg takes it (no SQLAlchemy driver name)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class DriverPool:
    """At most ``size`` asyncpg connections, opened on first use (a service that never sends opens none) and kept
    open while they are used (see ``MAX_IDLE_SECONDS``); a statement that finds all of them busy waits for one.
    ``aclose`` before the engine is disposed."""

    def __init__(self, dsn: str, *, size: int = DRIVER_POOL_SIZE, max_idle: float = MAX_IDLE_SECONDS) -> None:
        self._dsn = dsn
        self._size = size
        self._max_idle = max_idle
        # (connection, when it was handed back): the last one is the one used last.
        self._idle: list[tuple[Any, float]] = []
        # Connections open, being opened, or promised to a waiter that will open one: never above ``size``.
        self._slots = 0
        # Statements waiting for a connection; each is handed one, or None to open one in the slot it is given.
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._closed = False

    @property
    def open(self) -> int:
        """Connections open or being opened."""
        return self._slots

    async def fetch(self, sql: str, *args: object) -> list[Any]:
        """The rows of one autocommit statement."""
        conn = await self._take()
        try:
            rows = await conn.fetch(sql, *args)
        except asyncpg.PostgresError as exc:
            # ERROR: the server refused the statement and the session goes on. FATAL or PANIC: it ends the session
            # (a terminated backend, a shutdown), though the driver may not have seen the socket close yet.
            if (getattr(exc, "severity_en", None) or getattr(exc, "severity", None)) == "ERROR":
                self._give_back(conn)
            else:
                self._discard(conn)
            raise
        except BaseException:
            self._discard(conn)
            raise
        self._give_back(conn)
        return list(rows)

    async def _take(self) -> Any:
        while self._idle:
            conn, since = self._idle.pop()
            if not conn.is_closed() and time.monotonic() - since <= self._max_idle:
                return conn
            self._discard(conn)
        if self._closed:
            raise asyncpg.InterfaceError("the driver pool is closed")
        if self._slots < self._size:
            self._slots += 1
            return await self._connect()
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            conn = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed a connection (or a slot) as this statement was cancelled: it goes to the next one.
                handed = waiter.result()
                if handed is None:
                    self._free_slot()
                else:
                    self._give_back(handed)
            raise
        return conn if conn is not None else await self._connect()

    async def _connect(self) -> Any:
        """A new connection in a slot already counted; the slot is freed if it cannot be opened."""
        try:
            return await asyncpg.connect(self._dsn)
        except BaseException:
            self._free_slot()
            raise

    def _give_back(self, conn: Any) -> None:
        if self._closed or conn.is_closed() or conn.is_in_transaction():
            self._discard(conn)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append((conn, time.monotonic()))

    def _discard(self, conn: Any) -> None:
        conn.terminate()
        self._free_slot()

    def _free_slot(self) -> None:
        """A connection is gone: its slot goes to a waiting statement, which opens a connection in it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._slots -= 1

    async def aclose(self) -> None:
        """Close the idle connections; one in use is closed when its statement ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            self._slots -= 1
            try:
                await conn.close(timeout=5)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                conn.terminate()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(asyncpg.InterfaceError("the driver pool is closed"))
