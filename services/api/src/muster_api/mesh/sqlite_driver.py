"""The mesh's statements as aiosqlite's driver connection runs them: compiled once by SQLAlchemy for SQLite (so both
paths run the same text), with parameters bound as SQLAlchemy binds them, and a way to run a whole call on the
driver's thread."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from muster_api.db.sqlite_driver import NAMED, DriverStatement, on_driver_thread
from muster_api.mesh.tables import agents

# UTCDateTime's and JSONDocument's bind processing for SQLite (SQLAlchemy's stored text formats): the stored text and
# the compared text must be the same on both paths.
_TIME = agents.c.expires_at.type.dialect_impl(NAMED).bind_processor(NAMED)
_JSON = agents.c.caps.type.dialect_impl(NAMED).bind_processor(NAMED)


def time_text(value: datetime) -> str:
    assert _TIME is not None
    return str(_TIME(value))


def bound(value: Any) -> Any:
    """A parameter of a mesh statement as SQLAlchemy binds it on SQLite (datetimes and JSON lists become text)."""
    if isinstance(value, datetime):
        return time_text(value)
    if isinstance(value, list):
        assert _JSON is not None
        return _JSON(value)
    return value


__all__ = ["NAMED", "DriverStatement", "bound", "on_driver_thread", "time_text"]
