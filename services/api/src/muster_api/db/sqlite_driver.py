"""Statements as aiosqlite's driver connection runs them: compiled once by SQLAlchemy for SQLite (so both paths run
the same text), with parameters bound as SQLAlchemy binds them, and a way to run a whole call on the driver's thread.

A trip to aiosqlite's thread is two thread switches (the event loop queues the call, the driver's thread answers
through the loop's self-pipe); on a busy machine each may wait for a core. Through SQLAlchemy's adapter a statement is
three or four such trips (cursor, execute, fetch, close) and a transaction two more (BEGIN, COMMIT); a whole
transaction run here (``in_transaction``) is one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import Select
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.sql.dml import UpdateBase

T = TypeVar("T")

NAMED = sqlite_dialect.dialect(paramstyle="named")


class DriverStatement:
    """A statement compiled once for the driver, with the names of the columns it returns and the parameters
    SQLAlchemy adds itself (the OFFSET beside a bound LIMIT, a literal compared in a WHERE)."""

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


def in_transaction(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T | None]) -> T | None:
    """``body`` inside BEGIN IMMEDIATE, on the driver's thread: committed when it returns a result, rolled back when
    it returns None (a condition did not hold: nothing was meant to change) or raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT" if result is not None else "ROLLBACK")
    return result


__all__ = ["NAMED", "DriverStatement", "in_transaction", "on_driver_thread"]
