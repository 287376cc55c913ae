"""Custom agents of the runs benchmark (configured as ``bench_agents:NAME``; bench/runs on PYTHONPATH)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio

from muster_dispatch import AgentEvent, AgentInput, CustomContext

EVENTS = 20
TICKS = 200
TICK_SECONDS = 0.02


async def twenty(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    """A short run: twenty events, the last one the answer."""
    for index in range(EVENTS - 1):
        yield AgentEvent("text_delta", text=str(index))
    yield AgentEvent("text", text="done")


async def ticker(input: AgentInput, context: CustomContext) -> AsyncIterator[AgentEvent]:
    """Events spaced in time, each carrying the wall-clock time it was produced at (``data.t``)."""
    for index in range(TICKS):
        await anyio.sleep(TICK_SECONDS)
        yield AgentEvent("text_delta", text=str(index), data={"t": time.time()})
    yield AgentEvent("text", text="done")
