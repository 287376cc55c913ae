"""A wake the interval refuses is owed at the last wake plus ``wake_interval``: not an interval after the refused
message, which would keep the agent asleep up to twice as long as the interval asks."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import select

from muster_api.app import create_app
from muster_api.db.engine import create_engine
from muster_api.dispatch.sleepers import wake_prompt
from muster_api.dispatch.tables import sleepers
from muster_api.settings import Settings
from muster_client import MusterClient
from tests.runs.support import dispatch_env, write_config
from tests.runs.test_membership import roster_entry, until
from tests.support.live import live_server

pytestmark = [pytest.mark.anyio]

INTERVAL = 600  # long enough that the owed wake stays owed while the test reads it


def finished_runs(url: str) -> list[Any]:
    runs = httpx.get(f"{url}/dispatch/runs", params={"agent": "sleepy"}).json()["runs"]
    return [run for run in runs if run["status"] == "completed"]


async def sleeper_row(db_url: str) -> tuple[datetime | None, datetime | None]:
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        async with engine.connect() as conn:
            query = select(sleepers.c.last_wake_at, sleepers.c.wake_due_at).where(sleepers.c.agent_id == "sleepy")
            row = (await conn.execute(query)).one()
    finally:
        await engine.dispose()
    return row[0], row[1]


async def test_a_refused_wake_is_due_one_interval_after_the_last_wake(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    sleepy = {"kind": "custom", "entrypoint": "tests.runs.agents:fast", "wake": True, "wake_interval": INTERVAL}
    config = write_config(tmp_path / "muster.json", {"sleepy": sleepy})
    with live_server(create_app(Settings(database_url=db_url, config=config))) as url:
        await until(lambda: roster_entry(url, "sleepy"), "the sleeper on the roster")
        with MusterClient(url) as person:
            person.checkin("person", confirm=True)
            person.send("the first note", to="sleepy", confirm=True)
            [woken] = await until(lambda: finished_runs(url), "the first wake's run done")
            assert woken["prompt"] == wake_prompt(1)
            person.send("the second note, too soon", to="sleepy", confirm=True)
            with anyio.fail_after(60):
                while (row := await sleeper_row(db_url))[1] is None:  # the arrival settles, then the wake is owed
                    await anyio.sleep(0.05)
        last_wake, due = row
        assert last_wake is not None and due == last_wake + timedelta(seconds=INTERVAL)
        assert len(finished_runs(url)) == 1, "no second run inside the interval"
