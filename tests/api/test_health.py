from __future__ import annotations

import anyio
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text

from muster_api.db.engine import create_engine
from muster_api.db.migrate import alembic_config, head_revision
from muster_api.settings import Settings
from tests.support.app import serve
from tests.support.databases import PostgresServer

pytestmark = pytest.mark.anyio


async def test_healthz_and_readyz(db_url: str) -> None:
    async with serve(db_url) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["revision"] == head_revision()
        assert body["database"] == ("sqlite" if db_url.startswith("sqlite") else "postgresql")


async def test_readyz_503_when_not_at_head(db_url: str) -> None:
    async with serve(db_url) as client:
        previous = ScriptDirectory.from_config(alembic_config()).get_revision(head_revision()).down_revision
        engine = create_engine(Settings(database_url=db_url).database_url)
        # The recorded revision is moved back rather than the schema downgraded: dropping the dispatch tables under
        # the running workers' queries deadlocks on PostgreSQL, and what /readyz checks is the recorded revision.
        try:
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE alembic_version SET version_num = :previous"), {"previous": previous})
        finally:
            await engine.dispose()
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.headers["content-type"] == "application/problem+json"
        assert "migrations not at head" in ready.json()["detail"]


@pytest.mark.postgres
async def test_readyz_503_when_database_unreachable(postgres_server: PostgresServer) -> None:
    url = await anyio.to_thread.run_sync(postgres_server.create)
    async with serve(url) as client:
        assert (await client.get("/readyz")).status_code == 200
        # The database goes away under a running service: liveness holds, readiness says why.
        await anyio.to_thread.run_sync(postgres_server.drop, url)
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert "database unreachable" in ready.json()["detail"]
        assert (await client.get("/healthz")).status_code == 200


async def test_sqlite_connections_are_tuned(tmp_path: object) -> None:
    engine = create_engine(Settings(database_url=f"sqlite:///{tmp_path}/t.db").database_url)
    try:
        async with engine.connect() as conn:
            got = {
                p: (await conn.execute(text(f"PRAGMA {p}"))).scalar()
                for p in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
            }
    finally:
        await engine.dispose()
    assert got == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 10000, "synchronous": 1}
