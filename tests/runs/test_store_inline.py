"""The SQLite run store's calls in place on the event loop's thread: a call SQLite refuses for its lock is not an
error but waits on the driver's thread, and the write-ahead log is checkpointed on the driver's thread, the writes not
waiting for it."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from muster_api.db.engine import create_engine
from muster_api.db.sqlite_driver import on_driver_thread
from muster_api.dispatch.component import run_store
from muster_api.dispatch.notify import RunNotifier
from muster_api.dispatch.store import SqlRunStore, new_run_id
from muster_api.dispatch.store_sqlite import SqliteRunStore, _Held
from muster_dispatch import Observation
from tests.runs.test_store import NOW, _queue
from tests.support.databases import sqlite_copy

pytestmark = pytest.mark.anyio

PAGE_SIZE = 4096
WAL_HEADER, FRAME_HEADER = 32, 24
SQLITE_AUTOCHECKPOINT_PAGES = 1000  # SQLite's default


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


def _wal_frames(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return max(wal.stat().st_size - WAL_HEADER, 0) // (FRAME_HEADER + PAGE_SIZE)


async def test_the_writes_leave_the_log_to_the_checkpoint_on_the_drivers_thread(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """A checkpoint syncs the files: a write (a journal's flush, a run's end) neither makes one nor waits for one, nor
    for anything else the driver's thread is doing; the checkpoint comes behind them."""
    path = Path(sqlite_copy(sqlite_template, tmp_path / "muster.db").removeprefix("sqlite:///"))
    text = "x" * 2000  # a batch is about two pages of the log
    async with _store(path) as store:
        assert isinstance(store, SqliteRunStore)
        held = store._writer
        run_id = await _queue(store, new_run_id(), "a")  # the held connection opened
        gate = threading.Event()
        seq = 0
        async with anyio.create_task_group() as group:
            group.start_soon(on_driver_thread, held._driver, lambda _conn: gate.wait(60))
            # A write that waited for the busy driver's thread would hang until the gate opens.
            with anyio.fail_after(30):
                while _wal_frames(path) <= SQLITE_AUTOCHECKPOINT_PAGES + 100:
                    batch = [Observation(seq + n, NOW.isoformat(), "agent", {}, {"text": text}) for n in (1, 2, 3, 4)]
                    await store.append_events(run_id, batch)
                    seq += len(batch)
            # Past SQLite's automatic checkpoint size, and no write checkpointed (the log would have started over).
            assert held.checkpoints == 0 and seq // 4 > _Held.CHECKPOINT_EVERY
            gate.set()
        with anyio.fail_after(30):
            while held.checkpoints == 0:
                await anyio.sleep(0.01)
        assert len(await store.events_after(run_id, 0, limit=seq)) == seq
