"""Custom agents the run tests and the benchmark configure by entrypoint (``tests.runs.agents:NAME``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio

from muster_dispatch import AgentEvent, AgentInput, CustomContext, Usage

EVENTS = 20


async def fast(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    """Twenty events, then a final text: a short run."""
    for index in range(EVENTS - 1):
        yield AgentEvent("text_delta", text=f"{index} ")
    yield AgentEvent("usage", usage=Usage(input=3, output=EVENTS))
    yield AgentEvent("text", text=f"done: {input.prompt}")


async def hold(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    """Says it started, then waits until a file named by the prompt appears in the workspace (or it is stopped)."""
    yield AgentEvent("text", text="started")
    gate = context.workspace / input.prompt
    while not gate.exists():
        await anyio.sleep(0.02)
    yield AgentEvent("text", text="released")


async def broken(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    yield AgentEvent("failure", text="quota hit", code="quota")


async def mark(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    """Appends this process's pid to ``executions`` in the workspace: a run executed twice leaves two lines."""
    with (context.workspace / "executions").open("a", encoding="utf-8") as file:
        file.write(f"{os.getpid()}\n")
    for index in range(5):
        yield AgentEvent("text_delta", text=str(index))
    yield AgentEvent("text", text=str(os.getpid()))


QUOTA_RESET_SECONDS = 3


async def quota_on_demand(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    """A usage limit (reset a few seconds from now) when the prompt asks for one; else a final text."""
    if "hit the quota" in input.prompt:
        reset = datetime.now(UTC) + timedelta(seconds=QUOTA_RESET_SECONDS)
        yield AgentEvent("quota", text="usage limit reached", reset_at=reset)
        yield AgentEvent("failure", text="usage limit reached", code="quota")
        return
    yield AgentEvent("text", text=f"done: {input.prompt}")
