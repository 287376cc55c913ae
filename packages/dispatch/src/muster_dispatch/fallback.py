"""Fallback: on a ``quota`` or ``unavailable`` fault the next candidate runs in the same workspace with the brief.

The result names the selected candidate and lists every attempt; usage includes the failed attempts; when every
candidate hit quota the error is ``quota``, with the earliest reset when all of them gave one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from muster_dispatch.agents import Agent, DispatchAgent, FallbackAgent
from muster_dispatch.errors import DispatchError
from muster_dispatch.events import AgentEvent
from muster_dispatch.faults import earliest, quota_fault, unavailable_fault
from muster_dispatch.inputs import AgentInput
from muster_dispatch.results import Attempt, TurnResult
from muster_dispatch.usage import Usage

RunAgent = Callable[[Agent, AgentInput], Awaitable[TurnResult]]
Emit = Callable[[AgentEvent, Agent], None]


async def run_fallback(agent: FallbackAgent, input: AgentInput, run_agent: RunAgent, emit: Emit) -> TurnResult:
    attempts: list[Attempt] = []
    usage: Usage | None = None
    result: TurnResult | None = None
    selected: Agent = agent.agents[0]
    events = 0
    for index, candidate in enumerate(agent.agents):
        selected = candidate
        # A conversation id belongs to one CLI: later candidates get the original brief only.
        candidate_input = input if index == 0 else AgentInput(input.prompt)
        result = await run_agent(candidate, candidate_input)
        attempts.append(attempt_of(candidate, result))
        events += result.events
        usage = result.usage if usage is None else usage + result.usage
        trigger = trigger_of(result.error, agent.on)
        if trigger is None or index == len(agent.agents) - 1:
            break
        assert result.error is not None
        following = agent.agents[index + 1]
        emit(
            AgentEvent("fallback", text=result.error.message, name=following.name, code=trigger, id=candidate.name),
            candidate,
        )
    assert result is not None and usage is not None
    error = result.error
    if error is not None and all(a.error is not None and a.error.code == "quota" for a in attempts):
        resets = [f.reset_at if (f := quota_fault(a.error)) else None for a in attempts]
        reset_at = earliest(resets)
        details: dict[str, Any] = {"attempts": len(attempts)}
        if reset_at is not None:
            details["reset_at"] = reset_at.isoformat()
        error = DispatchError("quota", "every candidate hit its usage limit: " + error.message, details)
    return replace(result, usage=usage, error=error, attempts=attempts, selected=selected.name, events=events)


def attempt_of(agent: DispatchAgent, result: TurnResult) -> Attempt:
    return Attempt(
        agent=agent.name,
        kind=agent.kind,
        status=result.status,
        usage=result.usage,
        conversation=result.conversation,
        error=result.error,
        text=result.text,
    )


def trigger_of(error: DispatchError | None, on: frozenset[str]) -> str | None:
    """Which fallback trigger ``error`` fires, if any."""
    if error is None:
        return None
    if "quota" in on and error.code == "quota":
        return "quota"
    if "unavailable" in on and unavailable_fault(error) is not None:
        return "unavailable"
    return None
