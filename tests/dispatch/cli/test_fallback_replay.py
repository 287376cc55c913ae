"""Fallback across the two real CLIs, and replay of a turn recorded from a real CLI (then no CLI at all)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from muster_dispatch import (
    AgentEvent,
    AgentInput,
    Dispatch,
    Journal,
    ReplayDivergence,
    TurnResult,
    dispatch,
    fallback_agent,
    local_provider,
    quota_fault,
    replay_agent,
    unavailable_fault,
)
from tests.dispatch.cli.support import RESET_EPOCH, claude_agent, codex_agent, run_turn, user_texts
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes import anthropic, openai
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

EARLIER_RESET = datetime(2029, 7, 1, tzinfo=UTC)


async def drain(running: Dispatch) -> TurnResult:
    """Consume every event, then the result (which raises when the turn could not be served)."""
    async for _ in running:
        pass
    return await running.result()


async def test_fallback_from_a_quota_limited_claude_to_a_working_codex(
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAI,
    workspace: Path,
    tmp_path: Path,
) -> None:
    # Claude spends one request (120/30 tokens) on a tool call, then hits its 5-hour limit.
    fake_anthropic.script.plan(Reply(tool=ToolCall("echo step-one")), anthropic.usage_limited(RESET_EPOCH))
    fake_openai.script.plan(Reply(text="Codex finished the job."))
    claude = claude_agent(installed_clis.claude, fake_anthropic.url, subscription=True, name="claude-main")
    codex = codex_agent(installed_clis.codex, fake_openai.url, name="codex-backup")
    agent = fallback_agent([claude, codex])

    turn = await run_turn(agent, "Do the job", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "completed", result.error
    assert result.text == "Codex finished the job."
    assert result.selected == "codex-backup"
    assert [a.agent for a in result.attempts] == ["claude-main", "codex-backup"]
    failed, selected = result.attempts
    assert failed.status == "failed" and failed.error is not None and failed.error.code == "quota"
    fault = quota_fault(failed.error)
    assert fault is not None and fault.reset_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert selected.status == "completed"
    assert turn.of("fallback"), turn.types
    # Usage counts the failed attempt too: Claude's tool-call request + Codex's answer.
    assert (result.usage.input, result.usage.output) == (240, 60)
    assert (failed.usage.input, failed.usage.output) == (120, 30)
    # Codex got the ORIGINAL brief, in the same workspace.
    (codex_request,) = fake_openai.script.model_requests()
    assert "Do the job" in user_texts(codex_request)
    assert str(workspace.resolve()) in " ".join(user_texts(codex_request))


async def test_fallback_on_an_outage_and_only_when_the_trigger_is_listed(
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAI,
    workspace: Path,
    tmp_path: Path,
) -> None:
    claude = claude_agent(installed_clis.claude, fake_anthropic.url, name="claude-main")
    codex = codex_agent(installed_clis.codex, fake_openai.url, name="codex-backup")

    # Triggers: quota only. An overloaded Claude is an outage: no hand-over, Codex is never asked.
    fake_anthropic.script.plan(anthropic.overloaded(None))
    only_quota = await run_turn(
        fallback_agent([claude, codex], on=("quota",)), "Do the job", workspace, local_provider(tmp_path / "a")
    )
    assert only_quota.result.status == "failed"
    assert only_quota.result.error is not None and only_quota.result.error.code == "process"
    assert unavailable_fault(only_quota.result.error) is not None
    assert [a.agent for a in only_quota.result.attempts] == ["claude-main"]
    assert fake_openai.script.model_requests() == []

    # Default triggers include "unavailable": the same outage hands over to Codex.
    fake_anthropic.script.reset(anthropic.overloaded(None))
    fake_openai.script.plan(Reply(text="Codex took over."))
    handed = await run_turn(fallback_agent([claude, codex]), "Do the job", workspace, local_provider(tmp_path / "b"))
    assert handed.result.status == "completed", handed.result.error
    assert handed.result.text == "Codex took over."
    assert handed.result.selected == "codex-backup"
    (event,) = handed.of("fallback")
    assert event.code == "unavailable"
    assert "Do the job" in user_texts(fake_openai.script.model_requests()[0])


async def test_every_candidate_at_quota_reports_the_earliest_reset(
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAI,
    workspace: Path,
    tmp_path: Path,
) -> None:
    fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH))  # 2030-01-01
    fake_openai.script.plan(openai.usage_limited(int(EARLIER_RESET.timestamp())))  # 2029-07-01
    agent = fallback_agent(
        [
            claude_agent(installed_clis.claude, fake_anthropic.url, subscription=True, name="claude-main"),
            codex_agent(installed_clis.codex, fake_openai.url, name="codex-backup", extra={"TZ": "UTC"}),
        ]
    )

    turn = await run_turn(agent, "Do the job", workspace, local_provider(tmp_path / "sandboxes"))

    result = turn.result
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "quota", result.error
    fault = quota_fault(result.error)
    assert fault is not None and fault.reset_at == EARLIER_RESET
    assert [a.error.code for a in result.attempts if a.error] == ["quota", "quota"]


async def test_record_then_replay_without_any_cli(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(Reply(text="Recorded answer.", thinking="Thinking once."))
    journal_path = tmp_path / "journal.jsonl"
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)
    recorded = await run_turn(
        agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"), journal=Journal(journal_path)
    )
    assert recorded.result.status == "completed", recorded.result.error
    requests_after_recording = len(fake_anthropic.script.requests)

    observations = [json.loads(line) for line in journal_path.read_text().splitlines() if line.strip()]
    assert observations, "the dispatch wrote no journal"
    for observation in observations:
        assert set(observation) == {"seq", "at", "source", "scope", "event"}
    assert [o["seq"] for o in observations] == sorted({o["seq"] for o in observations})
    recorded_types = [o["event"]["type"] for o in observations]
    assert "text" in recorded_types and "usage" in recorded_types

    replay = replay_agent(journal_path)
    assert replay.kind == "replay" and replay.remaining_turns == 1
    replayed = await run_turn(replay, "Say hello", workspace, local_provider(tmp_path / "replay-sandboxes"))

    assert replayed.result.status == "completed"
    assert replayed.result.text == "Recorded answer."
    assert replayed.result.conversation == recorded.result.conversation
    assert (replayed.result.usage.input, replayed.result.usage.output) == (120, 30)
    assert [(e.type, e.text) for e in replayed.events] == [(e.type, e.text) for e in recorded.events]
    assert len(fake_anthropic.script.requests) == requests_after_recording, "the replay reached the model"
    assert replay.remaining_turns == 0
    assert not (tmp_path / "replay-sandboxes").exists() or not list((tmp_path / "replay-sandboxes").rglob("*.jsonl"))

    # An exhausted journal always fails.
    exhausted = dispatch(replay, AgentInput("Say hello"), workspace=workspace)
    with pytest.raises(ReplayDivergence):
        await drain(exhausted)


async def test_replay_with_a_changed_prompt_fails_or_warns_by_policy(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(Reply(text="Recorded answer."))
    journal_path = tmp_path / "journal.jsonl"
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)
    await run_turn(agent, "Say hello", workspace, local_provider(tmp_path / "sandboxes"), journal=Journal(journal_path))

    strict = dispatch(replay_agent(journal_path, divergence="fail"), AgentInput("Say goodbye"), workspace=workspace)
    with pytest.raises(ReplayDivergence) as raised:
        await drain(strict)
    assert raised.value.code == "replay"

    lenient = await run_turn(
        replay_agent(journal_path, divergence="warn"), "Say goodbye", workspace, local_provider(tmp_path / "replay")
    )
    assert lenient.result.status == "completed"
    assert lenient.result.text == "Recorded answer."
    warnings = lenient.of("warning")
    assert warnings and any("prompt" in str(w.text) for w in warnings)


async def test_replay_of_a_live_input_turn_checks_its_steering(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    gate = threading.Event()
    fake_anthropic.script.plan(Reply(text="Answer one.", gate=gate), Reply(text="Answer two."))
    journal_path = tmp_path / "journal.jsonl"
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)

    async def steer_once(event: AgentEvent, running: Any) -> None:
        if event.type == "conversation" and not gate.is_set():
            await running.steer("Second message")
            gate.set()

    try:
        recorded = await run_turn(
            agent,
            "First message",
            workspace,
            local_provider(tmp_path / "sandboxes"),
            live_input=True,
            journal=Journal(journal_path),
            on_event=steer_once,
        )
    finally:
        gate.set()
    assert recorded.result.text == "Answer two.", recorded.result.error
    requests_after_recording = len(fake_anthropic.script.requests)

    replay = replay_agent(journal_path)
    assert replay.pending_steering() == ["Second message"]

    steered: list[str] = []

    async def same_steering(event: AgentEvent, running: Any) -> None:
        if event.type == "conversation" and not steered:  # live input: one init (conversation) per message
            steered.append("Second message")
            await running.steer("Second message")

    replayed = await run_turn(replay, "First message", workspace, None, live_input=True, on_event=same_steering)
    assert replayed.result.text == "Answer two."
    assert replayed.result.status == "completed"

    # Different steering under "fail": steer() itself raises the divergence.
    strict = dispatch(replay_agent(journal_path), AgentInput("First message", live_input=True), workspace=workspace)
    with pytest.raises(ReplayDivergence):
        await strict.steer("Something else")
    await drain(strict)
    assert len(fake_anthropic.script.requests) == requests_after_recording, "a replay reached the model"
