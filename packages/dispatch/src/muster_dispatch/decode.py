"""``decode_transcript``: the end-of-turn logic of ``dispatch`` applied to output captured elsewhere."""

from __future__ import annotations

from collections.abc import Iterable

from muster_dispatch.agents import CliAgent
from muster_dispatch.events import AgentEvent
from muster_dispatch.harness import Harness
from muster_dispatch.results import Attempt, TurnResult
from muster_dispatch.turn import Signals, TurnState


def decode_events(agent: CliAgent | Harness, stdout_lines: Iterable[str]) -> list[AgentEvent]:
    harness = agent.harness if isinstance(agent, CliAgent) else agent
    out: list[AgentEvent] = []
    for line in stdout_lines:
        out.extend(harness.events(line.rstrip("\r\n")))
    return out


def decode_transcript(
    agent: CliAgent | Harness,
    stdout_lines: Iterable[str],
    *,
    stderr_lines: Iterable[str] = (),
    exit_code: int | None,
) -> TurnResult:
    """The TurnResult ``dispatch`` would give for this stdout, stderr and exit code."""
    harness = agent.harness if isinstance(agent, CliAgent) else agent
    state = TurnState(Signals(harness.quota, harness.unavailable, harness.requires_finished_event))
    for line in stdout_lines:
        for event in harness.events(line.rstrip("\r\n")):
            state.observe(event)
    for line in stderr_lines:
        state.observe(AgentEvent("stderr", text=line.rstrip("\r\n")))
    result = state.conclude(exit_code=exit_code)
    name = agent.name if isinstance(agent, CliAgent) else harness.name
    attempt = Attempt(name, "cli", result.status, result.usage, result.conversation, result.error, result.text)
    return TurnResult(
        status=result.status,
        text=result.text,
        usage=result.usage,
        conversation=result.conversation,
        error=result.error,
        attempts=[attempt],
        selected=name,
        events=result.events,
        exit_code=exit_code,
        stderr=result.stderr,
    )
