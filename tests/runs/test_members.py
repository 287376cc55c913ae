"""``GET /dispatch/members``: the dispatch agents that are mesh members, each with its running run, whether it wakes
by message and the role it serves; an agent that is no member is not listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import select

from muster_api.app import create_app
from muster_api.db.engine import create_engine
from muster_api.dispatch.sleepers import ASLEEP, wake_prompt
from muster_api.dispatch.tables import sleepers
from muster_api.settings import Settings
from muster_client import MusterClient
from tests.runs.support import dispatch_env, finished, start, write_config
from tests.runs.test_membership import roster_entry, until
from tests.support.live import live_server

pytestmark = [pytest.mark.anyio]

AGENTS = {
    "sleepy": {"kind": "custom", "entrypoint": "tests.runs.agents:fast", "wake": True},
    "reviewer": {"kind": "custom", "entrypoint": "tests.runs.agents:fast", "serve_tasks": {"role": "reviewer"}},
    "worker": {"kind": "custom", "entrypoint": "tests.runs.agents:hold", "mesh": {"agent_id": "builder"}},
    "plain": {"kind": "custom", "entrypoint": "tests.runs.agents:fast"},
}


def members(url: str) -> dict[str, Any]:
    with httpx.Client(base_url=url) as plain:
        response = plain.get("/dispatch/members")
    assert response.status_code == 200, response.text
    return {member["agent_id"]: member for member in response.json()["members"]}


async def test_members_say_running_asleep_or_serving(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dispatch_env(monkeypatch, tmp_path)
    config = write_config(tmp_path / "muster.json", AGENTS)
    with live_server(create_app(Settings(database_url=db_url, config=config))) as url:
        found = members(url)
        assert set(found) == {"sleepy", "reviewer", "builder"}, "a plain agent is no member"
        assert found["sleepy"] == {
            "agent_id": "sleepy",
            "name": "sleepy",
            "running": None,
            "run_status": None,
            "wake": True,
            "serving": None,
        }
        assert found["reviewer"]["serving"] == "reviewer" and found["reviewer"]["wake"] is False
        assert found["builder"]["name"] == "worker" and found["builder"]["running"] is None
        sleeper = await until(lambda: roster_entry(url, "sleepy"), "the sleeper on the roster")
        assert sleeper.status == ASLEEP
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            run = await start(client, agent="worker", prompt="gate", workspace="site")
            await until(lambda: members(url)["builder"]["running"] == run["id"], "the running run listed")
            (root / "site" / "gate").write_text("go", encoding="utf-8")
            await finished(client, run["id"])
        assert members(url)["builder"]["running"] is None, "a finished run is no longer running"
        with MusterClient(url) as rest:
            typed = {member.agent_id: member for member in rest.dispatch_members().members}
        assert typed["sleepy"].wake and typed["reviewer"].serving == "reviewer"


async def test_a_queued_run_is_the_agents_active_run_for_the_roster_and_for_the_wake(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker held by another agent's run: the sleeper's run waits queued. The roster lists it as the agent's
    active run (queued), and a message meanwhile is owed to that run's end — not a second run beside it."""
    root = dispatch_env(monkeypatch, tmp_path, workers=1)
    agents = {**AGENTS, "sleepy": {"kind": "custom", "entrypoint": "tests.runs.agents:hold", "wake": True}}
    config = write_config(tmp_path / "muster.json", agents)
    with live_server(create_app(Settings(database_url=db_url, config=config))) as url:
        await until(lambda: roster_entry(url, "sleepy"), "the sleeper on the roster")
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            blocker = await start(client, agent="worker", prompt="gate", workspace="site")
            await until(lambda: members(url)["builder"]["run_status"] == "running", "the worker busy")
            queued = await start(client, agent="sleepy", prompt="gate", workspace="nest")
            assert members(url)["sleepy"] == {
                "agent_id": "sleepy",
                "name": "sleepy",
                "running": queued["id"],
                "run_status": "queued",
                "wake": True,
                "serving": None,
            }
            with MusterClient(url) as person:
                person.checkin("person", confirm=True)
                answer = person.send("a body", to="sleepy", confirm=True)
            assert getattr(answer, "wake", None) == "scheduled"
            with anyio.fail_after(60):
                while not await _owed(db_url):  # the arrival settles, then the wake decides
                    await anyio.sleep(0.05)
            (root / "nest" / "gate").write_text("go", encoding="utf-8")
            (root / "site" / "gate").write_text("go", encoding="utf-8")
            await finished(client, blocker["id"])
            await finished(client, queued["id"])
            woken = await until(lambda: len(found := _runs(url, "sleepy")) == 2 and found, "the owed wake's run")
        assert woken[0]["id"] == queued["id"] and woken[1]["prompt"] == wake_prompt(1)


def _runs(url: str, agent: str) -> list[Any]:
    runs = httpx.get(f"{url}/dispatch/runs", params={"agent": agent}).json()["runs"]
    return sorted(runs, key=lambda run: run["id"])


async def _owed(db_url: str) -> bool:
    """The sleeper's wake is owed to the end of its active run (its row's ``pending``)."""
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        async with engine.connect() as conn:
            return bool(await conn.scalar(select(sleepers.c.pending).where(sleepers.c.agent_id == "sleepy")))
    finally:
        await engine.dispose()
