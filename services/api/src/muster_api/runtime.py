"""What every capability of the service shares: settings, the engine, its dialect, the clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import Dialect, dialect_of
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

    def __post_init__(self) -> None:
        self.dialect = dialect_of(self.engine)
