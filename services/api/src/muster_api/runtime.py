"""What every capability of the service shares: settings, the engine, its dialect, the clock and, on PostgreSQL, the
process's one listening connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import Dialect, dialect_of
from muster_api.db.driver_pool import asyncpg_dsn
from muster_api.db.notify import Listening
from muster_api.settings import Settings


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    now: Callable[[], datetime] = field(default=utc_now)
    # Chosen once, from the engine: everything else asks this object, never the database's name.
    dialect: Dialect = field(init=False)
    # Every capability's notifications are heard on it (PostgreSQL; None on SQLite), kept while ``running``.
    listening: Listening | None = field(init=False)

    def __post_init__(self) -> None:
        self.dialect = dialect_of(self.engine)
        on_postgresql: bool = self.dialect.pick(sqlite=False, postgresql=True)
        self.listening = Listening(asyncpg_dsn(self.engine)) if on_postgresql else None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The shared connections kept while in it: enter it before the capabilities, leave it after them."""
        if self.listening is None:
            yield
            return
        async with self.listening.running():
            yield
