"""The call-store conformance suite, one test per named check: on the in-memory store, and on the SQL store on a
fresh SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from muster_a2a import CallStore, InMemoryCallStore
from muster_a2a.testing import CHECKS, StoreFactory
from muster_api.a2a.store import SqlCallStore
from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.settings import Settings

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def memory_store() -> AsyncIterator[CallStore]:
    yield InMemoryCallStore()


def sql_factory(db_url: str) -> StoreFactory:
    @asynccontextmanager
    async def make() -> AsyncIterator[CallStore]:
        engine = create_engine(Settings(database_url=db_url).database_url)
        try:
            await upgrade(engine)
            yield SqlCallStore(engine, dialect_of(engine))
        finally:
            await engine.dispose()

    return make


@pytest.mark.parametrize("name", sorted(CHECKS))
async def test_in_memory_store(name: str) -> None:
    await CHECKS[name](memory_store)


@pytest.mark.parametrize("name", sorted(CHECKS))
async def test_sql_store(name: str, db_url: str) -> None:
    await CHECKS[name](sql_factory(db_url))
