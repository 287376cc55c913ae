"""Steering without live input (stop the running CLI, resume its conversation) and cancel, on the real CLIs."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from muster_dispatch import AgentEvent, local_provider
from tests.dispatch.cli.support import (
    Turn,
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
from tests.dispatch.fakes.plans import Recorded, Reply, Script, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

# An argument that names this run's tool processes in /proc (unique: other runs of this suite may share the machine).
LONG_TOOL_TAG = f"muster-long-tool-{uuid.uuid4().hex[:12]}"


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


async def _codex_live_steering(
    executable: Path, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path, *, settle: float = 1.0
) -> tuple[Turn, list[Recorded]]:
    """A codex app-server turn whose first answer the fake holds until the test has steered it.

    ``settle``: how long the held answer waits after ``steer()`` returned, so that codex has taken the steering
    request off its stdin before the answer can complete the turn (0 reproduces the race in which the answer ends
    the turn before codex has read the steering).
    """
    gate = threading.Event()
    fake_openai.script.plan(Reply(text="Hello first.", gate=gate), Reply(text="Goodbye then."))
    agent = codex_agent(executable, fake_openai.url)
    done: list[str] = []

    async def steer_while_held(event: AgentEvent, running: Any) -> None:
        if event.type == "conversation" and not done:
            await _wait_for_request(fake_openai.script)
            done.append("steered")
            await running.steer("Actually, say goodbye")
            await anyio.sleep(settle)
            gate.set()

    try:
        turn = await run_turn(
            agent,
            "Say hello",
            workspace,
            local_provider(tmp_path / "sandboxes"),
            live_input=True,
            on_event=steer_while_held,
        )
    finally:
        gate.set()
    assert done
    return turn, fake_openai.script.model_requests()


async def test_codex_live_input_steers_the_running_turn_through_app_server(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    """With live input codex runs as `app-server`: steering joins the running turn instead of restarting it."""
    turn, requests = await _codex_live_steering(installed_clis.codex, fake_openai, workspace, tmp_path)

    context = (turn.types, [(r.answered, user_texts(r)[-1:]) for r in requests])
    assert turn.result.status == "completed", (turn.result.error, context)
    assert turn.result.text == "Goodbye then.", context
    assert not turn.of("stopped"), context  # nothing was killed: the steering went through stdin
    assert len({e.id for e in turn.of("conversation")}) == 1
    texts = user_texts(requests[-1])
    assert "Say hello" in texts and "Actually, say goodbye" in texts


async def test_codex_live_input_usage_is_what_codex_recorded(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    turn, requests = await _codex_live_steering(installed_clis.codex, fake_openai, workspace, tmp_path)

    assert turn.result.status == "completed", turn.result.error
    # When the steering lands while the first answer streams, codex may keep that answer's text yet not count its
    # tokens (its own rollout then says 120/30): the turn's usage is a whole number of answers, from one to the
    # number the fake served, never a partial or doubled figure.
    usage = turn.result.usage
    served = len(requests)
    assert usage.complete
    assert usage.output % 30 == 0 and 1 <= usage.output // 30 <= served, usage
    assert usage.input == 4 * usage.output, usage


async def test_codex_live_steering_that_races_the_end_of_the_turn_is_not_lost(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    """The answer is released the moment steer() returns: codex may end the turn before it reads the steering."""
    turn, requests = await _codex_live_steering(installed_clis.codex, fake_openai, workspace, tmp_path, settle=0)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Goodbye then."
    assert "Actually, say goodbye" in user_texts(requests[-1])


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


@pytest.mark.parametrize(
    "cli",
    [
        "claude",
        "codex",
    ],
)
async def test_deadline_during_a_long_tool_call_kills_the_tool_too(
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAI,
    workspace: Path,
    tmp_path: Path,
    cli: str,
) -> None:
    """The model runs a never-ending command through the shell tool: the deadline must take it down with the CLI.

    The command reads a FIFO nobody writes (a read-only command Claude's acceptEdits mode runs without asking; it
    refuses long `sleep`s and `tail -f`); the tag argument names its process in /proc.
    """
    marker = new_marker()
    os.mkfifo(workspace / "never.fifo")
    # `&& echo`: the shell stays as the parent, so the reader is a GRANDCHILD of the CLI, in the tool's own session.
    tool = Reply(tool=ToolCall(f"cat never.fifo {LONG_TOOL_TAG} && echo read"))
    if cli == "claude":
        fake_anthropic.script.plan(tool)
        agent = claude_agent(installed_clis.claude, fake_anthropic.url, extra=marker)
    else:
        fake_openai.script.plan(tool)
        agent = codex_agent(installed_clis.codex, fake_openai.url, extra=marker)
    seen: list[int] = []

    async def look(event: AgentEvent, running: Any) -> None:
        if event.type == "tool" and not seen:
            with anyio.fail_after(20):  # the command starts right after the tool event
                while not _long_tools():
                    await anyio.sleep(0.05)
            seen.extend(_long_tools())

    turn = await run_turn(
        agent, "Wait a long time", workspace, local_provider(tmp_path / "s"), deadline=8, on_event=look
    )

    assert seen, "the long command never started: the scenario did not happen"
    assert turn.result.status == "failed"
    assert turn.result.error is not None and turn.result.error.code == "timeout", turn.result.error
    leftovers = sorted(set(processes_with(marker) + _long_tools()))
    for pid in leftovers:  # never leak them into later tests, even when the assertion below fails
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert leftovers == [], "the tool's process outlived the deadline"


def _long_tools() -> list[int]:
    """Live processes running this test's never-ending tool command (found by command line: a CLI may scrub env)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        if LONG_TOOL_TAG.encode() in cmdline and "State:\tZ" not in status and int(entry) != os.getpid():
            found.append(int(entry))
    return found
