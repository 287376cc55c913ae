"""Rows written under the API: what an older version (before status text was screened for control characters) may
have left in a database, for the places that show it to people."""

from __future__ import annotations

import asyncio
import concurrent.futures

from sqlalchemy import update

from muster_api.db.engine import create_engine
from muster_api.db.url import normalise_database_url
from muster_api.mesh.tables import agents


def store_status(db_url: str, agent_id: str, status: str) -> None:
    async def run() -> None:
        engine = create_engine(normalise_database_url(db_url))
        try:
            async with engine.begin() as conn:
                await conn.execute(update(agents).where(agents.c.agent_id == agent_id).values(status=status))
        finally:
            await engine.dispose()

    # The caller may hold a running loop (Playwright's sync API does): run on a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, run()).result()
