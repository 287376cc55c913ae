"""Engine construction: one URL in, an AsyncEngine out, with SQLite tuned for a concurrent service."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from muster_api.db.url import is_sqlite, sqlite_path

SQLITE_BUSY_TIMEOUT_MS = 10_000


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    if not is_sqlite(url):
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 10)
        kwargs.setdefault("pool_pre_ping", True)
        return create_async_engine(url, **kwargs)

    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs)
    _tune_sqlite(engine)
    return engine


def _tune_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # Take over transaction control from the sqlite3 module so that BEGIN IMMEDIATE below is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in (
            "PRAGMA journal_mode=WAL",
            "PRAGMA foreign_keys=ON",
            f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
            "PRAGMA synchronous=NORMAL",
        ):
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # IMMEDIATE takes the write lock up front: a deferred transaction that later writes can fail with
        # SQLITE_BUSY without waiting (lock upgrade deadlock), which busy_timeout does not cover.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
