"""Fallback across candidates, with custom agents (and one fake CLI sharing the workspace)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from muster_dispatch import (
    AgentEvent,
    AgentInput,
    Continuation,
    CustomContext,
    DispatchError,
    Usage,
    claude_harness,
    cli_agent,
    custom_agent,
    dispatch,
    fallback_agent,
    quota_fault,
)
from tests.dispatch.unit.support import REPLAY_CLI, TRANSCRIPTS, make_cli

pytestmark = pytest.mark.anyio


def _failing(name: str, code: str, text: str, tokens: int = 5):  # type: ignore[no-untyped-def]
    async def fn(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        (context.workspace / f"{name}.ran").write_text(input.prompt)
        yield AgentEvent("usage", usage=Usage(input=tokens, output=1))
        yield AgentEvent("failure", text=text, code=code)

    return custom_agent(fn, name=name)


def _answering(name: str, answer: str):  # type: ignore[no-untyped-def]
    seen: list[AgentInput] = []

    async def fn(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        seen.append(input)
        (context.workspace / f"{name}.ran").write_text(input.prompt)
        yield AgentEvent("usage", usage=Usage(input=7, output=3))
        yield AgentEvent("text", text=answer)

    agent = custom_agent(fn, name=name)
    return agent, seen


async def test_quota_hands_over_to_the_next_candidate_in_the_same_workspace(tmp_path: Path) -> None:
    second, seen = _answering("second", "done by second")
    agent = fallback_agent([_failing("first", "quota", "You've hit your limit · resets 5pm (UTC)"), second])
    run = dispatch(agent, AgentInput("the brief", Continuation("conv-of-first")), workspace=tmp_path)
    events = [event async for event in run]
    result = await run.result()
    assert result.status == "completed" and result.text == "done by second"
    assert result.selected == "second" and result.fallback == "second"
    assert [(a.agent, a.status) for a in result.attempts] == [("first", "failed"), ("second", "completed")]
    assert result.attempts[0].error is not None and result.attempts[0].error.code == "quota"
    assert result.usage == Usage(input=12, output=4)  # the failed attempt counts
    fallback = [e for e in events if e.type == "fallback"]
    assert len(fallback) == 1 and fallback[0].name == "second" and fallback[0].code == "quota"
    assert (tmp_path / "first.ran").read_text() == (tmp_path / "second.ran").read_text() == "the brief"
    assert seen[0].continuation is None  # a conversation id belongs to the first candidate's CLI


async def test_unavailable_hands_over(tmp_path: Path) -> None:
    second, _ = _answering("second", "ok")
    result = await dispatch(
        fallback_agent([_failing("first", "unavailable", "overloaded"), second]), AgentInput("x"), workspace=tmp_path
    ).result()
    assert result.selected == "second" and result.status == "completed"


async def test_a_plain_process_failure_does_not_fall_back(tmp_path: Path) -> None:
    second, seen = _answering("second", "ok")
    result = await dispatch(
        fallback_agent([_failing("first", "process", "bad key"), second]), AgentInput("x"), workspace=tmp_path
    ).result()
    assert result.status == "failed" and result.selected == "first" and not seen
    assert result.error is not None and result.error.code == "process"


async def test_triggers_are_configurable(tmp_path: Path) -> None:
    second, seen = _answering("second", "ok")
    result = await dispatch(
        fallback_agent([_failing("first", "unavailable", "down"), second], on=("quota",)),
        AgentInput("x"),
        workspace=tmp_path,
    ).result()
    assert result.status == "failed" and not seen


async def test_all_candidates_at_quota_give_quota_with_the_earliest_reset(tmp_path: Path) -> None:
    agent = fallback_agent(
        [
            _failing("a", "quota", "limit · resets Jan 2, 2030, 12am (UTC)"),
            _failing("b", "quota", "limit · try again at Jan 1st, 2030 6:00 AM"),
        ]
    )
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path).result()
    assert result.status == "failed" and result.error is not None and result.error.code == "quota"
    fault = quota_fault(result.error)
    assert fault is not None and fault.reset_at is not None
    assert fault.reset_at.isoformat() == "2030-01-01T06:00:00+00:00"
    assert len(result.attempts) == 2 and result.usage.input == 10


async def test_all_at_quota_without_every_reset_has_no_reset(tmp_path: Path) -> None:
    agent = fallback_agent(
        [_failing("a", "quota", "limit · resets Jan 2, 2030, 12am (UTC)"), _failing("b", "quota", "x")]
    )
    result = await dispatch(agent, AgentInput("x"), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "quota"
    assert "reset_at" not in result.error.details


async def test_fallback_from_a_quota_limited_cli_to_a_custom_agent(tmp_path: Path) -> None:
    claude = cli_agent(
        claude_harness(executable=make_cli(tmp_path, REPLAY_CLI)),
        variables={"FAKE_TRANSCRIPT": str(TRANSCRIPTS / "claude-usage-limit.jsonl"), "FAKE_EXIT": "1"},
    )
    second, _ = _answering("backup", "covered")
    result = await dispatch(fallback_agent([claude, second]), AgentInput("x"), workspace=tmp_path).result()
    assert result.status == "completed" and result.selected == "backup"
    first = result.attempts[0]
    assert first.agent == "claude" and first.error is not None and first.error.code == "quota"
    fault = quota_fault(first.error)
    assert fault is not None and fault.reset_at is not None and fault.reset_at.year == 2030


async def test_custom_agent_raising_a_dispatch_error(tmp_path: Path) -> None:
    async def fn(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        yield AgentEvent("text", text="partial")
        raise DispatchError("quota", "no more")

    second, _ = _answering("second", "ok")
    result = await dispatch(fallback_agent([custom_agent(fn), second]), AgentInput("x"), workspace=tmp_path).result()
    assert result.selected == "second" and result.attempts[0].error is not None
    assert result.attempts[0].error.message == "no more"


async def test_custom_agent_raising_anything_else_is_a_process_error(tmp_path: Path) -> None:
    async def fn(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        raise RuntimeError("bug")
        yield AgentEvent("text", text="never")

    result = await dispatch(custom_agent(fn), AgentInput("x"), workspace=tmp_path).result()
    assert result.error is not None and result.error.code == "process" and "bug" in result.error.message


def test_fallback_configuration_errors() -> None:
    with pytest.raises(DispatchError) as empty:
        fallback_agent([])
    assert empty.value.code == "configuration"
    second, _ = _answering("s", "ok")
    with pytest.raises(DispatchError):
        fallback_agent([second], on=("weather",))  # type: ignore[list-item]
    with pytest.raises(DispatchError):
        fallback_agent([fallback_agent([second])])  # type: ignore[list-item]


async def test_steering_a_custom_agent_is_refused_and_the_turn_goes_on(tmp_path: Path) -> None:
    import anyio

    release = anyio.Event()

    async def fn(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        yield AgentEvent("text", text="started")
        await release.wait()
        yield AgentEvent("text", text="finished")

    run = dispatch(custom_agent(fn), AgentInput("x"), workspace=tmp_path)
    assert (await run.__anext__()).text == "started"
    with pytest.raises(DispatchError) as info:
        await run.steer("change of plan")
    assert info.value.code == "steering"
    release.set()
    result = await run.result()
    assert result.status == "completed" and result.text == "finished"


async def test_custom_agent_deadline_is_a_timeout(tmp_path: Path) -> None:
    import anyio

    async def fn(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        assert context.deadline is not None and context.deadline <= 0.5
        yield AgentEvent("text", text="thinking")
        await anyio.sleep(60)

    result = await dispatch(custom_agent(fn), AgentInput("x"), workspace=tmp_path, deadline=0.5).result()
    assert result.status == "failed" and result.error is not None and result.error.code == "timeout"
    assert result.text == "thinking"
