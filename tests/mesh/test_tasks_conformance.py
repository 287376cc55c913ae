"""The tasks' conformance checks on the in-memory store and the SQL store (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from muster_mesh.tasks_testing import TASK_CHECKS
from tests.mesh.test_claims_conformance import memory
from tests.mesh.test_conformance_sql import sql_factory

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("name", sorted(TASK_CHECKS))
async def test_memory_store(name: str) -> None:
    await TASK_CHECKS[name](memory)


@pytest.mark.parametrize("name", sorted(TASK_CHECKS))
async def test_sql_store(name: str, db_url: str) -> None:
    await TASK_CHECKS[name](sql_factory(db_url))
