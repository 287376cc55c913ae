"""The mesh's statements as aiosqlite's driver connection runs them: compiled once by SQLAlchemy for SQLite (so both
paths run the same text), with parameters bound as SQLAlchemy binds them, and a way to run a whole call on the
driver's thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Select
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.sql.dml import UpdateBase

from muster_api.mesh.tables import agents

T = TypeVar("T")

NAMED = sqlite_dialect.dialect(paramstyle="named")
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


class DriverStatement:
    """A statement compiled once for the driver, with the names of the columns it returns and the parameters
    SQLAlchemy adds itself (the OFFSET beside a bound LIMIT)."""

    def __init__(self, stmt: UpdateBase | Select[Any], columns: Sequence[str] | None = None) -> None:
        # ``columns``: an INSERT's columns given (the others keep their defaults), as SQLAlchemy compiles it for the
        # keys of its parameters.
        compiled = stmt.compile(dialect=NAMED, column_keys=columns)
        self.sql = str(compiled)
        self.names = tuple(c.name for c in stmt.exported_columns)
        self._added = {name: value for name, value in compiled.params.items() if value is not None}

    def params(self, given: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**self._added, **given} if self._added else given

    async def rows(self, driver: Any, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        rows = await driver.execute_fetchall(self.sql, self.params(params))
        return [dict(zip(self.names, row, strict=True)) for row in rows]

    def run(self, conn: sqlite3.Connection, params: Mapping[str, Any]) -> list[Any]:
        """Its rows, on the driver's thread. All of them: a statement with RETURNING is finished only once its rows
        are read, and COMMIT refuses to end a transaction while a write is unfinished."""
        return conn.execute(self.sql, self.params(params)).fetchall()


async def on_driver_thread(driver: Any, call: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``call`` with the sqlite3 connection under this aiosqlite connection, on its thread, in one trip there and
    back. aiosqlite runs every call of a connection on that one thread, queued by ``_execute`` (as its own methods
    are); the sqlite3 connection may be used on no other."""
    result: T = await driver._execute(lambda: call(driver._conn))
    return result


__all__ = ["NAMED", "DriverStatement", "bound", "on_driver_thread", "time_text"]
