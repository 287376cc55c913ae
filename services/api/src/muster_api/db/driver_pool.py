"""Single statements on PostgreSQL straight on asyncpg connections of their own: the paths every message takes (a
send, an inbox read) run here instead of through the engine's pool.

Checking a connection out of SQLAlchemy's pool and handing it back (the async adapter's greenlet hop, the pool's
events, the reset on return) costs more CPU than the statement it runs. Measured on this project's machine, one
``SELECT 1`` each: through the engine's pool to the driver 340 µs of CPU, asyncpg's own pool 115–140 µs, a bare
asyncpg connection 60 µs.

Only autocommit statements run here, one at a time and to their end, so a connection handed back has no state to
reset: no transaction, no session setting, no LISTEN. asyncpg still rolls back a transaction left open and closes a
connection whose statement was cancelled or failed on the wire; the engine's own reset (a round trip per use) is
skipped. Errors are asyncpg's own: the service answers those that mean the database is out of reach with a 503.
"""

from __future__ import annotations

from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncEngine

# The connections a process keeps for these statements, beside the engine's pool (see muster_api.db.engine).
DRIVER_POOL_SIZE = 10


async def _nothing_to_reset(_conn: Any) -> None:
    return None


def asyncpg_dsn(engine: AsyncEngine) -> str:
    """The engine's URL as asyncpg takes it (no SQLAlchemy driver name)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class DriverPool:
    """asyncpg connections opened on first use, at most ``size`` of them; ``aclose`` before the engine is
    disposed."""

    def __init__(self, dsn: str, *, size: int = DRIVER_POOL_SIZE) -> None:
        self._dsn = dsn
        self._size = size
        self._pool: Any = None
        self._opening = anyio.Lock()

    async def fetch(self, sql: str, *args: object) -> list[Any]:
        """The rows of one autocommit statement."""
        pool = self._pool or await self._open()
        async with pool.acquire() as conn:
            return list(await conn.fetch(sql, *args))

    async def _open(self) -> Any:
        async with self._opening:
            if self._pool is None:
                # min_size=0: nothing is opened until a statement needs it (a service that never sends opens none).
                self._pool = await asyncpg.create_pool(
                    self._dsn, min_size=0, max_size=self._size, reset=_nothing_to_reset
                )
        return self._pool

    async def aclose(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
