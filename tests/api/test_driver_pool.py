"""The asyncpg connections a message's statements run on (``muster_api.db.driver_pool``): bounded, reused, and a
connection in an unknown state is never handed to the next statement."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest

from muster_api.db.driver_pool import DriverPool
from muster_api.web.problems import _UNAVAILABLE
from tests.support.databases import PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

PID = "SELECT pg_backend_pid() AS pid"
# Waits while the test's own connection holds advisory lock 1: a statement that keeps its connection busy.
BLOCKED = "SELECT pg_advisory_lock_shared(1), pg_advisory_unlock_shared(1), pg_backend_pid() AS pid"


@pytest.fixture
async def dsn(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await anyio.to_thread.run_sync(postgres_server.create)
    yield url
    await anyio.to_thread.run_sync(postgres_server.drop, url)


@pytest.fixture
async def admin(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """The test's own connection: it holds the advisory lock and looks at the server's sessions."""
    conn = await asyncpg.connect(dsn)
    yield conn
    await conn.close()


@asynccontextmanager
async def _pool(dsn: str, **options: Any) -> AsyncIterator[DriverPool]:
    pool = DriverPool(dsn, **options)
    try:
        yield pool
    finally:
        await pool.aclose()


async def _waiting_on_the_lock(admin: asyncpg.Connection, count: int) -> None:
    sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    with anyio.fail_after(10):
        while await admin.fetchval(sql) < count:
            await anyio.sleep(0.01)


async def test_statements_share_at_most_size_connections_and_reuse_them(dsn: str, admin: asyncpg.Connection) -> None:
    async with _pool(dsn, size=2) as pool:
        assert pool.open == 0  # nothing opened before a statement needs it
        await admin.execute("SELECT pg_advisory_lock(1)")
        pids: list[int] = []

        async def run() -> None:
            pids.append((await pool.fetch(BLOCKED))[0]["pid"])

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(run)
            await _waiting_on_the_lock(admin, 2)
            assert pool.open == 2  # the other three wait for one of the two
            await admin.execute("SELECT pg_advisory_unlock(1)")
        assert len(pids) == 5 and len(set(pids)) == 2
        assert {(await pool.fetch(PID))[0]["pid"] for _ in range(4)} <= set(pids)


async def test_a_refused_statement_keeps_its_connection(dsn: str) -> None:
    async with _pool(dsn, size=1) as pool:
        pid = (await pool.fetch(PID))[0]["pid"]
        with pytest.raises(asyncpg.DivisionByZeroError):
            await pool.fetch("SELECT 1 / 0")
        assert (await pool.fetch(PID))[0]["pid"] == pid


async def test_a_cancelled_statement_closes_its_connection_and_frees_its_place(
    dsn: str, admin: asyncpg.Connection
) -> None:
    async with _pool(dsn, size=1) as pool:
        first = (await pool.fetch(PID))[0]["pid"]
        await admin.execute("SELECT pg_advisory_lock(1)")
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.fetch, BLOCKED)
            await _waiting_on_the_lock(admin, 1)
            tg.cancel_scope.cancel()
        await admin.execute("SELECT pg_advisory_unlock(1)")
        assert pool.open == 0
        assert (await pool.fetch(PID))[0]["pid"] != first  # a new connection, in the place the other left


async def test_a_statement_cancelled_while_waiting_leaves_the_connection_to_the_next(
    dsn: str, admin: asyncpg.Connection
) -> None:
    async with _pool(dsn, size=1) as pool:
        await admin.execute("SELECT pg_advisory_lock(1)")
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.fetch, BLOCKED)
            await _waiting_on_the_lock(admin, 1)
            with anyio.CancelScope() as waiting:
                waiting.cancel()
                await pool.fetch(PID)  # queued behind the busy connection, then cancelled
            assert pool._waiters and pool._waiters[0].cancelled()
            await admin.execute("SELECT pg_advisory_unlock(1)")
        pid = (await pool.fetch(PID))[0]["pid"]
        assert pool.open == 1 and (await pool.fetch(PID))[0]["pid"] == pid


async def test_a_waiting_statement_gets_the_place_of_a_connection_that_broke(
    dsn: str, admin: asyncpg.Connection
) -> None:
    async with _pool(dsn, size=1) as pool:
        await admin.execute("SELECT pg_advisory_lock(1)")
        outcomes: list[object] = []

        async def run(sql: str) -> None:
            try:
                outcomes.append((await pool.fetch(sql))[0]["pid"])
            except Exception as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, BLOCKED)
            await _waiting_on_the_lock(admin, 1)
            tg.start_soon(run, PID)  # waits: the one connection is busy
            with anyio.fail_after(10):
                while not pool._waiters:
                    await anyio.sleep(0)
            blocked = await admin.fetchval("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            await admin.execute("SELECT pg_terminate_backend($1)", blocked)
        assert isinstance(outcomes[0], _UNAVAILABLE), outcomes  # answered 503 by the service
        assert isinstance(outcomes[1], int) and outcomes[1] != blocked
        assert pool.open == 1


async def test_a_connection_the_server_ended_while_idle_is_not_reused(dsn: str, admin: asyncpg.Connection) -> None:
    async with _pool(dsn, size=1) as pool:
        pid = (await pool.fetch(PID))[0]["pid"]
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
        idle = pool._idle[0][0]
        with anyio.fail_after(10):  # the driver notices the server closed it
            while not idle.is_closed():
                await anyio.sleep(0.01)
        assert (await pool.fetch(PID))[0]["pid"] != pid


async def test_a_connection_idle_for_too_long_is_closed_instead_of_reused(dsn: str) -> None:
    async with _pool(dsn, size=1) as kept, _pool(dsn, size=1, max_idle=0) as stale:
        first = (await kept.fetch(PID))[0]["pid"]
        assert (await kept.fetch(PID))[0]["pid"] == first
        first = (await stale.fetch(PID))[0]["pid"]
        assert (await stale.fetch(PID))[0]["pid"] != first
        assert stale.open == 1


async def test_after_aclose_a_statement_is_refused_and_nothing_stays_open(dsn: str) -> None:
    pool = DriverPool(dsn, size=2)
    await pool.fetch(PID)
    await pool.aclose()
    assert pool.open == 0
    with pytest.raises(asyncpg.InterfaceError):
        await pool.fetch(PID)
