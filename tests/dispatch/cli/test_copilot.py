"""The REAL GitHub Copilot CLI (pinned, installed by the bootstrap) against the fake model servers.

Copilot talks to a custom provider through its own ``COPILOT_PROVIDER_*`` variables, given as agent variables; the
harness turns on its offline mode, so no GitHub login is needed. Most tests drive it over Anthropic messages; one
over the OpenAI Responses API. The agents run the bootstrap's pinned CLI (no executable override), as a user's do.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from muster_dispatch import (
    AgentEvent,
    Continuation,
    MemoryConversationStore,
    cli_agent,
    copilot_harness,
    local_provider,
    quota_fault,
    unavailable_fault,
)
from muster_dispatch.agents import CliAgent
from tests.dispatch.cli.support import assistant_texts, new_marker, processes_with, run_turn, user_texts
from tests.dispatch.fakes import anthropic, openai
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

MODEL = "claude-sonnet-4-5"


def copilot_agent(base_url: str, *, extra: dict[str, str] | None = None, storage: Any = None) -> CliAgent:
    variables = {
        "COPILOT_PROVIDER_TYPE": "anthropic",
        "COPILOT_PROVIDER_BASE_URL": base_url,
        "COPILOT_PROVIDER_API_KEY": "sk-ant-test-key",
        "COPILOT_MODEL": MODEL,
    }
    variables.update(extra or {})
    return cli_agent(copilot_harness(), variables=variables, storage=storage)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


async def test_text_turn_in_a_private_home(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The user's home for this test: nothing of Copilot's may land in it.
    real_home = tmp_path / "real-home"
    real_home.mkdir()
    monkeypatch.setenv("MUSTER_CLI_CACHE", str(copilot_cli.parents[3]))
    monkeypatch.setenv("HOME", str(real_home))
    fake_anthropic.script.plan(Reply(text="Hello from the fake model.", input_tokens=120, output_tokens=30))
    root = tmp_path / "sandboxes"

    turn = await run_turn(copilot_agent(fake_anthropic.url), "Say hello", workspace, local_provider(root))

    result = turn.result
    assert result.status == "completed", result.error
    assert result.text == "Hello from the fake model."
    assert result.conversation and len(result.conversation) == 36  # a UUID
    assert (result.usage.input, result.usage.output) == (120, 30) and result.usage.complete
    assert turn.of("finished") and turn.of("text_delta")
    (request,) = fake_anthropic.script.model_requests()
    assert "Say hello" in " ".join(user_texts(request))
    assert request.credential == "sk-ant-test-key"
    # The session went to the private home; the package unpacked beside the pinned install, not into any home.
    assert list(root.rglob(f"session-state/{result.conversation}/events.jsonl"))
    assert not list(root.rglob(".cache/copilot"))
    assert (copilot_cli.parents[2] / "unpacked").is_dir()
    assert list(real_home.iterdir()) == []
    assert list(workspace.iterdir()) == []


async def test_tool_turn_and_file_change(copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path) -> None:
    target = workspace / "hello.txt"
    fake_anthropic.script.plan(
        Reply(tool=ToolCall(name="bash", arguments={"command": "echo muster-tool-ok", "description": "echo"})),
        Reply(tool=ToolCall(name="create", call_id="call_2", arguments={"path": str(target), "file_text": "hi\n"})),
        Reply(text="Done."),
    )

    turn = await run_turn(
        copilot_agent(fake_anthropic.url), "-x: run echo, write", workspace, local_provider(workspace.parent / "s")
    )

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Done."
    bash, create = turn.of("tool")
    assert bash.name == "bash" and "echo muster-tool-ok" in str(bash.input)
    echoed, created = turn.of("tool_result")
    assert echoed.id == bash.id and "muster-tool-ok" in str(echoed.output) and echoed.code is None
    assert created.id == create.id
    (change,) = turn.of("file_change")
    assert change.data == {"path": str(target), "kind": "create"}
    assert target.read_text() == "hi\n"
    # A prompt that starts with "-" is still the prompt.
    assert "-x: run echo, write" in " ".join(user_texts(fake_anthropic.script.model_requests()[0]))
    # Three model calls of 120 in and 30 out each, read from the session's own record.
    assert (turn.result.usage.input, turn.result.usage.output) == (360, 90)


async def test_continued_turn_sees_the_earlier_one(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(Reply(text="Noted: apple."), Reply(text="The word was apple.", input_tokens=200))
    agent = copilot_agent(fake_anthropic.url)
    provider = local_provider(tmp_path / "s")
    first = await run_turn(agent, "Remember the word apple", workspace, provider)
    session = first.result.conversation
    assert first.result.status == "completed" and session

    second = await run_turn(agent, "Which word?", workspace, provider, continuation=Continuation(session))

    assert second.result.status == "completed", second.result.error
    assert second.result.conversation == session
    assert second.result.text == "The word was apple."
    assert "Noted: apple." in assistant_texts(fake_anthropic.script.model_requests()[-1])
    # This turn's usage only, not the session's running total.
    assert (second.result.usage.input, second.result.usage.output) == (200, 30)


async def test_cold_resume_in_a_new_private_home(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    """The session is captured after the first turn and written into another home for the second (another worker)."""
    fake_anthropic.script.plan(Reply(text="Noted: pear."), Reply(text="The word was pear."))
    agent = copilot_agent(fake_anthropic.url, storage=MemoryConversationStore())
    first = await run_turn(agent, "Remember the word pear", workspace, local_provider(tmp_path / "one"))
    session = first.result.conversation
    assert first.result.status == "completed" and session

    second = await run_turn(
        agent, "Which word?", workspace, local_provider(tmp_path / "two"), continuation=Continuation(session)
    )

    assert second.result.status == "completed", second.result.error
    assert second.result.conversation == session and second.result.text == "The word was pear."
    assert "Noted: pear." in assistant_texts(fake_anthropic.script.model_requests()[-1])
    assert list((tmp_path / "two").rglob(f"session-state/{session}/events.jsonl"))


async def test_fork_is_refused_before_a_process_starts(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    agent = copilot_agent(fake_anthropic.url)
    continuation = Continuation("0b7c1d1e-8a4e-4c52-9f0a-2f7d3a1e5b6c", fork=True)

    turn = await run_turn(agent, "Go", workspace, local_provider(tmp_path / "s"), continuation=continuation)

    assert turn.result.status == "failed"
    assert turn.result.error is not None and "cannot fork" in turn.result.error.message
    assert fake_anthropic.script.requests == []


async def test_quota(copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path) -> None:
    fake_anthropic.script.plan(anthropic.rate_limited(None))

    turn = await run_turn(copilot_agent(fake_anthropic.url), "Say hello", workspace, local_provider(tmp_path / "s"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "quota", result.error
    assert quota_fault(result.error) is not None
    assert "rate limit" in result.error.message
    assert turn.of("retry")  # Copilot's own retries came first, each a notice, not a failure
    assert len(fake_anthropic.script.model_requests()) > 1


async def test_outage_is_unavailable(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(anthropic.overloaded(None))

    turn = await run_turn(copilot_agent(fake_anthropic.url), "Say hello", workspace, local_provider(tmp_path / "s"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code != "quota", result.error
    assert unavailable_fault(result.error) is not None and quota_fault(result.error) is None
    assert "529" in result.error.message


async def test_transient_error_recovers(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(anthropic.server_error(times=1), Reply(text="Recovered."))

    turn = await run_turn(copilot_agent(fake_anthropic.url), "Say hello", workspace, local_provider(tmp_path / "s"))

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Recovered."
    assert turn.of("retry") and not turn.of("failure")
    assert [r.answered for r in fake_anthropic.script.model_requests()] == ["fail:500", "reply"]


async def test_text_turn_over_the_openai_responses_api(
    copilot_cli: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(Reply(text="Hello over Responses.", input_tokens=50, output_tokens=7))
    agent = copilot_agent(
        f"{fake_openai.url}/v1",
        extra={
            "COPILOT_PROVIDER_TYPE": "openai",
            "COPILOT_PROVIDER_WIRE_API": "responses",
            "COPILOT_PROVIDER_API_KEY": "sk-test-key",
            "COPILOT_MODEL": openai.MODEL,
        },
    )

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "s"))

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Hello over Responses."
    assert (turn.result.usage.input, turn.result.usage.output) == (50, 7)
    (request,) = fake_openai.script.model_requests()
    assert request.path == "/v1/responses"


async def test_deadline_leaves_no_process(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    """An outage Copilot keeps retrying: the deadline stops the turn before Copilot gives up."""
    fake_anthropic.script.plan(anthropic.overloaded(None))
    marker = new_marker()

    agent = copilot_agent(fake_anthropic.url, extra=marker)
    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "s"), deadline=6)

    assert turn.result.error is not None and turn.result.error.code == "timeout", turn.result.error
    leftovers = processes_with(marker)
    _kill(leftovers)
    assert leftovers == [], "processes of the stopped copilot are still running"


async def test_cancel_leaves_no_process(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_anthropic.script.plan(Reply(text="Too late.", gate=gate))
    marker = new_marker()
    seen: list[int] = []

    async def cancel_once_asked(event: AgentEvent, running: Any) -> None:
        if seen:
            return
        with anyio.fail_after(60):
            while not fake_anthropic.script.model_requests():
                await anyio.sleep(0.05)
        seen.extend(processes_with(marker))
        await running.cancel()

    try:
        agent = copilot_agent(fake_anthropic.url, extra=marker)
        turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "s"), on_event=cancel_once_asked)
    finally:
        gate.set()

    assert seen, "the CLI was not running when the turn was cancelled"
    assert turn.result.status == "canceled", turn.result
    assert turn.result.text != "Too late."
    leftovers = processes_with(marker)
    _kill(leftovers)
    assert leftovers == [], "processes of the cancelled copilot are still running"


async def test_steering_stops_and_resumes_the_session(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_anthropic.script.plan(Reply(text="Unheard.", gate=gate), Reply(text="Steered: pears."))
    steered: list[str] = []

    async def steer_once_asked(event: AgentEvent, running: Any) -> None:
        if event.type == "stopped":
            gate.set()  # the CLI this answer was for is gone
        if steered:
            return
        with anyio.fail_after(60):
            while not fake_anthropic.script.model_requests():
                await anyio.sleep(0.05)
        steered.append("Talk about pears instead.")
        await running.steer(steered[0])

    try:
        agent = copilot_agent(fake_anthropic.url)
        turn = await run_turn(
            agent, "Talk about apples", workspace, local_provider(tmp_path / "s"), on_event=steer_once_asked
        )
    finally:
        gate.set()

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Steered: pears."
    last = fake_anthropic.script.model_requests()[-1]
    assert "Talk about apples" in " ".join(user_texts(last))  # the resumed session still has the first prompt
    assert "Talk about pears instead." in " ".join(user_texts(last))
    # Stopped before Copilot wrote the prompt to its session, the prompt runs again with the steering in a session of
    # its own (nothing was recorded to resume): the turn ends in the session that holds both.
    named = [e.id for e in turn.of("conversation") if e.id]
    assert turn.result.conversation == named[-1]
