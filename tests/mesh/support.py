"""Helpers for the mesh's service tests: an app on a database with a manual clock, and token headers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from muster_api.db.engine import create_engine
from muster_api.runtime import Runtime
from muster_api.settings import Settings
from muster_mesh.testing import ManualClock
from tests.support.app import serve


@asynccontextmanager
async def mesh_app(db_url: str, clock: ManualClock | None = None) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=db_url)
    runtime = Runtime(settings=settings, engine=create_engine(settings.database_url), now=clock or ManualClock())
    async with serve(db_url, runtime=runtime) as client:
        yield client


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def join(client: httpx.AsyncClient, agent_id: str, **fields: Any) -> str:
    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True, **fields})
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    assert isinstance(token, str)
    return token
