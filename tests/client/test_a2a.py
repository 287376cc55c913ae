"""The A2A routes through the client: the configured agents and their tools, calls waited for or followed, an
interrupted task (input-required) reported with its state, against a real a2a-sdk server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from muster_client import A2ACall, AsyncMusterClient, Conflict, InvalidRequest, NotFound
from tests.a2a.peers import Peer, a2a_peer
from tests.client.support import API_KEY, live_service_in_thread
from tests.mesh.support import ServerProcess

# Slow: a live service process.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASK_SCHEMA = {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}


@pytest.fixture(scope="module")
async def peer() -> AsyncIterator[Peer]:
    async with a2a_peer("Alpha") as alpha:
        yield alpha


@pytest.fixture(scope="module")
async def service(db_url: str, tmp_path_factory: pytest.TempPathFactory, peer: Peer) -> AsyncIterator[ServerProcess]:
    agents: dict[str, dict[str, object]] = {"alpha": {"card": peer.base, "pollEvery": 20}}
    async with live_service_in_thread(db_url, tmp_path_factory.mktemp("config"), agents=agents) as server:
        yield server


async def test_agents_and_calls(service: ServerProcess) -> None:
    async with AsyncMusterClient(service.base_url, api_key=API_KEY) as client:
        listing = await client.a2a_agents()
        [alpha] = listing.agents
        assert (alpha.name, alpha.status, alpha.dialect) == ("alpha", "ok", "v1.0/JSONRPC")
        [tool] = listing.tools()
        assert tool.name == "Alpha_echo" and tool.input_schema == TASK_SCHEMA

        done = await client.a2a_call("Alpha_echo", "complete all good")
        assert (done.text, done.is_error, done.state) == ("all good\nsecond part", False, "completed")

        asking = await client.a2a_call("Alpha_echo", "input which branch?")
        assert asking.state == "input-required" and "which branch?" in asking.text
        task_id, context_id = asking.metadata["task_id"], asking.metadata["context_id"]
        answered = await client.a2a_call("Alpha_echo", "main", task_id=task_id, context_id=context_id)
        assert (answered.text, answered.state, answered.metadata["task_id"]) == ("got main", "completed", task_id)

        # Answered by its call id: the asking call's record then says how its task went on, and takes no second answer.
        asking = await client.a2a_call("Alpha_echo", "input which remote?")
        answered = await client.a2a_call("Alpha_echo", "origin", continues=asking.call_id)
        assert (answered.text, answered.metadata["task_id"]) == ("got origin", asking.metadata["task_id"])
        asked = await client.a2a_get_call(asking.call_id)
        assert asked.state == "completed" and asked.result is not None
        assert asked.result.metadata["continued_by"] == answered.call_id and asked.result.text == asking.text
        with pytest.raises(Conflict) as twice:
            await client.a2a_call("Alpha_echo", "again", continues=asking.call_id)
        assert twice.value.code == "not_continuable" and "its task is completed" in twice.value.detail
        with pytest.raises(NotFound):
            await client.a2a_call("Alpha_echo", "x", continues="0123abcd")
        with pytest.raises(InvalidRequest) as both:
            await client.a2a_call("Alpha_echo", "x", continues=asking.call_id, task_id=task_id)
        assert [e["field"] for e in both.value.errors] == ["continues"]
        again = await client.a2a_call("Alpha_echo", "input which tag?")
        following = await client.a2a_start(
            "Alpha_echo", "v2", task_id=again.metadata["task_id"], context_id=again.metadata["context_id"]
        )
        with anyio.fail_after(20):
            while (continued := await client.a2a_get_call(following.id)).result is None:
                await anyio.sleep(0.05)
        assert continued.result.text == "got v2" and continued.task_id == again.metadata["task_id"]

        started = await client.a2a_start("Alpha_echo", "slow 0.2")
        assert isinstance(started, A2ACall) and started.result is None
        with anyio.fail_after(20):
            while (stored := await client.a2a_get_call(started.id)).result is None:
                await anyio.sleep(0.05)
        assert stored.result.text == "done" and stored.state == "completed"

        reloaded = await client.a2a_reload()
        assert [a.name for a in reloaded.agents] == ["alpha"]
