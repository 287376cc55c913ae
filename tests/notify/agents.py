"""A custom dispatch agent whose runs fail (not on quota), for the run_failed notification."""

from __future__ import annotations

from collections.abc import AsyncIterator

from muster_dispatch import AgentEvent, AgentInput, CustomContext


async def crash(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    yield AgentEvent("failure", text="the tool exited 1\nmore detail", code="process")
