"""What the SQL store spends around the mesh's hot statements: the transactions a call opens (on PostgreSQL, BEGIN
and COMMIT are round trips of their own) and the pooled connection a call is given (one used moments ago, whose
server process is awake, rather than the one idle longest)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import dialect_of
from muster_api.db.driver_pool import DriverPool, asyncpg_dsn
from muster_api.db.engine import create_engine
from muster_api.db.notify import PgNotifier
from muster_api.mesh.claims_store import RENEW_AND_CLAIMS_PG
from muster_api.mesh.component import make_store
from muster_api.mesh.store_postgres import PostgresMeshStore
from muster_api.settings import Settings
from muster_mesh import CheckinRecord, CheckinRequest, Mesh, MessageRecord, SendRequest, SendResult, Superseded
from muster_mesh.claims import CheckRequest, CheckResult, ClaimRequest, Claims
from muster_mesh.clock import FakeClock
from muster_mesh.tokens import token_hash
from tests.support.databases import PostgresServer, sqlite_copy

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def mesh_on(db_url: str) -> AsyncIterator[tuple[Mesh, AsyncEngine]]:
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        store = make_store(engine, dialect_of(engine))
        try:
            yield Mesh(store, clock=FakeClock()), engine
        finally:
            await store.aclose()
    finally:
        await engine.dispose()


async def join(mesh: Mesh, *agent_ids: str) -> dict[str, str]:
    """Check these agents in; their tokens by agent_id."""
    tokens = {}
    for agent_id in agent_ids:
        joined = await mesh.checkin(CheckinRequest(agent_id=agent_id, confirm=True))
        assert isinstance(joined, CheckinRecord) and joined.token is not None
        tokens[agent_id] = joined.token
    return tokens


async def test_a_page_and_a_renewal_open_no_transaction_where_statements_commit_alone(db_url: str) -> None:
    async with mesh_on(db_url) as (mesh, engine):
        created = await mesh.checkin(CheckinRequest(agent_id="alpha", status="idle", confirm=True))
        assert isinstance(created, CheckinRecord) and created.token is not None
        begins: list[object] = []

        def count(conn: Any) -> None:
            # SQLAlchemy announces a begin on an autocommit connection too; the database sees none there.
            if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
                begins.append(conn)

        event.listen(engine.sync_engine, "begin", count)
        try:
            page = await mesh.list_agents()
            renewed = await mesh.checkin(
                CheckinRequest(agent_id="alpha", status="busy", confirm=True), token=created.token
            )
            backlog = await mesh.backlog()
            one = await mesh.get_agent("alpha")
        finally:
            event.remove(engine.sync_engine, "begin", count)
        assert [a.agent_id for a in page.agents] == ["alpha"]
        assert isinstance(renewed, CheckinRecord) and renewed.status == "busy" and renewed.action == "renew"
        assert [b.agent_id for b in backlog.agents] == ["alpha"]
        assert one.status == "busy"
        # SQLite queues each statement behind its one writer, and each commits alone there too.
        assert begins == []


async def test_a_renewal_with_a_stale_session_still_runs_the_full_check_in(db_url: str) -> None:
    async with mesh_on(db_url) as (mesh, _engine):
        first = await mesh.checkin(CheckinRequest(agent_id="beta", confirm=True))
        assert isinstance(first, CheckinRecord) and first.token is not None
        taken = await mesh.checkin(CheckinRequest(agent_id="beta", takeover=True, confirm=True))
        assert isinstance(taken, CheckinRecord) and taken.token is not None and taken.token != first.token
        with pytest.raises(Superseded):
            await mesh.checkin(CheckinRequest(agent_id="beta", confirm=True), token=first.token)
        again = await mesh.checkin(CheckinRequest(agent_id="beta", status="back", confirm=True), token=taken.token)
        assert isinstance(again, CheckinRecord) and again.status == "back"


@pytest.mark.postgres  # SQLite's mesh transactions share one held connection: no pool to choose from
async def test_a_request_after_others_takes_the_connection_used_last(postgres_server: PostgresServer) -> None:
    db_url = postgres_server.create()
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        # Five connections in the pool, checked in one after another.
        async with AsyncExitStack() as stack:
            for _ in range(5):
                conn = await stack.enter_async_context(engine.connect())
                await conn.exec_driver_sql("SELECT 1")
        seen = []
        for _ in range(3):
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                seen.append(id(raw.driver_connection))
                await conn.exec_driver_sql("SELECT 1")
        # The one checked in last, every time (first in, first out would hand out the one idle longest, each time
        # another).
        assert len(set(seen)) == 1
    finally:
        await engine.dispose()
        postgres_server.drop(db_url)


async def test_deliver_stores_for_a_live_recipient_only(db_url: str) -> None:
    async with mesh_on(db_url) as (mesh, _engine):
        await mesh.checkin(CheckinRequest(agent_id="live", confirm=True))
        await mesh.checkin(CheckinRequest(agent_id="gone", ttl_seconds=60, confirm=True))
        now = mesh.clock()
        later = now + timedelta(seconds=120)

        def message(n: int, at: datetime) -> MessageRecord:
            return MessageRecord(message_id=f"m{n:031d}", sender="live", body=f"body {n}", thread_id=None, sent_at=at)

        async with mesh.store.transaction() as tx:
            assert await tx.deliver(message(1, later), "live", later) == {"live": 1}
            assert await tx.deliver(message(2, later), "gone", later) == {}
            assert await tx.deliver(message(3, later), "nobody", later) == {}
        async with mesh.store.transaction() as tx:
            live = await tx.read_inbox("live", after=0, limit=10)
            gone = await tx.read_inbox("gone", after=0, limit=10)
            agent = await tx.get_agent("gone")
        assert [(e.seq, e.message.body) for e in live] == [(1, "body 1")]
        assert gone == [] and agent is not None and agent.last_seq == 0


async def test_a_direct_send_opens_no_transaction_where_one_statement_does_it(db_url: str) -> None:
    async with mesh_on(db_url) as (mesh, engine):
        tokens = await join(mesh, "alice", "bob")
        # The first send learns the sender's agent_id and TTL from its token (a transaction).
        await mesh.send(SendRequest(to="bob", body="hello", confirm=True), token=tokens["alice"])
        begins: list[object] = []

        def count(conn: Any) -> None:
            if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
                begins.append(conn)

        event.listen(engine.sync_engine, "begin", count)
        try:
            for n in range(3):
                sent = await mesh.send(SendRequest(to="bob", body=f"again {n}", confirm=True), token=tokens["alice"])
                assert isinstance(sent, SendResult) and sent.recipients == ["bob"] and sent.stored == 1
        finally:
            event.remove(engine.sync_engine, "begin", count)
        page = await mesh.read_inbox(token=tokens["bob"], after=0)
        assert [(m.seq, m.body, m.sender) for m in page.messages] == [
            (1, "hello", "alice"),
            (2, "again 0", "alice"),
            (3, "again 1", "alice"),
            (4, "again 2", "alice"),
        ]
        # PostgreSQL runs each send as one statement; SQLite as one call on the driver's thread (below).
        assert begins == []


async def test_a_direct_send_on_sqlite_is_one_trip_to_the_drivers_thread(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with mesh_on(sqlite_copy(sqlite_template, tmp_path / "muster.db")) as (mesh, _engine):
        tokens = await join(mesh, "alice", "bob")
        await mesh.send(SendRequest(to="bob", body="hello", confirm=True), token=tokens["alice"])
        await mesh.read_inbox(token=tokens["bob"], after=0)
        trips = 0
        queue = aiosqlite.Connection._execute

        async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal trips
            trips += 1
            return await queue(self, fn, *args, **kwargs)

        monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
        sent = await mesh.send(SendRequest(to="bob", body="again", confirm=True), token=tokens["alice"])
        assert isinstance(sent, SendResult) and sent.stored == 1
        assert trips == 1, "BEGIN IMMEDIATE, the statements and COMMIT in one call"
        page = await mesh.read_inbox(token=tokens["bob"], after=1)
        assert trips == 2, "a read too"
        monkeypatch.undo()
        assert [(m.seq, m.body, m.sender) for m in page.messages] == [(2, "again", "alice")]


@pytest.mark.postgres  # the store's own asyncpg connections and the listening one exist on PostgreSQL only
async def test_a_send_its_wake_up_and_a_read_take_no_connection_from_the_engines_pool(
    postgres_server: PostgresServer,
) -> None:
    # A checkout from SQLAlchemy's pool and back costs more CPU than the statement it runs: the paths every message
    # takes run on the store's asyncpg connections, and the wake-up on the notifier's listening one.
    db_url = postgres_server.create(migrated=True)
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        sending, other = PgNotifier(engine), PgNotifier(engine)  # this instance's and another instance's
        async with anyio.create_task_group() as tg:
            await tg.start(sending.run)
            await tg.start(other.run)
            store = make_store(engine, dialect_of(engine))
            try:
                mesh = Mesh(store, sending)
                tokens = await join(mesh, "alice", "bob")
                # The first send and read learn the tokens' agent_ids and TTLs (a transaction each).
                await mesh.send(SendRequest(to="bob", body="hello", confirm=True), token=tokens["alice"])
                await mesh.read_inbox(token=tokens["bob"], after=0)
                checkouts: list[object] = []
                event.listen(engine.sync_engine.pool, "checkout", lambda *args: checkouts.append(args))
                async with other.subscribe("bob") as woken:
                    sent = await mesh.send(SendRequest(to="bob", body="again", confirm=True), token=tokens["alice"])
                    with anyio.fail_after(10):
                        await woken.wait()
                    page = await mesh.read_inbox(token=tokens["bob"], after=1)
                assert checkouts == [], "no checkout for the send, its NOTIFY or the read"
                assert [e.message.body for e in woken.take()] == ["again"], "the other instance heard it"
                assert isinstance(sent, SendResult) and [m.body for m in page.messages] == ["again"]
            finally:
                await store.aclose()
            tg.cancel_scope.cancel()
    finally:
        await engine.dispose()
        postgres_server.drop(db_url)


async def test_agents_messaging_each_other_at_once_store_every_message_in_order(db_url: str) -> None:
    """Each send locks its sender's and its recipient's rows: two agents sending to each other at the same moment
    must not deadlock, and every inbox stays gap-free."""
    agents, per_pair = ("a1", "a2", "a3", "a4"), 15
    async with mesh_on(db_url) as (mesh, _engine):
        tokens = await join(mesh, *agents)

        async def send_all(sender: str) -> None:
            for k in range(per_pair):
                for to in agents:
                    if to != sender:
                        request = SendRequest(to=to, body=f"{sender}:{k}", confirm=True)
                        sent = await mesh.send(request, token=tokens[sender])
                        assert isinstance(sent, SendResult) and sent.stored == 1

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for sender in agents:
                    tg.start_soon(send_all, sender)
        for agent_id in agents:
            page = await mesh.read_inbox(token=tokens[agent_id], after=0, limit=100)
            expected = per_pair * (len(agents) - 1)
            assert [m.seq for m in page.messages] == list(range(1, expected + 1))
            by_sender: dict[str, list[int]] = {}
            for m in page.messages:
                sender, k = m.body.split(":")
                assert m.sender == sender
                by_sender.setdefault(sender, []).append(int(k))
            assert all(ks == list(range(per_pair)) for ks in by_sender.values()) and len(by_sender) == len(agents) - 1


async def test_the_driver_pool_hands_a_connection_back_without_a_reset_statement(
    postgres_server: PostgresServer,
) -> None:
    # asyncpg's pool would send RESET ALL (with UNLISTEN * and more) after each statement: a second round trip per
    # call. A session setting made on the one connection is the witness that no such statement ran in between.
    db_url = postgres_server.create()
    engine = create_engine(Settings(database_url=db_url).database_url)
    pool = DriverPool(asyncpg_dsn(engine), size=1)
    try:
        await pool.fetch("SELECT set_config('muster.witness', 'kept', false)")
        rows = await pool.fetch("SELECT current_setting('muster.witness', true) AS witness, pg_backend_pid() AS pid")
        again = await pool.fetch("SELECT pg_backend_pid() AS pid")
        assert rows[0]["witness"] == "kept" and rows[0]["pid"] == again[0]["pid"]
    finally:
        await pool.aclose()
        await engine.dispose()
        postgres_server.drop(db_url)


async def test_a_checks_renewal_commits_without_waiting_for_its_flush_and_still_moves_the_lease(
    postgres_server: PostgresServer,
) -> None:
    # The check's one statement turns synchronous_commit off for its own transaction only: seen inside an explicit
    # transaction around it, and gone after it.
    db_url = postgres_server.create(migrated=True)
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        store = make_store(engine, dialect_of(engine))
        try:
            clock = FakeClock()
            mesh = Mesh(store, clock=clock)
            token = (await join(mesh, "alice"))["alice"]
            assert isinstance(store, PostgresMeshStore)
            (agent,) = await store.driver.fetch("SELECT expires_at, ttl_seconds FROM mesh_agents")
            hashed, ttl, before = token_hash(token), agent["ttl_seconds"], agent["expires_at"]
            clock.advance(30)
            now = clock()
            conn = await asyncpg.connect(asyncpg_dsn(engine))
            try:
                async with conn.transaction():
                    rows = await conn.fetch(RENEW_AND_CLAIMS_PG, now, now + timedelta(seconds=ttl), hashed, ttl, "r")
                    inside = await conn.fetchval("SHOW synchronous_commit")
                after = await conn.fetchval("SHOW synchronous_commit")
                expires = await conn.fetchval("SELECT expires_at FROM mesh_agents")
            finally:
                await conn.close()
            assert len(rows) == 1 and rows[0]["claim_id"] is None, "renewed, no claims"
            assert (inside, after) == ("off", "on")
            assert expires == now + timedelta(seconds=ttl) and expires - before == timedelta(seconds=30)
        finally:
            await store.aclose()
    finally:
        await engine.dispose()
        postgres_server.drop(db_url)


async def test_a_check_on_sqlite_runs_on_the_loop_when_the_database_is_free_and_waits_on_the_drivers_thread_else(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "muster.db"
    async with mesh_on(sqlite_copy(sqlite_template, path)) as (mesh, _engine):
        claims = Claims(mesh)
        tokens = await join(mesh, "alice", "bob")
        request = ClaimRequest(paths=["src/**"], repo="r", confirm=True)
        await claims.claim(request, token=tokens["alice"])
        ask = CheckRequest(repo="r", paths=["src/a.py", "docs/b.md"])
        await claims.check(ask, token=tokens["bob"])  # the first of a session learns the TTL
        trips = 0
        queue = aiosqlite.Connection._execute

        async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal trips
            trips += 1
            return await queue(self, fn, *args, **kwargs)

        monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
        free = await claims.check(ask, token=tokens["bob"])
        assert trips == 0, "the renewal and the read on the loop's own thread"
        assert [p.holder for p in free.paths] == ["alice", None]
        # Another connection holds the write lock: the check does not wait on the loop, which goes on serving.
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        ticks = 0
        async with anyio.create_task_group() as tg:

            async def tick() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await anyio.sleep(0)

            tg.start_soon(tick)
            answers: list[CheckResult] = []

            async def check() -> None:
                answers.append(await claims.check(ask, token=tokens["bob"]))

            tg.start_soon(check)
            while trips == 0:
                await anyio.sleep(0)
            seen = ticks
            while ticks < seen + 10:  # the loop runs while the check waits for the lock
                await anyio.sleep(0)
            assert not answers
            other.execute("COMMIT")
            other.close()
            while not answers:
                await anyio.sleep(0)
            tg.cancel_scope.cancel()
        assert trips == 1 and [p.holder for p in answers[0].paths] == ["alice", None]
        monkeypatch.undo()
