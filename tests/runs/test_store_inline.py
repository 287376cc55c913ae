"""The SQLite run store's calls in place on the event loop's thread: a call SQLite refuses for its lock is not an
error but waits on the driver's thread, and the write-ahead log is still checkpointed though the connection in place
never checkpoints."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from muster_api.db.engine import create_engine
from muster_api.dispatch.component import run_store
from muster_api.dispatch.notify import RunNotifier
from muster_api.dispatch.store import SqlRunStore, new_run_id
from muster_dispatch import Observation
from tests.runs.test_store import NOW, _queue
from tests.support.databases import sqlite_copy

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _store(path: Path) -> AsyncIterator[SqlRunStore]:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    store = run_store(engine, RunNotifier(engine))
    try:
        yield store
    finally:
        await store.aclose()
        await engine.dispose()


async def test_a_write_refused_for_the_lock_waits_for_it_on_the_drivers_thread(
    sqlite_template: Path, tmp_path: Path
) -> None:
    path = sqlite_copy(sqlite_template, tmp_path / "muster.db").removeprefix("sqlite:///")
    async with _store(Path(path)) as store:
        first = await _queue(store, new_run_id(), "a")
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's write in progress
        queued: list[str] = []

        async def queue_second() -> None:
            queued.append(await _queue(store, new_run_id(), "b"))

        async with anyio.create_task_group() as group:
            group.start_soon(queue_second)
            # While the write waits for the lock, reads are answered (they take no lock) and the loop goes on.
            read = await store.get(first)
            assert read is not None and read.status == "queued"
            assert not queued, "the second run cannot be stored while another connection holds the write lock"
            holder.execute("COMMIT")
        holder.close()
        assert queued
        second = await store.get(queued[0])
        assert second is not None and second.workspace == "b"


async def test_the_log_is_checkpointed_though_the_connection_in_place_never_does(
    sqlite_template: Path, tmp_path: Path
) -> None:
    path = Path(sqlite_copy(sqlite_template, tmp_path / "muster.db").removeprefix("sqlite:///"))
    batches, rows = 2000, 4
    text = "x" * 2000  # a batch is about two pages of the log
    async with _store(path) as store:
        run_id = await _queue(store, new_run_id(), "a")
        for batch in range(batches):
            observations = [
                Observation(batch * rows + seq, NOW.isoformat(), "agent", {}, {"type": "text", "text": text})
                for seq in range(1, rows + 1)
            ]
            await store.append_events(run_id, observations)
        written = batches * rows * len(text)
        wal = path.with_name(path.name + "-wal").stat().st_size
        # Never checkpointed, the log would hold every batch (16 MB); checkpointed past SQLite's threshold of 1,000
        # pages (4 MB), it starts over and stays near that size.
        assert wal < written / 2, f"the log grew to {wal} bytes for {written} bytes written"
        assert len(await store.events_after(run_id, 0, limit=batches * rows)) == batches * rows
