"""The conformance suite on the SQL store, on a fresh SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.mesh.component import make_store
from muster_api.settings import Settings
from muster_mesh import Mesh
from muster_mesh.clock import FakeClock
from muster_mesh.testing import CHECKS

pytestmark = pytest.mark.anyio


def sql_factory(db_url: str) -> Callable[[FakeClock], AbstractAsyncContextManager[Mesh]]:
    @asynccontextmanager
    async def make(clock: FakeClock) -> AsyncIterator[Mesh]:
        engine = create_engine(Settings(database_url=db_url).database_url)
        try:
            await upgrade(engine)
            store = make_store(engine, dialect_of(engine))
            try:
                yield Mesh(store, clock=clock)
            finally:
                await store.aclose()
        finally:
            await engine.dispose()

    return make


@pytest.mark.parametrize("name", sorted(CHECKS))
async def test_sql_store(name: str, db_url: str) -> None:
    await CHECKS[name](sql_factory(db_url))
