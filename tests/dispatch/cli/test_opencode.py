"""The REAL OpenCode CLI (pinned, installed by the bootstrap) against the fake OpenAI Responses server.

OpenCode reads its provider from the opencode.json the harness writes into the private home; the tests pass the
fake's URL through the agent variables documented by the harness.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from muster_dispatch import AgentEvent, Continuation, cli_agent, local_provider, opencode_harness, quota_fault
from muster_dispatch.agents import CliAgent
from tests.dispatch.cli.support import assistant_texts, new_marker, processes_with, run_turn, user_texts
from tests.dispatch.fakes import openai
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Fail, Reply, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

KEY_VAR = "MUSTER_FAKE_OPENAI_KEY"


def opencode_agent(executable: Path, base_url: str, *, extra: dict[str, str] | None = None) -> CliAgent:
    variables = {
        "MUSTER_OPENCODE_BASE_URL": f"{base_url}/v1",
        "MUSTER_OPENCODE_MODEL": openai.MODEL,
        "MUSTER_OPENCODE_ENV_KEY": KEY_VAR,
        KEY_VAR: "sk-test-key",
    }
    variables.update(extra or {})
    return cli_agent(opencode_harness(executable=executable), variables=variables)


async def test_text_turn(opencode_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path) -> None:
    fake_openai.script.plan(Reply(text="Hello from the fake model.", input_tokens=120, output_tokens=30))
    root = tmp_path / "sandboxes"

    turn = await run_turn(opencode_agent(opencode_cli, fake_openai.url), "Say hello", workspace, local_provider(root))

    result = turn.result
    assert result.status == "completed", result.error
    assert result.text == "Hello from the fake model."
    assert result.conversation and result.conversation.startswith("ses_")
    assert (result.usage.input, result.usage.output) == (120, 30)
    assert turn.of("finished")
    (request,) = fake_openai.script.model_requests()
    assert "Say hello" in user_texts(request)
    # The private home got OpenCode's files; the workspace and the real home did not.
    assert list(root.rglob("opencode.json")) and list(root.rglob("opencode.db"))
    assert not (workspace / ".opencode").exists()


async def test_tool_turn(opencode_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path) -> None:
    call = ToolCall(name="bash", arguments={"command": "echo muster-tool-ok", "description": "echo"})
    fake_openai.script.plan(Reply(tool=call), Reply(text="The command printed it."))

    turn = await run_turn(
        opencode_agent(opencode_cli, fake_openai.url), "Run echo", workspace, local_provider(tmp_path / "s")
    )

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "The command printed it."
    (tool,) = turn.of("tool")
    assert tool.name == "bash" and "echo muster-tool-ok" in str(tool.input)
    (result,) = turn.of("tool_result")
    assert result.id == tool.id and "muster-tool-ok" in str(result.output)
    # Two steps, each with its own tokens: the turn's usage is their sum.
    assert (turn.result.usage.input, turn.result.usage.output) == (240, 60)
    assert len(turn.of("finished")) == 1  # the tool step ended in "tool-calls", not "stop"


async def test_continued_turn_and_fork(
    opencode_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(Reply(text="Noted: apple."), Reply(text="The word was apple."), Reply(text="Forked."))
    agent = opencode_agent(opencode_cli, fake_openai.url)
    provider = local_provider(tmp_path / "s")
    first = await run_turn(agent, "Remember the word apple", workspace, provider)
    session = first.result.conversation
    assert first.result.status == "completed" and session

    second = await run_turn(agent, "Which word?", workspace, provider, continuation=Continuation(session))

    assert second.result.status == "completed", second.result.error
    assert second.result.conversation == session
    assert "Noted: apple." in assistant_texts(fake_openai.script.model_requests()[-1])

    child = await run_turn(agent, "And now?", workspace, provider, continuation=Continuation(session, fork=True))

    assert child.result.status == "completed", child.result.error
    assert child.result.conversation and child.result.conversation != session
    history = assistant_texts(fake_openai.script.model_requests()[-1])
    assert "Noted: apple." in history and "The word was apple." in history


async def test_quota(opencode_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path) -> None:
    body = openai.error_body("insufficient_quota", "You exceeded your current quota, please check your plan.")
    fake_openai.script.plan(Fail(429, body, headers={"retry-after": "0"}, times=None))

    turn = await run_turn(
        opencode_agent(opencode_cli, fake_openai.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "quota", result.error
    assert quota_fault(result.error) is not None
    assert "exceeded your current quota" in result.error.message


async def test_transient_error_recovers(
    opencode_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(Fail(500, openai.error_body("server_error", "boom"), headers={"retry-after": "0"}))
    fake_openai.script.plan(Reply(text="Recovered."))

    turn = await run_turn(
        opencode_agent(opencode_cli, fake_openai.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Recovered."
    assert not turn.of("failure")
    assert [r.answered for r in fake_openai.script.model_requests()] == ["fail:500", "reply"]


async def test_outage_is_stopped_at_the_deadline_without_orphans(
    opencode_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    """A 5xx that never ends: OpenCode retries it without end, so only the deadline stops the turn."""
    fake_openai.script.plan(openai.overloaded(None))
    marker = new_marker()
    seen: list[int] = []

    async def look(event: AgentEvent, running: Any) -> None:
        if not seen:
            seen.extend(processes_with(marker))

    agent = opencode_agent(opencode_cli, fake_openai.url, extra=marker)
    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "s"), deadline=10, on_event=look)

    assert turn.result.error is not None and turn.result.error.code == "timeout", turn.result.error
    leftovers = processes_with(marker)
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    assert leftovers == [], "processes of the stopped opencode are still running"


async def test_cancel_leaves_no_process(
    opencode_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_openai.script.plan(Reply(text="Too late.", gate=gate))
    marker = new_marker()
    seen: list[int] = []

    async def cancel_once_asked(event: AgentEvent, running: Any) -> None:
        if seen:
            return
        with anyio.fail_after(60):
            while not fake_openai.script.model_requests():
                await anyio.sleep(0.05)
        seen.extend(processes_with(marker))
        await running.cancel()

    try:
        agent = opencode_agent(opencode_cli, fake_openai.url, extra=marker)
        turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "s"), on_event=cancel_once_asked)
    finally:
        gate.set()

    assert seen, "OpenCode was not running when the turn was canceled"
    assert turn.result.status == "canceled", turn.result
    assert turn.result.text != "Too late."
    leftovers = processes_with(marker)
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    assert leftovers == [], "processes of the canceled opencode are still running"
