"""The REAL Claude Code CLI (pinned, installed by the bootstrap) against the fake Anthropic Messages server.

Each test plans what the fake answers, dispatches one turn through ``muster_dispatch`` and checks the normalized
events, the TurnResult (status, text, usage, conversation, error code) and what the CLI actually sent.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from muster_dispatch import (
    AgentEvent,
    Continuation,
    DirectoryConversationStore,
    local_provider,
    quota_fault,
    unavailable_fault,
)
from tests.dispatch.cli.support import (
    RESET_EPOCH,
    assistant_texts,
    claude_agent,
    new_marker,
    processes_seen,
    processes_with,
    run_turn,
    user_texts,
)
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes import anthropic
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.plans import Fail, Reply, ToolCall
from tests.support.net import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

MODEL = "claude-opus-5-5"  # Claude Code 2.1.328's default model, echoed back by the fake


async def test_plain_answer(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(
        Reply(
            text="Hello from the fake model.",
            thinking="The user wants a greeting.",
            input_tokens=120,
            output_tokens=30,
            cached_tokens=400,
            cache_created=50,
        )
    )
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "completed", result.error
    assert result.error is None
    assert result.text == "Hello from the fake model."
    assert [e.text for e in turn.of("reasoning")] == ["The user wants a greeting."]
    assert "Hello from the fake model." in [e.text for e in turn.of("text")]
    conversations = {e.id for e in turn.of("conversation")}
    assert len(conversations) == 1 and result.conversation in conversations
    assert turn.of("finished"), turn.types
    assert not turn.of("failure") and not turn.of("quota")
    # One request: 120 fresh input, 400 read from the cache, 50 written to it, 30 output (Claude's result line).
    usage = result.usage
    assert (usage.input, usage.cached, usage.cache_created, usage.output) == (120, 400, 50, 30)
    assert usage.complete
    assert MODEL in usage.models
    assert (usage.models[MODEL].input, usage.models[MODEL].output) == (120, 30)
    (request,) = fake_anthropic.script.model_requests()
    assert "Say hello" in user_texts(request)


async def test_shell_tool_call_then_answer(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(
        Reply(text="I will run it.", tool=ToolCall("echo muster-tool-ok")), Reply(text="The command printed it.")
    )
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Run echo", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "The command printed it."
    (call,) = turn.of("tool")
    assert call.name == "Bash"
    assert isinstance(call.input, dict) and call.input["command"] == "echo muster-tool-ok"
    (output,) = turn.of("tool_result")
    assert output.id == call.id
    assert "muster-tool-ok" in str(output.output)
    assert output.code != "error"
    # The tool ran for real: the second model request carries its output back.
    _first, second = fake_anthropic.script.model_requests()
    assert any("muster-tool-ok" in text for text in user_texts(second))
    # Two requests of 120/30 each, summed by Claude's result line.
    assert (turn.result.usage.input, turn.result.usage.output) == (240, 60)


async def test_transient_429_and_529_are_retries_not_failures(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(anthropic.rate_limited(1), anthropic.overloaded(1), Reply(text="Recovered."))
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Recovered."
    assert len(turn.of("retry")) == 2
    assert not turn.of("failure") and not turn.of("quota")
    assert [r.answered for r in fake_anthropic.script.model_requests()] == ["fail:429", "fail:529", "reply"]
    assert (turn.result.usage.input, turn.result.usage.output) == (120, 30)


async def test_rate_limit_that_outlasts_the_retries_is_quota(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(anthropic.rate_limited(None))
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "quota", result.error
    assert "429" in result.error.message
    assert len(turn.of("retry")) == 2  # CLAUDE_CODE_MAX_RETRIES=2, then the terminal failure
    fault = quota_fault(result.error)
    assert fault is not None and fault.reset_at is None  # a plain rate limit says nothing about a reset
    assert len(fake_anthropic.script.model_requests()) == 3


async def test_usage_limit_with_reset_time(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    """A subscription login at its 5-hour limit: rate_limit_event rejected, then "You've hit your 5-hour limit"."""
    fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH))
    agent = claude_agent(installed_clis.claude, fake_anthropic.url, subscription=True)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    reset = datetime(2030, 1, 1, tzinfo=UTC)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "quota", result.error
    assert "5-hour limit" in result.error.message
    fault = quota_fault(result.error)
    assert fault is not None and fault.reset_at == reset
    assert any(e.reset_at == reset for e in turn.of("quota")), turn.of("quota")
    assert not turn.of("retry")  # a usage limit is not retried
    assert unavailable_fault(result.error) is None


@pytest.mark.parametrize(
    ("failure", "words", "reset"),
    [
        pytest.param(anthropic.credit_too_low(), "Credit balance is too low", None, id="credit-too-low"),
        pytest.param(
            anthropic.api_usage_limit(),
            "specified API usage limits",
            datetime(2030, 1, 1, tzinfo=UTC),
            id="api-usage-limit",
        ),
    ],
)
async def test_billing_and_spend_limits_are_quota(
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    workspace: Path,
    tmp_path: Path,
    failure: Fail,
    words: str,
    reset: datetime | None,
) -> None:
    fake_anthropic.script.plan(failure)
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "quota", result.error
    assert words in result.error.message
    fault = quota_fault(result.error)
    assert fault is not None and fault.reset_at == reset
    assert unavailable_fault(result.error) is None
    assert not turn.of("retry")  # a 400 is not retried


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        pytest.param(anthropic.overloaded(None), "Overloaded", id="529-overloaded"),
        pytest.param(anthropic.server_error(None), "500", id="500-server-error"),
    ],
)
async def test_outage_is_unavailable(
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    workspace: Path,
    tmp_path: Path,
    failure: Fail,
    words: str,
) -> None:
    fake_anthropic.script.plan(failure)
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "process", result.error
    assert words in result.error.message
    fault = unavailable_fault(result.error)
    assert fault is not None
    assert quota_fault(result.error) is None
    assert len(turn.of("retry")) == 2
    assert turn.of("failure")


async def test_auth_failure_is_neither_quota_nor_outage(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(anthropic.auth_failed())
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "process", result.error
    assert "Invalid API key" in result.error.message
    assert quota_fault(result.error) is None
    assert unavailable_fault(result.error) is None


async def test_network_down_fails_as_unavailable_within_the_deadline(
    installed_clis: InstalledClis, workspace: Path, tmp_path: Path
) -> None:
    agent = claude_agent(installed_clis.claude, f"http://127.0.0.1:{free_port()}")

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"), deadline=45)

    result = turn.result
    assert result.status == "failed"
    # Claude gives up by itself after its retries: a process failure marked unavailable, not a timeout.
    assert result.error is not None and result.error.code == "process", result.error
    assert "Connection refused" in result.error.message or "ECONNREFUSED" in result.error.message
    assert unavailable_fault(result.error) is not None


async def test_network_down_past_the_deadline_is_a_timeout_without_orphans(
    installed_clis: InstalledClis, workspace: Path, tmp_path: Path
) -> None:
    """With many retries Claude would keep trying: the deadline stops it and kills its whole process group."""
    marker = new_marker()
    agent = claude_agent(
        installed_clis.claude, f"http://127.0.0.1:{free_port()}", extra={"CLAUDE_CODE_MAX_RETRIES": "10", **marker}
    )
    with processes_seen(marker) as seen_running:
        turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"), deadline=6)

    assert seen_running, "the marker variable did not reach the CLI: the orphan check would be blind"
    assert turn.result.status == "failed"
    assert turn.result.error is not None and turn.result.error.code == "timeout", turn.result.error
    # Retries it managed before the deadline (none when a loaded machine starts it slowly) are notices, never the
    # turn's failure; their decoding is tested on recorded transcripts.
    assert not turn.of("failure")
    assert turn.of("stopped")
    assert processes_with(marker) == []


async def test_resume_continues_the_same_conversation(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(Reply(text="Noted: apple."), Reply(text="The word was apple."))
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)
    provider = local_provider(tmp_path / "sandboxes")

    first = await run_turn(agent, "Remember the word apple", workspace, provider)
    assert first.result.status == "completed", first.result.error
    conversation = first.result.conversation
    assert conversation

    second = await run_turn(agent, "Which word?", workspace, provider, continuation=Continuation(conversation))

    assert second.result.status == "completed", second.result.error
    assert second.result.text == "The word was apple."
    assert second.result.conversation == conversation
    request = fake_anthropic.script.model_requests()[-1]
    assert "Noted: apple." in assistant_texts(request)
    assert "Which word?" in user_texts(request)


async def test_fork_branches_into_a_new_conversation(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(Reply(text="Noted: pear."), Reply(text="Forked: pear."))
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)
    provider = local_provider(tmp_path / "sandboxes")
    parent = await run_turn(agent, "Remember the word pear", workspace, provider)
    assert parent.result.conversation

    child = await run_turn(
        agent, "Which word?", workspace, provider, continuation=Continuation(parent.result.conversation, fork=True)
    )

    assert child.result.status == "completed", child.result.error
    assert child.result.text == "Forked: pear."
    assert child.result.conversation and child.result.conversation != parent.result.conversation
    request = fake_anthropic.script.model_requests()[-1]
    assert "Noted: pear." in assistant_texts(request)  # the fork starts from the parent's history


async def test_cold_resume_through_the_store_in_a_new_home(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(Reply(text="Noted: kiwi."), Reply(text="The word was kiwi."))
    store = DirectoryConversationStore(tmp_path / "store")
    agent = claude_agent(installed_clis.claude, fake_anthropic.url, storage=store)

    first = await run_turn(agent, "Remember the word kiwi", workspace, local_provider(tmp_path / "machine-a"))
    conversation = first.result.conversation
    assert first.result.status == "completed" and conversation
    captured = list((tmp_path / "store").rglob(f"{conversation}.jsonl"))
    assert captured, "the session file was not captured into the store"

    # A different provider root: a brand-new private home that has never seen this conversation.
    fresh_root = tmp_path / "machine-b"
    second = await run_turn(
        agent, "Which word?", workspace, local_provider(fresh_root), continuation=Continuation(conversation)
    )

    assert second.result.status == "completed", second.result.error
    assert second.result.text == "The word was kiwi."
    assert second.result.conversation == conversation
    request = fake_anthropic.script.model_requests()[-1]
    assert "Noted: kiwi." in assistant_texts(request)
    assert list(fresh_root.rglob(f"{conversation}.jsonl")), "the session was not restored into the new home"


async def test_live_input_appends_a_user_message_to_the_running_turn(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()  # the first answer waits until the steering message is written
    fake_anthropic.script.plan(Reply(text="Answer one.", gate=gate), Reply(text="Answer two."))
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)
    steered: list[str] = []

    async def steer_once(event: AgentEvent, running: object) -> None:
        if event.type == "conversation" and not steered:
            await running.steer("Second message")  # type: ignore[attr-defined]
            steered.append("Second message")
            gate.set()

    try:
        turn = await run_turn(
            agent,
            "First message",
            workspace,
            local_provider(tmp_path / "sandboxes"),
            live_input=True,
            on_event=steer_once,
        )
    finally:
        gate.set()

    assert steered
    assert turn.result.status == "completed", turn.result.error
    first, second = fake_anthropic.script.model_requests()
    assert "First message" in user_texts(first)
    # The steering message joined the SAME conversation: the second request carries the first exchange.
    assert "Second message" in user_texts(second)
    assert "Answer one." in assistant_texts(second)
    assert turn.result.text == "Answer two."
    assert len({e.id for e in turn.of("conversation")}) == 1
    assert (turn.result.usage.input, turn.result.usage.output) == (240, 60)


async def test_file_change_with_the_default_accept_edits_mode(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    """The harness runs Claude with acceptEdits: a Write in the workspace lands on disk and is reported."""
    target = workspace.resolve() / "hello.txt"
    fake_anthropic.script.plan(
        Reply(tool=ToolCall(name="Write", arguments={"file_path": str(target), "content": "hello\n"})),
        Reply(tool=ToolCall("touch made-by-bash.txt && echo made", call_id="call_2")),
        Reply(text="Finished."),
    )
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    turn = await run_turn(agent, "Create hello.txt", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert target.read_text() == "hello\n"
    assert (workspace / "made-by-bash.txt").exists()  # workspace commands run too
    (change,) = turn.of("file_change")
    assert str(target) in str(change.data)
    assert [r.code for r in turn.of("tool_result")] == [None, None]
    assert not turn.of("warning")


async def test_a_refused_write_is_a_warning_and_no_file_change(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    """With Claude's own "default" permission mode a Write is refused: nothing may claim a change."""
    target = workspace.resolve() / "hello.txt"
    fake_anthropic.script.plan(
        Reply(tool=ToolCall(name="Write", arguments={"file_path": str(target), "content": "hello\n"})),
        Reply(text="Could not write."),
    )
    agent = claude_agent(installed_clis.claude, fake_anthropic.url, permission_mode="default")

    turn = await run_turn(agent, "Create hello.txt", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert not target.exists()
    assert turn.of("file_change") == []
    (outcome,) = turn.of("tool_result")
    assert outcome.code == "error"
    (warning,) = turn.of("warning")
    assert warning.code == "permission_denied"
    assert "hello.txt" in str(warning.text)
