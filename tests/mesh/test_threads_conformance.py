"""The threads conformance suite on the in-memory store and on the SQL stores (a fresh SQLite file, a fresh
PostgreSQL database)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.mesh.component import make_store
from muster_api.mesh.threads import SqlThreads
from muster_api.settings import Settings
from muster_mesh import InMemoryMeshStore, Mesh
from muster_mesh.clock import FakeClock
from muster_mesh.threads import MeshThreads
from muster_mesh.threads_testing import THREAD_CHECKS

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def memory_threads(clock: FakeClock) -> AsyncIterator[MeshThreads]:
    store = InMemoryMeshStore()
    yield MeshThreads(Mesh(store, clock=clock), store)


def sql_threads(db_url: str) -> Callable[[FakeClock], AbstractAsyncContextManager[MeshThreads]]:
    @asynccontextmanager
    async def make(clock: FakeClock) -> AsyncIterator[MeshThreads]:
        engine = create_engine(Settings(database_url=db_url).database_url)
        try:
            await upgrade(engine)
            store = make_store(engine, dialect_of(engine))
            try:
                yield MeshThreads(Mesh(store, clock=clock), SqlThreads(engine))
            finally:
                await store.aclose()
        finally:
            await engine.dispose()

    return make


@pytest.mark.parametrize("name", sorted(THREAD_CHECKS))
async def test_memory_threads(name: str) -> None:
    await THREAD_CHECKS[name](memory_threads)


@pytest.mark.parametrize("name", sorted(THREAD_CHECKS))
async def test_sql_threads(name: str, db_url: str) -> None:
    await THREAD_CHECKS[name](sql_threads(db_url))
