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


def steer_on_first_conversation(
    text: str, gate: threading.Event, done: list[str], *, once_asked: Script | None = None
) -> Any:
    """Steer as soon as the CLI names its conversation (or, with ``once_asked``, once its first model request is held
    by the fake); the held first answer is released only once the CLI was stopped."""

    async def on_event(event: AgentEvent, running: Any) -> None:
        if event.type == "conversation" and not done:
            if once_asked is not None:
                await _wait_for_request(once_asked)
            done.append(text)
            await running.steer(text)
        elif event.type == "stopped":
            gate.set()  # the CLI this answer was for is gone: let the server's handler finish

    return on_event


async def _wait_for_request(script: Script) -> None:
    """Give the CLI time to reach the model (the gate holds the answer), polling the fake's log."""
    import anyio

    with anyio.fail_after(60):
        while not script.model_requests():
            await anyio.sleep(0.05)


async def test_codex_steering_right_after_thread_started(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    """Steering lands before codex even asked the model: the steered turn must still answer the steering."""
    gate = threading.Event()
    # Codex may not have sent its first request yet when it is stopped: whichever request comes first is held.
    fake_openai.script.plan(Reply(text="Goodbye then.", gate=gate), Reply(text="Goodbye then."))
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
    # Resumed or restarted, the request that answered carries both the brief and the steering.
    texts = " ".join(user_texts(fake_openai.script.model_requests()[-1]))
    assert "Actually, say goodbye" in texts
    assert "Say hello" in texts


async def test_codex_steering_while_waiting_on_the_model_resumes_the_thread(
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
            on_event=steer_on_first_conversation("Actually, say goodbye", gate, done, once_asked=fake_openai.script),
        )
    finally:
        gate.set()

    assert done
    requests = fake_openai.script.model_requests()
    context = (turn.types, [(r.answered, user_texts(r)[-1:]) for r in requests])
    assert turn.result.status == "completed", (turn.result.error, context)
    assert turn.result.text == "Goodbye then.", context
    assert turn.of("stopped"), context
    assert len({e.id for e in turn.of("conversation")}) == 1  # the same thread, resumed
    texts = user_texts(requests[-1])
    assert "Actually, say goodbye" in texts
    assert "Say hello" in texts


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
            on_event=steer_on_first_conversation("Actually, say goodbye", gate, done, once_asked=fake_anthropic.script),
        )
    finally:
        gate.set()

    assert done
    requests = fake_anthropic.script.model_requests()
    context = (turn.types, [(r.answered, user_texts(r)[-1:]) for r in requests])
    assert turn.result.status == "completed", (turn.result.error, context)
    assert turn.result.text == "Goodbye then.", context
    assert turn.of("stopped"), context
    last = requests[-1]
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
