"""Wake-ups of run readers: within an instance, across instances on PostgreSQL (carrying the rows when they fit),
across processes on one SQLite file."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.dispatch.component import run_store
from muster_api.dispatch.notify import (
    NEW_RUN,
    RunEnd,
    RunListener,
    RunNotifier,
    RunTail,
    RunWaiters,
    control_key,
    encode_rows,
)
from muster_api.dispatch.wakefiles import run_file
from muster_api.settings import Settings
from muster_dispatch import Observation

pytestmark = pytest.mark.anyio


async def test_a_commit_through_another_connection_wakes_a_reader_of_the_run(tmp_path: Path) -> None:
    url = Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}").database_url
    here, there = create_engine(url), create_engine(url)  # two processes' engines, as far as SQLite can tell
    try:
        await upgrade(here)
        notifier = RunNotifier(here)
        writer = run_store(there, RunNotifier(there))
        async with anyio.create_task_group() as group:
            await group.start(notifier.run)
            async with notifier.subscribe("run-1") as sub:
                await writer.append_events("run-1", [Observation(1, "2030-01-01T00:00:00+00:00", "agent", {}, {})])
                with anyio.fail_after(30):  # no other wake-up exists here: only the file watch can end this wait
                    await sub.wait()
            group.cancel_scope.cancel()
        await writer.aclose()
    finally:
        await here.dispose()
        await there.dispose()


async def test_a_wake_file_wakes_only_the_waiters_of_its_kind(tmp_path: Path) -> None:
    url = Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}").database_url
    here, there = create_engine(url), create_engine(url)
    try:
        await upgrade(here)
        notifier, other = RunNotifier(here), RunNotifier(there)
        assert notifier.shared
        async with anyio.create_task_group() as group:
            await group.start(notifier.run)
            async with notifier.subscribe(NEW_RUN) as idle, notifier.subscribe(control_key("run-1")) as steered:
                other.fire([control_key("run-1")])
                with anyio.fail_after(30):
                    await steered.wait()
                # One batch of changes wakes the waiters it names at once: the idle workers were not among them.
                assert notifier.tail(NEW_RUN).looks == 0
                other.fire([NEW_RUN])
                with anyio.fail_after(30):
                    await idle.wait()
                assert notifier.tail(control_key("run-1")).looks == 1
            group.cancel_scope.cancel()
    finally:
        await here.dispose()
        await there.dispose()


async def test_a_run_written_in_another_process_wakes_only_that_run_s_readers(tmp_path: Path) -> None:
    url = Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}").database_url
    here, there = create_engine(url), create_engine(url)
    try:
        await upgrade(here)
        notifier, other = RunNotifier(here), RunNotifier(there)
        async with anyio.create_task_group() as group:
            await group.start(notifier.run)
            async with notifier.subscribe("run-1") as first, notifier.subscribe("run-2") as second:
                other.fire(["run-1"])
                with anyio.fail_after(30):
                    await first.wait()
                assert notifier.tail("run-2").looks == 0
                other.fire(["run-2"])
                with anyio.fail_after(30):
                    await second.wait()
                assert notifier.tail("run-1").looks == 1
            group.cancel_scope.cancel()
        # A run's file is its bucket's, kept for the next writes.
        assert {path.name for path in (tmp_path / "m.db-wake").glob("run.*")} == {run_file("run-1"), run_file("run-2")}
    finally:
        await here.dispose()
        await there.dispose()


def _observations(first: int, count: int, text: str = "x") -> list[Observation]:
    return [
        Observation(seq, "2030-01-01T00:00:00+00:00", "agent", {}, {"text": text})
        for seq in range(first, first + count)
    ]


def test_an_instance_reads_only_the_notifications_of_runs_it_follows() -> None:
    """Every instance hears every run's rows; one that follows none of them goes no further than the run id (an
    unreadable rest would wake every reader, if it were read)."""
    waiters = RunWaiters()
    waiters.tails["run-2"] = RunTail()
    listener = RunListener(create_engine("postgresql+asyncpg://postgres@127.0.0.1:5432/none"), waiters)
    listener.handed('{"r":"run-1","o":[[1, unreadable')
    assert waiters.tails["run-2"].looks == 0
    listener.handed(listener.handing("run-2", encode_rows(_observations(1, 2)), None).partition("|")[2])
    assert [o.seq for o in waiters.tails["run-2"].since(0) or []] == [1, 2]
    listener.handed('{"r":"run-2","o":[[1, unreadable')  # a followed run's rows that cannot be read: read the rows
    assert waiters.tails["run-2"].looks == 1


def test_a_tail_hands_over_only_what_continues_a_cursor_exactly() -> None:
    tail = RunTail()
    tail.add(_observations(1, 3), None)
    assert [o.seq for o in tail.since(0) or []] == [1, 2, 3]
    assert [o.seq for o in tail.since(2) or []] == [3]
    assert tail.since(3) is None  # nothing new: only the rows can say whether the run went on
    tail.add(_observations(6, 2), None)  # 4 and 5 never handed over: what came before the gap is dropped
    assert tail.since(3) is None
    assert [o.seq for o in tail.since(5) or []] == [6, 7]
    tail.add([], RunEnd(7, "{}"))
    assert tail.since(7) == []  # the handed end: nothing more will come


async def test_a_journal_write_hands_its_rows_to_a_reader_of_the_same_instance(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        notifier = RunNotifier(engine)
        store = run_store(engine, notifier)
        async with anyio.create_task_group() as group:
            await group.start(notifier.run)
            async with notifier.subscribe("run-1") as sub:
                await store.append_events("run-1", _observations(1, 2))
                with anyio.fail_after(30):
                    await sub.wait()
                assert [o.seq for o in notifier.tail("run-1").since(0) or []] == [1, 2]
            group.cancel_scope.cancel()
        await store.aclose()
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_another_instance_gets_the_rows_in_the_notification_when_they_fit(pg_db_url: str) -> None:
    url = Settings(database_url=pg_db_url).database_url
    here, there = create_engine(url), create_engine(url)
    try:
        reader, writer_notifier = RunNotifier(here), RunNotifier(there)
        writer = run_store(there, writer_notifier)
        async with anyio.create_task_group() as group:
            await group.start(reader.run)
            await group.start(writer_notifier.run)
            async with reader.subscribe("run-1") as sub:
                tail = reader.tail("run-1")
                await writer.append_events("run-1", _observations(1, 2))
                with anyio.fail_after(30):
                    await sub.wait()
                assert [o.to_dict() for o in tail.since(0) or []] == [o.to_dict() for o in _observations(1, 2)]
                assert tail.looks == 0
                # Too large for a NOTIFY payload: the wake-up names the run, and its reader must read the rows.
                await writer.append_events("run-1", _observations(3, 1, "y" * 8000))
                with anyio.fail_after(30):
                    await sub.wait()
                assert tail.looks == 1
                assert tail.since(2) is None
            group.cancel_scope.cancel()
        await writer.aclose()
    finally:
        await here.dispose()
        await there.dispose()
