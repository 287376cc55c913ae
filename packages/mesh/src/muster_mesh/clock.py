"""Time for the mesh: a ``Clock`` is anything that returns the current UTC-aware datetime when called."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def __call__(self) -> datetime: ...


def system_clock() -> datetime:
    return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told: leases expire in tests without sleeping."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)
