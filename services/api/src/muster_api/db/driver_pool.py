"""Single statements on PostgreSQL on asyncpg's own pool: the paths every message takes (a send, an inbox read) run
here instead of through the engine's pool.

Checking a connection out of SQLAlchemy's pool and handing it back (the async adapter's greenlet hop, the pool's
events, the reset on return) costs more CPU than the statement it runs. asyncpg's pool costs less, and a list of idle
connections of our own less still (CPU per ``SELECT 1``: 340 µs, 94 µs, 41 µs), but measured under the mesh's
sustained load the list's gain did not decide any goal (docs/design.md has the figures), so the maintained pool it is.

Only autocommit statements run here, so a connection handed back has no session state to reset: asyncpg's pool would
still send its reset query (``RESET ALL``, ``UNLISTEN *`` …) after every statement, a second round trip per call, so
the reset here is asyncpg's own cleanup only (a transaction left open is rolled back). Errors are asyncpg's own: the
service answers those that mean the database is out of reach with a 503.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncEngine

# The connections a process keeps for these statements, beside the engine's pool (see muster_api.db.engine).
DRIVER_POOL_SIZE = 10
# A connection idle for longer is closed instead of reused (asyncpg's default): a firewall or a NAT between the
# service and the database may have dropped it silently, and a statement sent on it would wait for TCP to give up.
MAX_IDLE_SECONDS = 300.0


async def _kept(connection: Any) -> None:
    """The pool's reset on release: nothing beyond asyncpg's own cleanup, which runs before it. A statement here
    changes no session setting (a ``set_config`` here is local to its transaction), listens to nothing and holds no
    advisory lock or cursor past its end."""


def asyncpg_dsn(engine: AsyncEngine) -> str:
    """The engine's URL as asyncpg takes it (no SQLAlchemy driver name)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class DriverPool:
    """asyncpg's pool of at most ``size`` connections, made on first use (a service that never sends opens none).
    ``aclose`` before the engine is disposed."""

    def __init__(self, dsn: str, *, size: int = DRIVER_POOL_SIZE) -> None:
        self._dsn, self._size = dsn, size
        self._pool: Any = None
        self._creating = asyncio.Lock()

    async def _ready(self) -> Any:
        async with self._creating:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=0,
                    max_size=self._size,
                    max_inactive_connection_lifetime=MAX_IDLE_SECONDS,
                    reset=_kept,
                )
        return self._pool

    async def fetch(self, sql: str, *args: object) -> list[Any]:
        """The rows of one autocommit statement."""
        pool = self._pool or await self._ready()
        return list(await pool.fetch(sql, *args))

    async def aclose(self) -> None:
        async with self._creating:
            if self._pool is not None:
                await self._pool.close()
