"""Engine construction: one URL in, an AsyncEngine out, with SQLite tuned for a concurrent service."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from muster_api.db.url import is_sqlite, sqlite_path

SQLITE_BUSY_TIMEOUT_MS = 10_000
# A pooled connection idle for longer than this is pinged before use; one used more recently is not (see _ping_idle).
PING_AFTER_IDLE_SECONDS = 1.0
# Execution option: the connection only reads, one statement at a time, so on SQLite it takes no write lock (each
# statement is then its own read transaction, which WAL never blocks). ``engine.execution_options(**{UNLOCKED_READS:
# True})`` makes such an engine on the same pool.
UNLOCKED_READS = "muster_unlocked_reads"


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    # An error's message must never carry bound parameters (message bodies, token hashes) into a log or a problem.
    kwargs.setdefault("hide_parameters", True)
    if not is_sqlite(url):
        # Every connection the pool opens stays open, and a request waits for one when all are in use. A connection
        # past the kept ones (an overflow) is closed as soon as it is handed back, and opening one costs more CPU
        # than the statements it then runs (the connection, its authentication, asyncpg's prepared statements made
        # again): with 10 kept and 10 of overflow, 100 long-polling readers and 50 senders on two instances opened
        # several connections a second, all along. The statements every message runs (a send, an inbox read) have
        # connections of their own beside these (muster_api.db.driver_pool, 10 more): an instance keeps at most 20,
        # plus one listening per capability.
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 0)
        # Last in, first out: a request takes the connection used most recently, whose server process is awake and
        # which was not idle long enough to need a ping (see _ping_idle). First in, first out rotates through the
        # whole pool, so after a pause of a fraction of a second each request met a connection idle for seconds,
        # paying a ping round trip and a cold server process before its own first statement.
        kwargs.setdefault("pool_use_lifo", True)
        engine = create_async_engine(url, **kwargs)
        if not kwargs.get("pool_pre_ping"):
            _ping_idle(engine)
        return engine

    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs)
    _tune_sqlite(engine)
    return engine


SQLITE_MMAP_BYTES = 256 * 1024 * 1024
SQLITE_CONNECTION_PRAGMAS = (
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
    # Reads map the file rather than copy each page through a read() into the page cache: a search over 100,000
    # messages looks at a row per match, and on the default 2 MB cache most of those were misses (its statement's CPU
    # 4.1 -> 2.2 ms). A bound, not a reservation: only the pages touched are mapped.
    f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}",
)
"""What every connection to the database file sets for itself (the engine's, and any opened beside them)."""
BACKSTOP_CHECKPOINT_PAGES = 10_000
"""The automatic checkpoint of a connection whose store checkpoints its log in the background, off the path of the
writes (the mesh's, the run store's): under writes that never pause, a passive checkpoint never catches up with the
last frames, the log cannot start over, and it grows to this size, where one commit checkpoints the little left."""


def _tune_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # Take over transaction control from the sqlite3 module so that BEGIN IMMEDIATE below is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in (
            "PRAGMA journal_mode=WAL",
            f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
            *SQLITE_CONNECTION_PRAGMAS,
        ):
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # IMMEDIATE takes the write lock up front: a deferred transaction that later writes can fail with
        # SQLITE_BUSY without waiting (lock upgrade deadlock), which busy_timeout does not cover. Sent on the driver
        # connection: one trip to aiosqlite's thread, where SQLAlchemy's cursor adapter takes three (open, execute,
        # close), and every transaction begins with it. A connection made for reads only takes no lock at all.
        if not conn.get_execution_options().get(UNLOCKED_READS):
            conn.connection.dbapi_connection.run_async(lambda driver: driver.execute("BEGIN IMMEDIATE"))


def _ping_idle(engine: AsyncEngine) -> None:
    """Pessimistic disconnect handling for connections that sat idle in the pool: ``pool_pre_ping`` costs a round
    trip on every checkout (measured: a third of a one-statement transaction on a local PostgreSQL), while a
    connection handed back moments ago is almost never stale. A connection that does fail in use is still handled by
    SQLAlchemy's disconnect detection, which invalidates it and every connection pooled before it."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: DBAPIConnection | None, record: ConnectionPoolEntry) -> None:
        record.info["muster_idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry, _proxy: Any) -> None:
        idle_since = record.info.get("muster_idle_since")
        if idle_since is None or time.monotonic() - idle_since <= PING_AFTER_IDLE_SECONDS:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as error:  # the driver's own error type: any failure means the connection is unusable
            raise exc.DisconnectionError(f"idle pooled connection failed its ping: {error}") from error
        if not alive:
            raise exc.DisconnectionError("idle pooled connection failed its ping")
