"""One degraded remote agent never hides the others: through the client, ``muster mcp`` and ``muster a2a list``.

The healthy agent is a real a2a-sdk server; the degraded one resolves (its card is served) but answers every call
with something that is not JSON-RPC, until the service shows it ``degraded``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from muster_api.a2a.component import DEGRADED_AFTER
from muster_client import AsyncMusterClient
from tests.a2a.peers import a2a_peer, raw_peer
from tests.a2a.test_resolution import CARD, v1_card
from tests.client.support import API_KEY, live_service_in_thread
from tests.console.support import environment, piped
from tests.mcp.support import mcp_agent
from tests.mesh.support import ServerProcess

# Slow: a live service process, a `muster mcp` and a `muster` process.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
async def service(db_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    async with a2a_peer("Alpha") as alpha, raw_peer() as flaky:
        flaky.json(CARD, v1_card("Flaky", flaky.base + "/rpc"))
        flaky.text("/rpc", "[1, 2, 3]")  # not a JSON-RPC answer: every call fails
        agents: dict[str, dict[str, object]] = {"alpha": {"card": alpha.base}, "flaky": {"card": flaky.base}}
        async with live_service_in_thread(db_url, tmp_path, agents=agents) as server:
            async with AsyncMusterClient(server.base_url, api_key=API_KEY) as client:
                for _ in range(DEGRADED_AFTER):
                    assert (await client.a2a_call("Flaky_do", "x")).is_error
            yield server


async def test_a_degraded_agent_is_listed_beside_the_healthy_one(service: ServerProcess, tmp_path: Path) -> None:
    async with AsyncMusterClient(service.base_url, api_key=API_KEY) as client:
        listing = await client.a2a_agents()
    shown = {agent.name: agent.status for agent in listing.agents}
    assert shown == {"alpha": "ok", "flaky": "degraded"}
    assert {tool.name for tool in listing.tools()} == {"Alpha_echo", "Flaky_do"}

    async with mcp_agent(service.base_url, tmp_path / "mcp") as agent:
        with anyio.fail_after(60):
            tools = {tool.name for tool in (await agent.list_tools()).tools}
    assert {"Alpha_echo", "Flaky_do"} <= tools, tools

    env = environment(service.base_url, tmp_path / "home", MUSTER_API_KEY=API_KEY)
    listed = await anyio.to_thread.run_sync(piped, env, "a2a", "list")
    assert listed.code == 0, listed.err
    assert re.search(r"^alpha\s+ok\s+\S+\s+Alpha_echo", listed.out, re.M), listed.out
    assert re.search(r"^flaky\s+degraded\s+", listed.out, re.M), listed.out
