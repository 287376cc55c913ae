"""The search conformance suite on the in-memory store and on the SQL stores (a fresh SQLite file, a fresh
PostgreSQL database)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.mesh.component import make_store
from muster_api.mesh.search import make_search
from muster_api.settings import Settings
from muster_mesh import InMemoryMeshStore, Mesh
from muster_mesh.clock import FakeClock
from muster_mesh.search import MeshSearch
from muster_mesh.search_testing import SEARCH_CHECKS

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
                yield MeshSearch(Mesh(store, clock=clock), make_search(engine, dialect_of(engine)))
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
