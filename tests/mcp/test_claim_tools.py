"""The claim and task tools through the official MCP client against ``muster mcp`` and a real service: describe
their rules, preview then confirm, conflicts named with holder and reason, a task claimed and finished."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from muster_client import MusterClient
from tests.client.support import API_KEY
from tests.mcp.support import call, mcp_agent
from tests.mesh.support import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_claim_check_release_and_a_task_through_mcp(service: ServerProcess, tmp_path: Path, name: str) -> None:
    me = f"{name}-me"
    with MusterClient(service.base_url, api_key=API_KEY) as rest:
        other = rest.checkin(f"{name}-other", repo=name, confirm=True)
        assert getattr(other, "token", None)
        rest.token = other.token  # type: ignore[union-attr]
        rest.claim_paths(["db/**"], reason="migrating", confirm=True)
        async with mcp_agent(service.base_url, tmp_path) as agent:
            listing = {t.name: t.description or "" for t in (await agent.list_tools()).tools}
            for rule in ("lease expires", "check out", "confirm: true", "absolute"):
                assert rule in listing["claim_paths"], rule
            assert "stale_claim" in listing["task_update"]
            await call(agent, "agent_checkin", agent_id=me, role="builder", repo=name, confirm=True)
            preview = await call(agent, "claim_paths", paths=["src/**", "db/schema.sql"])
            assert preview.startswith("Preview") and rest.claims(agent=me).claims == []
            done = await call(agent, "claim_paths", paths=["src/**", "db/schema.sql"], reason="feature", confirm=True)
            assert "1 granted: src/**" in done and f"held by {name}-other" in done and "migrating" in done
            assert [c.pattern for c in rest.claims(agent=me).claims] == ["src/**"]
            roster = await call(agent, "agents_list", repo=name)
            assert f"{name}-other — " in roster and "holds 1 path claim(s)" in roster
            checked = await call(agent, "check_paths", repo=name, paths=["db/a.sql", "src/a.py"])
            assert f"db/a.sql: held by {name}-other" in checked and "src/a.py: free" in checked
            assert "Released: src/**" in await call(agent, "release_paths", paths=["src/**"], confirm=True)
            posted = await call(agent, "task_post", title="build", body="make it", role="builder", confirm=True)
            assert posted.startswith("posted task")
            claimed = await call(agent, "task_claim", confirm=True)
            found = re.search(r"task ([0-9a-f]{32}) .*token (\d+)", claimed)
            assert found is not None
            finished = await call(
                agent, "task_update", task_id=found[1], action="done", token=int(found[2]), text="ok", confirm=True
            )
            assert "state done" in finished
