"""The path claims' conformance checks on the in-memory store and the SQL store (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from muster_mesh import InMemoryMeshStore, Mesh
from muster_mesh.claims_testing import CLAIM_CHECKS
from muster_mesh.clock import FakeClock
from tests.mesh.test_conformance_sql import sql_factory

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def memory(clock: FakeClock) -> AsyncIterator[Mesh]:
    yield Mesh(InMemoryMeshStore(), clock=clock)


@pytest.mark.parametrize("name", sorted(CLAIM_CHECKS))
async def test_memory_store(name: str) -> None:
    await CLAIM_CHECKS[name](memory)


@pytest.mark.parametrize("name", sorted(CLAIM_CHECKS))
async def test_sql_store(name: str, db_url: str) -> None:
    await CLAIM_CHECKS[name](sql_factory(db_url))
