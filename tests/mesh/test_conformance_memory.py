"""The conformance suite on the in-memory store (the SQL store runs the same suite in test_conformance_sql)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from muster_mesh import InMemoryMeshStore, Mesh
from muster_mesh.clock import FakeClock
from muster_mesh.testing import CHECKS

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def memory_mesh(clock: FakeClock) -> AsyncIterator[Mesh]:
    yield Mesh(InMemoryMeshStore(), clock=clock)


@pytest.mark.parametrize("name", sorted(CHECKS))
async def test_memory_store(name: str) -> None:
    await CHECKS[name](memory_mesh)
