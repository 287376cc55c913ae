"""Tool calls against real a2a-sdk servers: v1.0 JSON-RPC, v1.0 HTTP+JSON and the v0.3 compatibility layer."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from muster_a2a import INPUT_SCHEMA, CardCache, Progress, RemoteAgent, agent_tools, remote_agent
from tests.a2a.peers import Peer, a2a_peer

pytestmark = pytest.mark.anyio

# "stream": a v1.0 JSON-RPC server whose card says streaming, so every scenario also runs over SSE.
KINDS = ["jsonrpc", "rest", "v03", "v03rest", "stream"]
DIALECTS = {
    "jsonrpc": "v1.0/JSONRPC",
    "rest": "v1.0/HTTP+JSON",
    "v03": "v0.3/JSONRPC",
    "v03rest": "v0.3/HTTP+JSON",
    "stream": "v1.0/JSONRPC",
}


@pytest.fixture(scope="module", params=KINDS)
async def peer(request: pytest.FixtureRequest) -> AsyncIterator[Peer]:
    kind = "jsonrpc" if request.param == "stream" else request.param
    async with a2a_peer(f"Scripted {request.param}", kind=kind, streaming=request.param == "stream") as running:
        yield running


async def resolve(peer: Peer, **kwargs: object) -> RemoteAgent:
    kwargs.setdefault("poll_every", 20)
    kwargs.setdefault("card_cache", CardCache())
    agent = await remote_agent(peer.base, **kwargs)  # type: ignore[arg-type]
    assert agent.error is None, agent.error
    return agent


def kind_of(peer: Peer) -> str:
    return peer.card.name.removeprefix("Scripted ")


async def test_card_endpoint_dialect_and_tools(peer: Peer) -> None:
    agent = await resolve(peer)
    assert agent.card is not None and agent.card.name == peer.card.name
    assert agent.dialect == DIALECTS[kind_of(peer)]
    assert agent.endpoint == peer.card.supported_interfaces[0].url
    [tool] = agent.tools
    assert tool.name == f"Scripted_{kind_of(peer)}_echo"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool.name)
    assert (
        tool.input_schema
        == INPUT_SCHEMA
        == {
            "type": "object",
            "properties": {"task": {"type": "string"}},
            "required": ["task"],
        }
    )
    assert peer.card.name in tool.description and "Echo" in tool.description


async def test_completes_with_artifacts(peer: Peer) -> None:
    [tool] = (await resolve(peer)).tools
    result = await tool.call("complete the answer")
    assert not result.is_error, result.text
    assert result.text == "the answer\nsecond part"
    meta = result.metadata
    assert set(meta) == {"agent", "task_id", "context_id", "state", "polls", "ms", "dialect"}
    assert meta["state"] == "completed" and meta["dialect"] == DIALECTS[kind_of(peer)]
    assert meta["task_id"] and meta["context_id"]
    assert meta["polls"] >= 1 if kind_of(peer) != "stream" else meta["polls"] == 0


async def test_answer_only_in_status_message(peer: Peer) -> None:
    [tool] = (await resolve(peer)).tools
    result = await tool.call("status only here")
    assert (result.text, result.is_error) == ("only here", False)


async def test_answer_only_in_history(peer: Peer) -> None:
    [tool] = (await resolve(peer)).tools
    result = await tool.call("history said before")
    assert (result.text, result.is_error) == ("said before", False)


async def test_direct_message_answer(peer: Peer) -> None:
    [tool] = (await resolve(peer)).tools
    result = await tool.call("message hi there")
    assert (result.text, result.is_error) == ("hi there", False)
    assert result.metadata["polls"] == 0


@pytest.mark.parametrize(("command", "state"), [("fail", "failed"), ("reject", "rejected"), ("cancel", "canceled")])
async def test_unsuccessful_terminal_states(peer: Peer, command: str, state: str) -> None:
    [tool] = (await resolve(peer)).tools
    result = await tool.call(f"{command} no way")
    assert result.is_error
    task_id = result.metadata["task_id"]
    assert result.text == f"A2A task {task_id} {state}: no way"
    assert result.metadata["state"] == state


@pytest.mark.parametrize(("command", "state"), [("input", "input-required"), ("auth", "auth-required")])
async def test_interrupted_stops_and_reports(peer: Peer, command: str, state: str) -> None:
    agent = await resolve(peer, timeout=60_000)
    [tool] = agent.tools
    result = await tool.call(f"{command} which colour?")
    task_id = result.metadata["task_id"]
    assert result.metadata["state"] == state
    assert result.text == f"A2A task {task_id} {state}: which colour?"
    # Stopped at once (a few polls at most), not polled until the one-minute timeout.
    assert result.metadata["polls"] <= 3
    if command == "input":
        follow_up = await tool.call("blue", task_id=task_id, context_id=result.metadata["context_id"])
        assert (follow_up.text, follow_up.metadata["task_id"]) == ("got blue", task_id)


async def test_timeout_cancels_the_remote_task(peer: Peer) -> None:
    # Long enough for the task to exist even on a loaded machine: the timeout must meet a working
    # task, whose cancellation the server then sees.
    [tool] = (await resolve(peer, timeout=2000)).tools
    result = await tool.call("slow 30")
    task_id = result.metadata["task_id"]
    assert result.is_error
    assert result.text.startswith(f"A2A task {task_id} timed out after 2000ms (state=working)")
    assert task_id in peer.executor.cancelled, "the server must have seen the CancelTask"
    assert result.metadata["state"] == "canceled"


async def test_a_handle_that_arrives_after_the_budget_is_still_cancelled(peer: Peer) -> None:
    # The peer answers the send only after the whole budget: a timeout that gave up on the send would never learn
    # the task's id, and the task would work on unseen. The call waits for the handle and cancels that task.
    [tool] = (await resolve(peer, timeout=200)).tools
    result = await tool.call("late 1")
    task_id = result.metadata["task_id"]
    assert result.is_error and task_id, result.text
    assert result.text.startswith(f"A2A task {task_id} timed out after 200ms")
    assert task_id in peer.executor.cancelled, "the server must have seen the CancelTask"
    assert result.metadata["state"] == "canceled"


async def test_progress_reports_the_handle_before_the_end(peer: Peer) -> None:
    [tool] = (await resolve(peer)).tools
    seen: list[Progress] = []

    async def record(progress: Progress) -> None:
        seen.append(progress)

    result = await tool.call("slow 0.1", on_progress=record)
    assert seen and seen[0].task_id == result.metadata["task_id"]
    assert seen[0].state in ("submitted", "working")
    assert seen[-1].state == "completed"


async def test_agent_tools_is_just_the_tools(peer: Peer) -> None:
    tools = await agent_tools(peer.card_url, pollEvery=20, card_cache=CardCache())
    assert [t.name for t in tools] == [f"Scripted_{kind_of(peer)}_echo"]
    assert await agent_tools("http://127.0.0.1:1/nothing") == []


async def test_streaming_card_is_followed_by_stream() -> None:
    async with a2a_peer("Streamer", streaming=True) as peer:
        agent = await resolve(peer, poll_every=60_000)
        [tool] = agent.tools
        result = await tool.call("slow 0.2")
        assert (result.text, result.metadata["state"]) == ("done", "completed")
        # With a one-minute poll interval only the stream can have finished this call so soon.
        assert result.metadata["polls"] == 0
        assert result.metadata["ms"] < 30_000
        sends = [h for h in peer.seen_headers if h.get("accept") == "text/event-stream"]
        assert sends, "the call must have used the streaming method"


async def test_streaming_timeout_cancels() -> None:
    async with a2a_peer("Streamer", streaming=True) as peer:
        [tool] = (await resolve(peer, timeout=300)).tools
        result = await tool.call("slow 30")
        assert result.is_error and "timed out after 300ms" in result.text
        assert result.metadata["task_id"] in peer.executor.cancelled


async def test_version_header_per_dialect(peer: Peer) -> None:
    [tool] = (await resolve(peer)).tools
    before = len(peer.seen_headers)
    await tool.call("complete x")
    versions = {h.get("a2a-version") for h in peer.seen_headers[before:]}
    assert versions == ({"0.3"} if kind_of(peer).startswith("v03") else {"1.0"})
