"""What every capability of the service shares: settings, the engine, the clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.settings import Settings


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    now: Callable[[], datetime] = field(default=utc_now)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name
