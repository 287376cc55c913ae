"""The REAL Gemini CLI (pinned, installed by the bootstrap) against the fake Gemini API (``streamGenerateContent``).

The CLI reaches the fake through its own ``GOOGLE_GEMINI_BASE_URL``; the harness writes the private
``~/.gemini/settings.json`` (auth type, bounded attempts) and trusts the workspace.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from muster_dispatch import (
    AgentEvent,
    AgentInput,
    Continuation,
    DirectoryConversationStore,
    dispatch,
    local_provider,
    quota_fault,
    unavailable_fault,
)
from tests.dispatch.cli.support import gemini_agent, new_marker, processes_with, run_turn
from tests.dispatch.fakes import gemini
from tests.dispatch.fakes.gemini import CutOff, FakeGemini, model_texts, user_texts
from tests.dispatch.fakes.plans import Fail, Reply, Script, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


async def test_text_turn_in_a_private_home(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))  # the user's real home, as far as this test's processes know
    fake_gemini.script.plan(Reply(text="Hello from the fake model.", input_tokens=120, output_tokens=30))
    root = tmp_path / "sandboxes"
    prompt = "-Say hello\n  to the  world"  # a leading dash, newlines, runs of spaces

    turn = await run_turn(gemini_agent(gemini_cli, fake_gemini.url), prompt, workspace, local_provider(root))

    result = turn.result
    assert result.status == "completed", result.error
    assert result.text == "Hello from the fake model."  # assembled from the delta fragments
    assert len(turn.of("text_delta")) == 2
    assert result.conversation and len(result.conversation) == 36  # a uuid
    assert (result.usage.input, result.usage.output) == (120, 30)
    assert result.usage.models[gemini.MODEL].input == 120
    assert turn.of("finished")
    (request,) = fake_gemini.script.model_requests()
    assert prompt in user_texts(request)
    assert request.credential == "test-gemini-key"
    # The CLI's files went to the private home; the user's home and the workspace got nothing.
    (settings,) = root.rglob(".gemini/settings.json")
    assert json.loads(settings.read_text())["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert list(root.rglob(f".gemini/tmp/*/chats/session-*-{result.conversation[:8]}.jsonl"))
    assert list(user_home.iterdir()) == []
    assert list(workspace.iterdir()) == []


async def test_tool_turn(gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path) -> None:
    fake_gemini.script.plan(Reply(tool=ToolCall(command="echo muster-tool-ok")), Reply(text="The command printed it."))

    turn = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url), "Run echo", workspace, local_provider(tmp_path / "s")
    )

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "The command printed it."
    (tool,) = turn.of("tool")
    assert tool.name == gemini.SHELL_TOOL and "echo muster-tool-ok" in str(tool.input)
    (result,) = turn.of("tool_result")
    assert result.id == tool.id and result.code is None and "muster-tool-ok" in str(result.output)
    assert (turn.result.usage.input, turn.result.usage.output) == (240, 60)  # both model calls
    assert any("muster-tool-ok" in text for text in user_texts(fake_gemini.script.model_requests()[-1]))


async def test_continued_turn_sees_the_earlier_one_and_fork_is_refused(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    fake_gemini.script.plan(Reply(text="Noted: apple."), Reply(text="The word was apple."))
    agent = gemini_agent(gemini_cli, fake_gemini.url)
    provider = local_provider(tmp_path / "s")
    first = await run_turn(agent, "Remember the word apple", workspace, provider)
    session = first.result.conversation
    assert first.result.status == "completed" and session

    second = await run_turn(agent, "Which word?", workspace, provider, continuation=Continuation(session))

    assert second.result.status == "completed", second.result.error
    assert second.result.conversation == session
    last = fake_gemini.script.model_requests()[-1]
    assert "Noted: apple." in "".join(model_texts(last))
    assert "Remember the word apple" in user_texts(last) and "Which word?" in user_texts(last)

    asked = len(fake_gemini.script.requests)
    marker = new_marker()
    forked = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url, extra=marker),
        "And now?",
        workspace,
        provider,
        continuation=Continuation(session, fork=True),
    )
    assert forked.result.error is not None and forked.result.error.code == "session", forked.result.error
    assert "fork" in forked.result.error.message
    assert len(fake_gemini.script.requests) == asked  # refused before any CLI started


async def test_daily_quota(gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path) -> None:
    fake_gemini.script.plan(gemini.quota_exhausted())

    turn = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    error = turn.result.error
    assert turn.result.status == "failed"
    assert error is not None and error.code == "quota", error
    assert "exhausted your daily quota" in error.message
    assert unavailable_fault(error) is None
    assert error.details["exit_code"] == 429 % 256
    assert len(fake_gemini.script.model_requests()) == 1  # terminal at once, no retries


async def test_quota_with_a_suggested_retry_has_a_reset_time(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3600s"}
    body = gemini.error_body(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", retry)
    fake_gemini.script.plan(Fail(429, body, times=None))
    before = datetime.now(UTC)

    turn = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    fault = quota_fault(turn.result.error)
    assert fault is not None, turn.result.error
    assert fault.reset_at is not None
    assert before + timedelta(minutes=59) <= fault.reset_at <= datetime.now(UTC) + timedelta(minutes=61)


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        (gemini.capacity_exhausted(), "No capacity available"),
        (gemini.server_error(None), "An internal error has occurred."),
    ],
    ids=["capacity-503", "server-500"],
)
async def test_outage_and_capacity_are_unavailable_not_quota(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path, plan: Fail, words: str
) -> None:
    fake_gemini.script.plan(plan)

    turn = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    error = turn.result.error
    assert error is not None and error.code != "quota", error
    assert quota_fault(error) is None
    assert unavailable_fault(error) is not None, error
    assert words in error.message
    assert len(fake_gemini.script.model_requests()) == 2  # MUSTER_GEMINI_MAX_ATTEMPTS
    if plan.status == 503:  # the CLI files a capacity shortage under its quota errors
        assert any("RetryableQuotaError" in line for line in turn.result.stderr)


async def test_transient_error_recovers(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    fake_gemini.script.plan(gemini.server_error(1), Reply(text="Recovered."))

    turn = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Recovered."
    assert not turn.of("failure")
    assert any("Retrying" in line for line in turn.result.stderr)  # the retry notice did not fail the turn
    assert [r.answered for r in fake_gemini.script.model_requests()] == ["fail:500", "reply"]


async def test_a_rate_limit_that_recovers_is_a_retry_not_a_quota(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    body = gemini.error_body(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).")
    fake_gemini.script.plan(Fail(429, body), Reply(text="Recovered."))

    turn = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Recovered."
    assert not turn.of("failure") and not turn.of("quota")
    # The CLI said "quota" while it retried: a retry notice is never the turn's fault.
    assert any("Retrying" in line and "quota" in line for line in turn.result.stderr), turn.result.stderr
    assert [r.answered for r in fake_gemini.script.model_requests()] == ["fail:429", "reply"]


async def test_cut_off_stream_exiting_zero_is_a_failure(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    fake_gemini.script.plan(CutOff(text="I was say"))

    turn = await run_turn(
        gemini_agent(gemini_cli, fake_gemini.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    assert turn.result.exit_code == 0
    assert turn.result.status == "failed"
    assert turn.result.error is not None and "without a finish reason" in turn.result.error.message
    assert quota_fault(turn.result.error) is None


async def test_endless_stream_is_stopped_at_the_deadline_without_orphans(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    fake_gemini.script.plan(CutOff(endless=True))
    marker = new_marker()
    seen: list[int] = []

    async def look(event: AgentEvent, running: Any) -> None:
        if event.type == "conversation" and not seen:
            seen.extend(processes_with(marker))

    agent = gemini_agent(gemini_cli, fake_gemini.url, extra=marker)
    # The deadline leaves a loaded machine time to start the CLI (seconds of Node start-up) before it ends the turn.
    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "s"), deadline=25, on_event=look)

    assert seen, "the marker did not reach the CLI: the orphan check would be blind"
    assert turn.result.error is not None and turn.result.error.code == "timeout", turn.result.error
    assert_no_process(marker)


async def test_cancel_leaves_no_process(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_gemini.script.plan(Reply(text="Too late.", gate=gate))
    marker = new_marker()
    agent = gemini_agent(gemini_cli, fake_gemini.url, extra=marker)
    running = dispatch(
        agent, AgentInput("Say hello"), workspace=workspace, provider=local_provider(tmp_path / "s"), deadline=60
    )
    try:
        async for event in running:
            if event.type == "conversation":
                await _wait_for_request(fake_gemini.script)
                assert processes_with(marker), "the marker did not reach the CLI: the orphan check would be blind"
                await running.cancel()
        result = await running.result()
    finally:
        gate.set()

    assert result.status == "canceled"
    assert result.error is not None and result.error.code == "aborted"
    assert_no_process(marker)


async def test_garbled_output_is_raw(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    """Lines the harness cannot read (a wrapper prints them before the real CLI) are raw events, not a crash."""
    wrapper = tmp_path / "gemini-wrapper"
    wrapper.write_text(
        "#!/bin/sh\necho 'not json {'\necho '{\"type\":\"future_kind\",\"x\":1}'\necho '[1,2]'\n"
        f'exec "{gemini_cli}" "$@"\n'
    )
    wrapper.chmod(0o755)
    fake_gemini.script.plan(Reply(text="Still fine."))

    turn = await run_turn(
        gemini_agent(wrapper, fake_gemini.url), "Say hello", workspace, local_provider(tmp_path / "s")
    )

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Still fine."
    raws = turn.of("raw")
    assert any(e.text == "not json {" for e in raws)
    assert any(e.data == {"type": "future_kind", "x": 1} for e in raws)
    assert any(e.data == [1, 2] for e in raws)


async def _wait_for_request(script: Script) -> None:
    with anyio.fail_after(60):
        while not script.model_requests():
            await anyio.sleep(0.05)


def assert_no_process(marker: dict[str, str]) -> None:
    leftovers = processes_with(marker)
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    assert leftovers == [], "processes of the stopped gemini are still running"


async def test_steering_stops_and_resumes_the_session(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    """No live input: steering stops the CLI while it waits on the model and resumes its session with the message."""
    gate = threading.Event()
    fake_gemini.script.plan(Reply(text="Hello (never delivered).", gate=gate), Reply(text="Goodbye then."))
    steered: list[str] = []

    async def steer(event: AgentEvent, running: Any) -> None:
        if event.type == "conversation" and not steered:
            await _wait_for_request(fake_gemini.script)
            steered.append("Actually, say goodbye")
            await running.steer("Actually, say goodbye")
        elif event.type == "stopped":
            gate.set()  # the CLI this answer was for is gone

    try:
        turn = await run_turn(
            gemini_agent(gemini_cli, fake_gemini.url),
            "Say hello",
            workspace,
            local_provider(tmp_path / "s"),
            on_event=steer,
        )
    finally:
        gate.set()

    requests = fake_gemini.script.model_requests()
    context = (turn.types, [(r.answered, user_texts(r)[-1:]) for r in requests])
    assert steered and turn.of("stopped"), context
    assert turn.result.status == "completed", (turn.result.error, context)
    assert turn.result.text == "Goodbye then.", context
    assert len({e.id for e in turn.of("conversation")}) == 1, context  # the same session, resumed
    texts = user_texts(requests[-1])
    assert "Actually, say goodbye" in texts and "Say hello" in texts
    assert "Hello (never delivered)." not in "".join(model_texts(requests[-1]))


async def test_cold_resume_through_the_store_in_a_new_home(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    fake_gemini.script.plan(Reply(text="Noted: kiwi."), Reply(text="The word was kiwi."))
    store = DirectoryConversationStore(tmp_path / "store")
    agent = gemini_agent(gemini_cli, fake_gemini.url, storage=store)

    first = await run_turn(agent, "Remember the word kiwi", workspace, local_provider(tmp_path / "machine-a"))
    conversation = first.result.conversation
    assert first.result.status == "completed" and conversation
    assert list((tmp_path / "store").rglob(f"session-*-{conversation[:8]}.jsonl")), "the session was not captured"

    fresh_root = tmp_path / "machine-b"  # a brand-new private home that has never seen this conversation
    second = await run_turn(
        agent, "Which word?", workspace, local_provider(fresh_root), continuation=Continuation(conversation)
    )

    assert second.result.status == "completed", second.result.error
    assert second.result.conversation == conversation
    assert "Noted: kiwi." in "".join(model_texts(fake_gemini.script.model_requests()[-1]))
    assert list(fresh_root.rglob(f".gemini/tmp/workspace/chats/session-*-{conversation[:8]}.jsonl"))
