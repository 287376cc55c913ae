"""``GET /dispatch/members``: the dispatch agents that are mesh members, each with its running run, whether it wakes
by message and the role it serves; an agent that is no member is not listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from muster_api.app import create_app
from muster_api.dispatch.sleepers import ASLEEP
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
