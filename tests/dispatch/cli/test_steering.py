"""Steering without live input (stop the running CLI, resume its conversation) and cancel, on the real CLIs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from muster_dispatch import AgentEvent, local_provider
from tests.dispatch.cli.support import (
    assistant_texts,
    claude_agent,
    codex_agent,
    new_marker,
    processes_with,
    run_turn,
    user_texts,
)
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, Script

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


def steer_on_first_conversation(text: str, gate: threading.Event, done: list[str]) -> Any:
    async def on_event(event: AgentEvent, running: Any) -> None:
        if event.type == "conversation" and not done:
            done.append(text)
            await running.steer(text)
            gate.set()  # release the held answer: the CLI it was for is being stopped anyway

    return on_event


async def _wait_for_request(script: Script) -> None:
    """Give the CLI time to reach the model (the gate holds the answer), polling the fake's log."""
    import anyio

    with anyio.fail_after(60):
        while not script.model_requests():
            await anyio.sleep(0.05)


@pytest.mark.xfail(
    strict=True,
    reason="package bug 1 in /tmp/dispatch-notes.md: codex has no rollout yet at thread.started, so resume fails",
)
async def test_codex_steering_stops_the_turn_and_resumes_the_thread(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_openai.script.plan(Reply(text="Hello (never delivered).", gate=gate), Reply(text="Goodbye then."))
    agent = codex_agent(installed_clis.codex, fake_openai.url)
    done: list[str] = []
    try:
        turn = await run_turn(
            agent,
            "Say hello",
            workspace,
            local_provider(tmp_path / "sandboxes"),
            on_event=steer_on_first_conversation("Actually, say goodbye", gate, done),
        )
    finally:
        gate.set()

    assert done
    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Goodbye then."
    assert len({e.id for e in turn.of("conversation")}) == 1  # the same thread, resumed
    last = fake_openai.script.model_requests()[-1]
    texts = user_texts(last)
    assert "Actually, say goodbye" in texts
    assert "Say hello" in texts  # the resumed thread still holds the original prompt


async def test_claude_steering_without_live_input_resumes_the_session(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_anthropic.script.plan(Reply(text="Hello (never delivered).", gate=gate), Reply(text="Goodbye then."))
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)
    done: list[str] = []
    try:
        turn = await run_turn(
            agent,
            "Say hello",
            workspace,
            local_provider(tmp_path / "sandboxes"),
            on_event=steer_on_first_conversation("Actually, say goodbye", gate, done),
        )
    finally:
        gate.set()

    assert done
    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Goodbye then."
    last = fake_anthropic.script.model_requests()[-1]
    assert "Actually, say goodbye" in user_texts(last)
    assert "Say hello" in user_texts(last)
    assert "Hello (never delivered)." not in assistant_texts(last)


async def test_cancel_kills_the_whole_process_group(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_anthropic.script.plan(Reply(text="Too late.", gate=gate))
    marker = new_marker()
    agent = claude_agent(installed_clis.claude, fake_anthropic.url, extra=marker)
    from muster_dispatch import AgentInput, dispatch

    running = dispatch(
        agent, AgentInput("Say hello"), workspace=workspace, provider=local_provider(tmp_path / "s"), deadline=60
    )
    try:
        events: list[AgentEvent] = []
        async for event in running:
            events.append(event)
            if event.type == "conversation":
                await _wait_for_request(fake_anthropic.script)
                assert processes_with(marker), "the marker did not reach the CLI: the orphan check would be blind"
                await running.cancel()
        result = await running.result()
    finally:
        gate.set()

    assert result.status == "canceled"
    assert result.error is not None and result.error.code == "aborted"
    assert processes_with(marker) == []
