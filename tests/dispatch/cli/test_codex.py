"""The REAL Codex CLI (pinned, installed by the bootstrap) against the fake OpenAI Responses server.

Codex reads its model provider from the config.toml the harness writes into the private CODEX_HOME; the tests pass
the fake's URL through the agent variables documented by the harness.
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from muster_dispatch import (
    Continuation,
    DirectoryConversationStore,
    cli_agent,
    local_provider,
    quota_fault,
    unavailable_fault,
)
from tests.dispatch.cli.support import (
    RESET_EPOCH,
    assistant_texts,
    codex_agent,
    new_marker,
    processes_seen,
    processes_with,
    run_turn,
    user_texts,
)
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes import openai
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Fail, Reply, ToolCall
from tests.support.net import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


async def test_plain_answer(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(
        Reply(
            text="Hello from the fake model.",
            thinking="The user wants a greeting.",
            input_tokens=520,
            cached_tokens=400,
        )
    )
    agent = codex_agent(installed_clis.codex, fake_openai.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "completed", result.error
    assert result.error is None
    assert result.text == "Hello from the fake model."
    assert [e.text for e in turn.of("reasoning")] == ["The user wants a greeting."]
    conversations = {e.id for e in turn.of("conversation")}
    assert len(conversations) == 1 and result.conversation in conversations
    assert turn.of("finished")
    assert not turn.of("failure") and not turn.of("quota")
    # The Responses usage said 520 input of which 400 cached: 120 fresh, 400 cached, 30 output.
    assert (result.usage.input, result.usage.cached, result.usage.output) == (120, 400, 30)
    assert result.usage.complete
    (request,) = fake_openai.script.model_requests()
    assert request.body["model"] == openai.MODEL
    assert "Say hello" in user_texts(request)


async def test_shell_tool_call_then_answer(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(Reply(tool=ToolCall("echo muster-tool-ok")), Reply(text="The command printed it."))
    agent = codex_agent(installed_clis.codex, fake_openai.url)

    turn = await run_turn(agent, "Run echo", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "The command printed it."
    calls = turn.of("tool")
    assert calls and "echo muster-tool-ok" in str(calls[0].input)
    results = turn.of("tool_result")
    assert results and "muster-tool-ok" in str(results[-1].output)
    assert results[-1].id == calls[0].id
    _first, second = fake_openai.script.model_requests()
    assert any("muster-tool-ok" in text for text in user_texts(second))
    assert (turn.result.usage.input, turn.result.usage.output) == (240, 60)


async def test_file_change_through_apply_patch(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch\n"
    fake_openai.script.plan(Reply(tool=ToolCall(patch=patch)), Reply(text="Wrote hello.txt."))
    agent = codex_agent(installed_clis.codex, fake_openai.url)

    turn = await run_turn(agent, "Create hello.txt", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert (workspace / "hello.txt").read_text() == "hello from codex\n"
    (change,) = turn.of("file_change")
    assert str(workspace.resolve() / "hello.txt") in str(change.data)
    assert turn.result.text == "Wrote hello.txt."


async def test_transient_errors_are_retries_not_failures(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    # With one retry of each kind codex re-sends once silently, then prints "Reconnecting... 1/1" and recovers.
    fake_openai.script.plan(openai.server_error(2), Reply(text="Recovered."))
    agent = codex_agent(installed_clis.codex, fake_openai.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Recovered."
    retries = turn.of("retry")
    assert retries and "Reconnecting" in str(retries[0].text)
    assert not turn.of("failure") and not turn.of("quota")
    assert [r.answered for r in fake_openai.script.model_requests()] == ["fail:500", "fail:500", "reply"]


@pytest.mark.parametrize(
    ("failure", "words", "reset"),
    [
        pytest.param(openai.rate_limited(None), "429 Too Many Requests", None, id="rate-limit-outlasts-retries"),
        pytest.param(
            openai.usage_limited(RESET_EPOCH),
            "hit your usage limit",
            datetime(2030, 1, 1, tzinfo=UTC),
            id="usage-limit",
        ),
        pytest.param(openai.insufficient_quota(), "Quota exceeded", None, id="insufficient-quota"),
    ],
)
async def test_quota(
    installed_clis: InstalledClis,
    fake_openai: FakeOpenAI,
    workspace: Path,
    tmp_path: Path,
    failure: Fail,
    words: str,
    reset: datetime | None,
) -> None:
    fake_openai.script.plan(failure)
    # Codex prints the reset time in local time: pin the zone so the parsed instant is exact.
    agent = codex_agent(installed_clis.codex, fake_openai.url, extra={"TZ": "UTC"})

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "quota", result.error
    assert words in result.error.message
    fault = quota_fault(result.error)
    assert fault is not None and fault.reset_at == reset
    # Codex has no native quota event: the harness turns the terminal quota failure into one.
    quotas = turn.of("quota")
    assert quotas and all(words in str(e.text) for e in quotas), turn.types
    assert quotas[-1].reset_at == reset
    assert unavailable_fault(result.error) is None


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        pytest.param(openai.overloaded(None), "at capacity", id="503-overloaded"),
        pytest.param(openai.server_error(None), "high demand", id="500-server-error"),
    ],
)
async def test_outage_is_unavailable(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path, failure: Fail, words: str
) -> None:
    fake_openai.script.plan(failure)
    agent = codex_agent(installed_clis.codex, fake_openai.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "process", result.error
    assert words in result.error.message
    assert unavailable_fault(result.error) is not None
    assert quota_fault(result.error) is None


async def test_auth_failure_is_neither_quota_nor_outage(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(openai.auth_failed())
    agent = codex_agent(installed_clis.codex, fake_openai.url)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "process", result.error
    assert "401" in result.error.message
    assert quota_fault(result.error) is None
    assert unavailable_fault(result.error) is None
    # "Reconnecting... 1/1 (unexpected status 401 …)" came first: a retry notice, not the failure.
    assert turn.of("retry")


async def test_network_down_is_stopped_at_the_deadline_without_orphans(
    installed_clis: InstalledClis, workspace: Path, tmp_path: Path
) -> None:
    """Codex waits for the network forever ("Reconnecting... waiting for network"): the deadline must stop it."""
    marker = new_marker()
    agent = codex_agent(installed_clis.codex, f"http://127.0.0.1:{free_port()}", extra=marker)
    with processes_seen(marker) as seen_running:
        turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"), deadline=8)

    result = turn.result
    assert seen_running, "the marker variable did not reach the codex process: the orphan check would be blind"
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "timeout", result.error
    # Its "Reconnecting... waiting for network" notices (none yet when a loaded machine starts it slowly) are
    # retries, never the turn's failure; their decoding is tested on recorded transcripts.
    assert not turn.of("failure")
    leftovers = processes_with(marker)
    for pid in leftovers:  # do not leak them into the next tests even when the assertion fails
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    assert leftovers == [], "processes of the stopped codex are still running"


async def test_resume_continues_the_same_thread(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(Reply(text="Noted: apple."), Reply(text="The word was apple."))
    agent = codex_agent(installed_clis.codex, fake_openai.url)
    provider = local_provider(tmp_path / "sandboxes")

    first = await run_turn(agent, "Remember the word apple", workspace, provider)
    assert first.result.status == "completed", first.result.error
    thread = first.result.conversation
    assert thread

    second = await run_turn(agent, "Which word?", workspace, provider, continuation=Continuation(thread))

    assert second.result.status == "completed", second.result.error
    assert second.result.text == "The word was apple."
    assert second.result.conversation == thread
    request = fake_openai.script.model_requests()[-1]
    assert "Noted: apple." in assistant_texts(request)
    assert "Which word?" in user_texts(request)
    # Codex's turn.completed is a running total for the thread (240/60 here); a turn's usage is its own share.
    assert (second.result.usage.input, second.result.usage.output) == (120, 30)


async def test_fork_branches_into_a_new_thread(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(Reply(text="Noted: pear."), Reply(text="Forked: pear."), Reply(text="Parent: still pear."))
    agent = codex_agent(installed_clis.codex, fake_openai.url)
    provider = local_provider(tmp_path / "sandboxes")
    parent = await run_turn(agent, "Remember the word pear", workspace, provider)
    thread = parent.result.conversation
    assert parent.result.status == "completed" and thread

    child = await run_turn(agent, "Which word?", workspace, provider, continuation=Continuation(thread, fork=True))

    assert child.result.status == "completed", child.result.error
    assert child.result.text == "Forked: pear."
    assert child.result.conversation and child.result.conversation != thread
    request = fake_openai.script.model_requests()[-1]
    assert "Noted: pear." in assistant_texts(request)  # the child starts from the parent's history
    assert (child.result.usage.input, child.result.usage.output) == (120, 30)

    # The parent thread is untouched by the fork: resuming it does not see the child's exchange.
    again = await run_turn(agent, "And now?", workspace, provider, continuation=Continuation(thread))
    assert again.result.conversation == thread
    history = assistant_texts(fake_openai.script.model_requests()[-1])
    assert "Noted: pear." in history and "Forked: pear." not in history


async def test_cold_resume_through_the_store_in_a_new_home(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    fake_openai.script.plan(Reply(text="Noted: kiwi."), Reply(text="The word was kiwi."))
    store = DirectoryConversationStore(tmp_path / "store")
    agent = codex_agent(installed_clis.codex, fake_openai.url, storage=store)

    first = await run_turn(agent, "Remember the word kiwi", workspace, local_provider(tmp_path / "machine-a"))
    thread = first.result.conversation
    assert first.result.status == "completed" and thread
    assert list((tmp_path / "store").rglob(f"rollout-*{thread}.jsonl")), "the rollout was not captured"

    fresh_root = tmp_path / "machine-b"
    second = await run_turn(
        agent, "Which word?", workspace, local_provider(fresh_root), continuation=Continuation(thread)
    )

    assert second.result.status == "completed", second.result.error
    assert second.result.text == "The word was kiwi."
    assert second.result.conversation == thread
    assert "Noted: kiwi." in assistant_texts(fake_openai.script.model_requests()[-1])
    assert list(fresh_root.rglob(f"rollout-*{thread}.jsonl")), "the rollout was not restored into the new home"


async def test_an_error_item_is_a_warning_not_a_failure(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    """A model outside codex's catalog: codex prints an `item.completed` of type `error` and carries on."""
    fake_openai.script.plan(Reply(text="Hi."))
    base = codex_agent(installed_clis.codex, fake_openai.url)
    agent = cli_agent(base.harness, model="muster-unknown-model", variables=base.variables)

    turn = await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"))

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Hi."
    assert any("muster-unknown-model" in str(w.text) for w in turn.of("warning")), turn.types
    assert not turn.of("failure")
    (request,) = fake_openai.script.model_requests()
    assert request.body["model"] == "muster-unknown-model"


async def test_live_input_turns_through_app_server_then_resume(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, workspace: Path, tmp_path: Path
) -> None:
    """`live_input=True` runs `codex app-server`: the same normalized events, and resume keeps the thread."""
    fake_openai.script.plan(Reply(text="Noted: plum.", thinking="Remember it."), Reply(text="The word was plum."))
    agent = codex_agent(installed_clis.codex, fake_openai.url)
    provider = local_provider(tmp_path / "sandboxes")

    first = await run_turn(agent, "Remember the word plum", workspace, provider, live_input=True)

    assert first.result.status == "completed", first.result.error
    assert first.result.text == "Noted: plum."
    assert "Noted: plum." in [e.text for e in first.of("text")]
    assert first.of("finished")
    thread = first.result.conversation
    assert thread and {e.id for e in first.of("conversation")} == {thread}
    assert (first.result.usage.input, first.result.usage.output) == (120, 30)

    second = await run_turn(
        agent, "Which word?", workspace, provider, continuation=Continuation(thread), live_input=True
    )

    assert second.result.status == "completed", second.result.error
    assert second.result.text == "The word was plum."
    assert second.result.conversation == thread
    request = fake_openai.script.model_requests()[-1]
    assert "Noted: plum." in assistant_texts(request)
    assert (second.result.usage.input, second.result.usage.output) == (120, 30)
