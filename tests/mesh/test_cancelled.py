"""A call cancelled while one of its statements is with the database (a client closing its stream or long-poll, a
deadline) leaves each message stored whole or not at all, and no lock behind that the next call would wait for."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import event

from muster_mesh import CheckinRecord, CheckinRequest, Mesh, SendRequest, SendResult
from tests.mesh.test_round_trips import mesh_on
from tests.support.databases import sqlite_copy

pytestmark = pytest.mark.anyio

STATEMENTS_IN_A_SEND = 8  # more than a send runs on either database: the last ones cancel nothing


class CancelAtStatement:
    """Cancels a scope from the database's side, as the n-th statement starts: the cancellation reaches the call
    while it waits for that statement (the driver's thread hands back the answer only after this callback)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.scope: anyio.CancelScope | None = None
        self.countdown = 0

    def traced(self, _sql: str) -> None:
        self.countdown -= 1
        if self.countdown == 0 and self.scope is not None:
            self.loop.call_soon_threadsafe(self.scope.cancel)

    def on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        if hasattr(dbapi_connection, "run_async"):  # SQLite: sqlite3's trace callback, set in aiosqlite's thread
            dbapi_connection.run_async(lambda driver: driver.set_trace_callback(self.traced))


async def send(mesh: Mesh, token: str, body: str) -> object:
    return await mesh.send(SendRequest(to="bob", body=body, confirm=True), token=token)


@pytest.mark.parametrize("nth", range(1, STATEMENTS_IN_A_SEND + 1))
async def test_a_send_cancelled_during_its_nth_statement_frees_the_database(
    sqlite_template: Path, tmp_path: Path, nth: int
) -> None:
    # SQLite only: sqlite3 calls back as each statement starts, asyncpg has no such hook; and on PostgreSQL a
    # connection dropped halfway is rolled back by the server, where SQLite's lock stays with the abandoned connection.
    async with mesh_on(sqlite_copy(sqlite_template, tmp_path / "muster.db")) as (mesh, engine):
        canceller = CancelAtStatement(asyncio.get_running_loop())
        event.listen(engine.sync_engine, "connect", canceller.on_connect)
        alice = await mesh.checkin(CheckinRequest(agent_id="alice", confirm=True))
        bob = await mesh.checkin(CheckinRequest(agent_id="bob", confirm=True))
        assert isinstance(alice, CheckinRecord) and alice.token is not None
        assert isinstance(bob, CheckinRecord) and bob.token is not None
        with anyio.CancelScope() as scope:
            canceller.scope, canceller.countdown = scope, nth
            await send(mesh, alice.token, "cut")
        canceller.scope = None
        # A lock left held keeps this send waiting out SQLite's busy timeout, then fails "database is locked".
        with anyio.fail_after(5):
            sent = await send(mesh, alice.token, "whole")
            page = await mesh.read_inbox(token=bob.token, after=0, limit=10)
        assert isinstance(sent, SendResult)
        bodies = [m.body for m in page.messages]
        assert bodies in (["whole"], ["cut", "whole"]), "each send stored whole or not at all"
        assert [m.seq for m in page.messages] == list(range(1, len(bodies) + 1))
