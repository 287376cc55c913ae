"""The search conformance suite on the in-memory store and on the SQL stores (a fresh SQLite file, a fresh
PostgreSQL database)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.mesh.component import make_store
from muster_api.mesh.search import make_search
from muster_api.mesh.store_sqlite import SqliteMeshStore
from muster_api.settings import Settings
from muster_mesh import CheckinRequest, InMemoryMeshStore, Mesh, MessageRecord
from muster_mesh.clock import FakeClock
from muster_mesh.search import MeshSearch
from muster_mesh.search_testing import SEARCH_CHECKS
from tests.support.databases import sqlite_copy

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def memory_search(clock: FakeClock) -> AsyncIterator[MeshSearch]:
    store = InMemoryMeshStore()
    yield MeshSearch(Mesh(store, clock=clock), store)


def sql_search(db_url: str) -> Callable[[FakeClock], AbstractAsyncContextManager[MeshSearch]]:
    @asynccontextmanager
    async def make(clock: FakeClock) -> AsyncIterator[MeshSearch]:
        engine = create_engine(Settings(database_url=db_url).database_url)
        try:
            await upgrade(engine)
            store = make_store(engine, dialect_of(engine))
            try:
                held = getattr(store, "on_held", None)  # as the service builds it
                yield MeshSearch(Mesh(store, clock=clock), make_search(engine, dialect_of(engine), held=held))
            finally:
                await store.aclose()
        finally:
            await engine.dispose()

    return make


@pytest.mark.parametrize("name", sorted(SEARCH_CHECKS))
async def test_memory_search(name: str) -> None:
    await SEARCH_CHECKS[name](memory_search)


@pytest.mark.parametrize("name", sorted(SEARCH_CHECKS))
async def test_sql_search(name: str, db_url: str) -> None:
    await SEARCH_CHECKS[name](sql_search(db_url))


class _RolledBack(Exception):
    pass


async def _store_then_roll_back(
    store: SqliteMeshStore, message: MessageRecord, meanwhile: Callable[[], Awaitable[None]]
) -> None:
    async with store.transaction() as tx:
        await tx.add_message(message, {"bob": 1})
        await meanwhile()
        raise _RolledBack


async def test_a_search_on_the_held_connection_waits_for_the_open_transaction(
    sqlite_template: Path, tmp_path: Path
) -> None:
    # SQLite's search reads on the store's held connection, where a transaction may be open: it must wait for the
    # transaction's end, never read its uncommitted rows.
    engine = create_engine(Settings(database_url=sqlite_copy(sqlite_template, tmp_path / "m.db")).database_url)
    store = SqliteMeshStore(engine, dialect_of(engine))
    try:
        mesh = Mesh(store, clock=FakeClock())
        search = MeshSearch(mesh, make_search(engine, dialect_of(engine), held=store.on_held))
        await mesh.checkin(CheckinRequest(agent_id="bob", confirm=True))
        pages = []

        async def searching() -> None:
            pages.append(await search.search("zebra", token=None, overseer=True))

        message = MessageRecord("m1", "alice", "an uncommitted zebra", None, datetime.now(UTC))
        async with anyio.create_task_group() as tg:

            async def search_meanwhile() -> None:
                tg.start_soon(searching)
                await anyio.wait_all_tasks_blocked()

            with pytest.raises(_RolledBack):
                await _store_then_roll_back(store, message, search_meanwhile)
        assert pages[0].hits == []
    finally:
        await store.aclose()
        await engine.dispose()
