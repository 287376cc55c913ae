"""The presence checks on the in-memory store and on the SQL stores (a fresh SQLite file, a fresh PostgreSQL
database)."""

from __future__ import annotations

import pytest

from muster_mesh.presence_testing import PRESENCE_CHECKS
from tests.mesh.test_conformance_memory import memory_mesh
from tests.mesh.test_conformance_sql import sql_factory

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("name", sorted(PRESENCE_CHECKS))
async def test_memory_presence(name: str) -> None:
    await PRESENCE_CHECKS[name](memory_mesh)


@pytest.mark.parametrize("name", sorted(PRESENCE_CHECKS))
async def test_sql_presence(name: str, db_url: str) -> None:
    await PRESENCE_CHECKS[name](sql_factory(db_url))
