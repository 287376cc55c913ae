"""On SQLite the WAL is copied back into the database by the mesh store's own task, after every so many writes, and
never by the commit of a send (which would pay for copying and syncing both files)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.mesh.store_sqlite import CHECKPOINT_EVERY, SqliteMeshStore
from muster_api.settings import Settings
from muster_mesh import CheckinRecord, CheckinRequest, Mesh, SendRequest
from muster_mesh.clock import FakeClock
from tests.support.databases import sqlite_copy

pytestmark = pytest.mark.anyio

PAGE_SIZE = 4096
WAL_HEADER, FRAME_HEADER = 32, 24
SQLITE_AUTOCHECKPOINT_PAGES = 1000  # SQLite's default


@asynccontextmanager
async def sqlite_mesh(db_url: str) -> AsyncIterator[tuple[Mesh, SqliteMeshStore, list[str]]]:
    engine = create_engine(Settings(database_url=db_url).database_url)
    store = SqliteMeshStore(engine, dialect_of(engine))
    try:
        mesh = Mesh(store, clock=FakeClock())
        tokens = []
        for agent_id in ("alice", "bob"):
            joined = await mesh.checkin(CheckinRequest(agent_id=agent_id, confirm=True))
            assert isinstance(joined, CheckinRecord) and joined.token is not None
            tokens.append(joined.token)
        yield mesh, store, tokens
    finally:
        await store.aclose()
        await engine.dispose()


def wal_frames(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return max(wal.stat().st_size - WAL_HEADER, 0) // (FRAME_HEADER + PAGE_SIZE)


async def test_sends_leave_the_wal_to_the_checkpointer(sqlite_template: Path, tmp_path: Path) -> None:
    db = tmp_path / "muster.db"
    async with sqlite_mesh(sqlite_copy(sqlite_template, db)) as (mesh, _store, (alice, _bob)):
        # No checkpointer runs here: a WAL that grows past SQLite's automatic checkpoint size was checkpointed by no
        # send (one that checkpointed would have let the WAL start over from its beginning).
        for n in range(2_000):
            await mesh.send(SendRequest(to="bob", body=f"message {n}", confirm=True), token=alice)
            if wal_frames(db) > SQLITE_AUTOCHECKPOINT_PAGES + 100:
                break
        assert wal_frames(db) > SQLITE_AUTOCHECKPOINT_PAGES + 100


async def test_the_checkpointer_runs_after_every_so_many_writes(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sqlite_mesh(sqlite_copy(sqlite_template, tmp_path / "muster.db")) as (mesh, store, (alice, bob)):
        done = anyio.Event()
        checkpoint = store._checkpoint

        async def observed() -> None:
            await checkpoint()
            done.set()

        monkeypatch.setattr(store, "_checkpoint", observed)
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.checkpoint_forever)
            for n in range(CHECKPOINT_EVERY):
                await mesh.send(SendRequest(to="bob", body=f"message {n}", confirm=True), token=alice)
            with anyio.fail_after(10):
                await done.wait()
            tg.cancel_scope.cancel()
        assert store.checkpoints == 1
        # The search index took the sends' queue before the checkpoint (the sends made after it stay queued).
        async with store.engine.connect() as conn:
            queued = (await conn.execute(text("SELECT count(*) FROM mesh_messages_fts_pending"))).scalar_one()
            indexed = (await conn.execute(text("SELECT count(*) FROM mesh_messages_fts_docsize"))).scalar_one()
        assert indexed > 0 and queued + indexed == CHECKPOINT_EVERY
        page = await mesh.read_inbox(token=bob, after=0, limit=CHECKPOINT_EVERY)
        assert [m.seq for m in page.messages] == list(range(1, CHECKPOINT_EVERY + 1))
