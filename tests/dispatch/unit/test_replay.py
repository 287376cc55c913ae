"""Record a dispatch in a journal, then replay it with no CLI; divergence policies; exhaustion."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster_dispatch import (
    AgentInput,
    Journal,
    ReplayDivergence,
    cli_agent,
    codex_harness,
    dispatch,
    replay_agent,
)
from tests.dispatch.unit.support import REPLAY_CLI, TRANSCRIPTS, make_cli

pytestmark = pytest.mark.anyio


async def _record(tmp_path: Path, prompts: list[str]) -> Path:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    agent = cli_agent(
        codex_harness(executable=make_cli(tmp_path, REPLAY_CLI)),
        variables={"FAKE_TRANSCRIPT": str(TRANSCRIPTS / "codex-tool.jsonl")},
    )
    for prompt in prompts:
        assert (await dispatch(agent, AgentInput(prompt), workspace=tmp_path, journal=journal).result()).ok
    return path


async def test_replay_gives_the_recorded_events_and_result_without_running(tmp_path: Path) -> None:
    path = await _record(tmp_path, ["run it"])
    original = [o.event for o in Journal(path).observations()][1:-1]
    agent = replay_agent(path)
    assert agent.kind == "replay" and agent.source == "harness" and agent.remaining_turns == 1
    # No CLI exists in this workspace: the replay must not try to run one.
    run = dispatch(agent, AgentInput("run it"), workspace=tmp_path)
    events = [event.to_dict() async for event in run]
    result = await run.result()
    assert events == original
    assert result.status == "completed" and result.text == "The command printed it."
    assert result.usage.input == 240 and result.conversation is not None
    assert agent.remaining_turns == 0


async def test_turns_replay_in_order_and_exhaustion_always_fails(tmp_path: Path) -> None:
    path = await _record(tmp_path, ["one", "two"])
    for divergence in ("fail", "warn"):
        agent = replay_agent(path, divergence=divergence)  # type: ignore[arg-type]
        assert [t.prompt for t in agent.turns] == ["one", "two"]
        assert (await dispatch(agent, AgentInput("one"), workspace=tmp_path).result()).ok
        assert (await dispatch(agent, AgentInput("two"), workspace=tmp_path).result()).ok
        with pytest.raises(ReplayDivergence) as info:
            await dispatch(agent, AgentInput("three"), workspace=tmp_path).result()
        assert info.value.code == "replay" and info.value.details["reason"] == "exhausted"


async def test_changed_prompt_fails_under_fail(tmp_path: Path) -> None:
    path = await _record(tmp_path, ["run it"])
    agent = replay_agent(path, divergence="fail")
    with pytest.raises(ReplayDivergence) as info:
        await dispatch(agent, AgentInput("something else"), workspace=tmp_path).result()
    assert info.value.details == {"reason": "prompt", "expected": "run it", "actual": "something else"}


async def test_changed_prompt_warns_under_warn_and_replays(tmp_path: Path) -> None:
    path = await _record(tmp_path, ["run it"])
    run = dispatch(replay_agent(path, divergence="warn"), AgentInput("something else"), workspace=tmp_path)
    events = [event async for event in run]
    result = await run.result()
    assert events[0].type == "warning" and events[0].code == "prompt"
    assert result.status == "completed" and result.text == "The command printed it."


async def test_a_replay_journaled_again_is_not_a_new_recording(tmp_path: Path) -> None:
    path = await _record(tmp_path, ["run it"])
    journal = Journal(path)
    await dispatch(replay_agent(path), AgentInput("run it"), workspace=tmp_path, journal=journal).result()
    assert len(replay_agent(path).turns) == 1
    assert {o.source for o in Journal(path).observations()} == {"harness", "replay"}


async def test_pending_steering_is_visible_without_consuming(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    scope = {"dispatch": "d1", "agent": "claude"}
    journal.record("harness", scope, {"type": "turn.input", "prompt": "p", "agent": "claude"})
    journal.record("harness", scope, {"type": "turn.steer", "text": "also this"})
    journal.record("harness", scope, {"type": "turn.result", "result": {"status": "completed", "text": "t"}})
    agent = replay_agent(journal)
    assert agent.pending_steering() == ["also this"] and agent.remaining_turns == 1
    turn = agent.next_turn()
    assert turn is not None and turn.steering == ["also this"] and agent.next_turn() is None


def test_missing_journal_fails_clearly(tmp_path: Path) -> None:
    from muster_dispatch import DispatchError

    with pytest.raises(DispatchError) as info:
        replay_agent(tmp_path / "nope.jsonl")
    assert info.value.code == "replay"


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.record("harness", {"dispatch": "d"}, {"type": "turn.input", "prompt": "p"})
    with path.open("a") as f:
        f.write('{"seq": 2, "at": "x", "sou')
    assert len(Journal(path).observations()) == 1
    assert Journal(path).record("harness", {}, {"type": "raw"}).seq == 2


async def test_recorded_steering_replays_and_other_steering_diverges(tmp_path: Path) -> None:
    import anyio

    from muster_dispatch import claude_harness, local_provider
    from tests.dispatch.unit.support import SESSION_CLI

    path = tmp_path / "journal.jsonl"
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, SESSION_CLI)))
    run = dispatch(
        agent, AgentInput("hang"), workspace=tmp_path, provider=local_provider(tmp_path / "h"), journal=Journal(path)
    )
    with anyio.fail_after(30):
        await run.__anext__()
        await run.steer("go on")
        recorded = await run.result()
    assert recorded.text == "hang | go on"

    same = dispatch(replay_agent(path), AgentInput("hang"), workspace=tmp_path)
    first = await same.__anext__()
    assert first.type == "conversation"
    await same.steer("go on")
    assert (await same.result()).text == "hang | go on"

    strict = dispatch(replay_agent(path), AgentInput("hang"), workspace=tmp_path)
    await strict.__anext__()
    with pytest.raises(ReplayDivergence) as info:
        await strict.steer("something else")
    assert info.value.details["reason"] == "steering"
    await strict.result()

    lenient = dispatch(replay_agent(path, divergence="warn"), AgentInput("hang"), workspace=tmp_path)
    await lenient.__anext__()
    await lenient.steer("go on")
    await lenient.steer("one more")  # never recorded
    warnings = [event for event in [e async for e in lenient] if event.type == "warning"]
    assert [w.code for w in warnings] == ["steering"] and warnings[0].data["reason"] == "unrecorded"
    assert (await lenient.result()).text == "hang | go on"


def test_journal_takes_an_injected_clock(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    fixed = datetime(2030, 1, 1, tzinfo=UTC)
    journal = Journal(tmp_path / "j.jsonl", clock=lambda: fixed)
    observation = journal.record("harness", {"dispatch": "d"}, {"type": "raw"})
    assert observation.at == "2030-01-01T00:00:00+00:00" and journal.last_seq == 1
    assert Journal(tmp_path / "j.jsonl").observations()[0].at == observation.at


async def test_a_fallback_dispatch_replays_as_one_turn_with_its_attempts(tmp_path: Path) -> None:
    from collections.abc import AsyncIterator

    from muster_dispatch import AgentEvent, CustomContext, custom_agent, fallback_agent

    async def limited(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        yield AgentEvent("failure", text="You've hit your limit · resets Jan 1, 2030, 12am (UTC)", code="quota")

    async def backup(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
        yield AgentEvent("text", text="covered")

    path = tmp_path / "journal.jsonl"
    agent = fallback_agent([custom_agent(limited), custom_agent(backup)])
    recorded = await dispatch(agent, AgentInput("brief"), workspace=tmp_path, journal=Journal(path)).result()
    run = dispatch(replay_agent(path), AgentInput("brief"), workspace=tmp_path)
    types = [event.type async for event in run]
    replayed = await run.result()
    assert types == ["failure", "fallback", "text"]
    assert replayed.selected == recorded.selected == "backup"
    assert [a.agent for a in replayed.attempts] == ["limited", "backup"]
    assert replayed.attempts[0].error is not None and replayed.attempts[0].error.code == "quota"
    assert replayed.to_dict() == recorded.to_dict()
