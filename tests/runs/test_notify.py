"""Wake-ups across processes on one SQLite file: another connection's commit wakes this process's run readers."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.dispatch.notify import RunNotifier
from muster_api.dispatch.store import run_store
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
    finally:
        await here.dispose()
        await there.dispose()
