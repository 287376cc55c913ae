"""The stream a Dispatch hands its events through: in order, to every waiting reader, none lost to a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from muster_dispatch.event_stream import EventStream
from muster_dispatch.events import AgentEvent

pytestmark = pytest.mark.anyio


async def test_items_come_out_in_order_and_a_reader_waits_for_the_next() -> None:
    stream = EventStream()
    stream.put(AgentEvent("text", text="a"))
    stream.put(AgentEvent("text", text="b"))
    assert [await stream.get(), await stream.get()] == [AgentEvent("text", text="a"), AgentEvent("text", text="b")]
    later = asyncio.ensure_future(stream.get())
    await asyncio.sleep(0)
    assert not later.done()
    stream.put(None)
    assert await later is None


async def test_waiting_readers_are_served_in_turn() -> None:
    stream = EventStream()
    first = asyncio.ensure_future(stream.get())
    second = asyncio.ensure_future(stream.get())
    await asyncio.sleep(0)
    stream.put(AgentEvent("text", text="1"))
    stream.put(AgentEvent("text", text="2"))
    assert await first == AgentEvent("text", text="1")
    assert await second == AgentEvent("text", text="2")


async def test_a_reader_cancelled_after_its_wake_up_hands_the_item_to_the_next() -> None:
    stream = EventStream()
    cancelled = asyncio.ensure_future(stream.get())
    waiting = asyncio.ensure_future(stream.get())
    await asyncio.sleep(0)
    stream.put(AgentEvent("text", text="x"))  # wakes the first reader...
    cancelled.cancel()  # ...which is cancelled before it runs
    assert await waiting == AgentEvent("text", text="x")
    assert cancelled.cancelled()
