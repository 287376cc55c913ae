"""What the mesh's SQL store does differently on SQLite: serial transactions on one held connection, and the hot
send/renew statements run on the driver connection.

Through SQLAlchemy's adapter each statement is three or four hops to aiosqlite's thread (cursor, execute, fetch,
close); on the driver connection, inside the same transaction, it is one. The SQL is SQLAlchemy's own compilation of
the core's statements, so both paths run the same text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

import anyio
from sqlalchemy import Select
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.dml import UpdateBase

from muster_api.db.dialect import Dialect
from muster_api.mesh.store import (
    BUMP_ONE,
    INSERT_INBOX,
    INSERT_MESSAGE,
    SqlMeshStore,
    SqlMeshTx,
    TransactionNotifier,
    agent_from,
    message_values,
)
from muster_api.mesh.tables import agents
from muster_mesh import AgentFilter, AgentRecord, MessageRecord

_NAMED = sqlite_dialect.dialect(paramstyle="named")
# UTCDateTime's and JSONDocument's bind processing for SQLite (SQLAlchemy's stored text formats): the stored text and
# the compared text must be the same on both paths.
_TIME = agents.c.expires_at.type.dialect_impl(_NAMED).bind_processor(_NAMED)
_JSON = agents.c.caps.type.dialect_impl(_NAMED).bind_processor(_NAMED)


def _time(value: datetime) -> str:
    assert _TIME is not None
    return str(_TIME(value))


def _bound(value: Any) -> Any:
    """A parameter of a mesh statement as SQLAlchemy binds it on SQLite (datetimes and JSON lists become text)."""
    if isinstance(value, datetime):
        return _time(value)
    if isinstance(value, list):
        assert _JSON is not None
        return _JSON(value)
    return value


class DriverStatement:
    """A statement compiled once for the driver, with the names of the columns it returns."""

    def __init__(self, stmt: UpdateBase | Select[Any]) -> None:
        self.sql = str(stmt.compile(dialect=_NAMED))
        self.names = tuple(c.name for c in stmt.exported_columns)

    async def rows(self, driver: Any, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [dict(zip(self.names, row, strict=True)) for row in await driver.execute_fetchall(self.sql, params)]


@lru_cache(maxsize=64)
def _driver_select(stmt: Select[Any]) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """A select compiled once for the driver: its SQL, the names of its columns, the parameters SQLAlchemy adds
    itself (the OFFSET beside a bound LIMIT)."""
    compiled = stmt.compile(dialect=_NAMED)
    return str(compiled), tuple(stmt.selected_columns.keys()), dict(compiled.params)


_driver_statement = lru_cache(maxsize=64)(DriverStatement)
_BUMP_ONE = DriverStatement(BUMP_ONE)
_INSERT_MESSAGE = DriverStatement(INSERT_MESSAGE)
_INSERT_INBOX = DriverStatement(INSERT_INBOX)


class SqliteMeshTx(SqlMeshTx):
    def __init__(self, conn: AsyncConnection, store: SqlMeshStore) -> None:
        super().__init__(conn, store)
        self._driver: Any = None

    async def _aiosqlite(self) -> Any:
        """The aiosqlite connection under this transaction's SQLAlchemy connection."""
        if self._driver is None:
            self._driver = (await self._conn.get_raw_connection()).driver_connection
        return self._driver

    async def _first_agent(self, stmt: Any, params: Mapping[str, Any]) -> AgentRecord | None:
        # Every one-agent statement (a read, a lease renewal, a check-in's UPDATE … RETURNING) in one hop to
        # aiosqlite's thread, where SQLAlchemy's cursor adapter takes three or four, all inside the write lock.
        bound = {name: _bound(value) for name, value in params.items()}
        rows = await _driver_statement(stmt).rows(await self._aiosqlite(), bound)
        return agent_from(rows[0]) if rows else None

    async def _bump_one(self, agent_id: str, live_at: datetime) -> dict[str, int]:
        rows = await _BUMP_ONE.rows(await self._aiosqlite(), {"p_id": agent_id, "p_now": _time(live_at)})
        return {row["agent_id"]: int(row["last_seq"]) for row in rows}

    async def list_agents(self, where: AgentFilter, *, after: str | None, limit: int) -> list[AgentRecord]:
        # A directory page is one hop to aiosqlite's thread this way, four through SQLAlchemy's cursor adapter (open,
        # execute, fetch, close), and its rows skip SQLAlchemy's result machinery.
        stmt, params = self._list_query(where, after, limit)
        sql, names, added = _driver_select(stmt)
        if where.live_at is not None:
            params["p_live"] = _time(where.live_at)
        rows = await (await self._aiosqlite()).execute_fetchall(sql, {**added, **params})
        return [agent_from(dict(zip(names, row, strict=True))) for row in rows]

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        if len(seqs) != 1:
            await super().add_message(message, seqs)
            return
        ((recipient, seq),) = seqs.items()
        driver = await self._aiosqlite()
        await _INSERT_MESSAGE.rows(driver, {**message_values(message), "sent_at": _time(message.sent_at)})
        await _INSERT_INBOX.rows(driver, {"recipient": recipient, "seq": seq, "message_id": message.message_id})
        await self._store.on_stored(self._conn, [recipient])


class SqliteMeshStore(SqlMeshStore):
    """SQLite has one writer at a time and every transaction here is BEGIN IMMEDIATE: connections racing for the lock
    would wait in SQLite's busy handler, which sleeps (1, 2, 5, 10 … ms) instead of waking when the lock frees.
    Queueing in-process hands the lock over at once; the busy handler still covers other writers. The transactions
    are serial anyway, so they share one connection kept out of the pool: returning it would cost a rollback (a hop
    to aiosqlite's thread) between the commit and the wake-ups."""

    tx_class = SqliteMeshTx
    serial = True

    def __init__(self, engine: AsyncEngine, dialect: Dialect, notifier: TransactionNotifier | None = None) -> None:
        super().__init__(engine, dialect, notifier)
        self._serial = anyio.Lock()
        self._held: AsyncConnection | None = None

    async def _connection(self) -> AsyncConnection:
        if self._held is None or self._held.closed or self._held.invalidated:
            self._held = await self.engine.connect()
        return self._held

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlMeshTx]:
        # Shielded: a cancellation (a client closing its stream or long-poll) delivered while a statement is with
        # aiosqlite's thread makes SQLAlchemy drop the connection halfway, its write lock still held, and the next
        # writer waits out the busy timeout ("database is locked"). These blocks are a few statements, never a wait.
        with anyio.CancelScope(shield=True):
            async with self._serial:
                conn = await self._connection()
                async with conn.begin():
                    yield self.tx_class(conn, self)

    @asynccontextmanager
    async def standalone(self) -> AsyncIterator[SqlMeshTx]:
        # Queued like a transaction (one writer at a time either way), without BEGIN and COMMIT: each statement that
        # runs on the driver connection commits alone, one hop to aiosqlite's thread instead of three. A statement
        # that goes through SQLAlchemy begins a transaction, ended here.
        with anyio.CancelScope(shield=True):  # as a transaction is, for the same reason
            async with self._serial:
                conn = await self._connection()
                try:
                    yield self.tx_class(conn, self)
                except BaseException:
                    if conn.in_transaction():
                        await conn.rollback()
                    raise
                if conn.in_transaction():
                    await conn.commit()

    async def aclose(self) -> None:
        async with self._serial:
            held, self._held = self._held, None
            if held is not None:
                await held.close()


__all__ = ["SqliteMeshStore", "SqliteMeshTx"]
