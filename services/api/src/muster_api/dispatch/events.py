"""A run's journal as a stream: SSE while it runs (resumable with Last-Event-ID on any instance), or the package's
JSONL. Readers wait on the notifier, and send what a wake-up handed over when it continues their stream exactly;
otherwise they read the rows.

SSE: each journal row is a plain message (no ``event:`` field; ``id:`` its sequence number, ``data:`` the
observation ``{seq, at, source, scope, event}``); the stream ends with one ``event: result`` carrying the run. The
rows stay unnamed because an agent's own events include a ``result`` (the CLI's final answer): the one named event
is the end of the stream, whatever the agent emitted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import anyio

from muster_api.dispatch.worker import UNSHARED_POLL_SECONDS
from muster_dispatch import Observation
from muster_dispatch.journal import to_jsonl

if TYPE_CHECKING:
    from muster_api.dispatch.component import DispatchState

KEEPALIVE_SECONDS = 15.0


def sse_event(observation: Observation) -> str:
    data = json.dumps(observation.to_dict(), ensure_ascii=False)
    return f"id: {observation.seq}\ndata: {data}\n\n"


async def sse_stream(state: DispatchState, run_id: str, after: int) -> AsyncIterator[str]:
    """Every event after ``after``, then the final ``result`` event carrying the run, then the end."""
    wait = KEEPALIVE_SECONDS if state.notifier.shared else UNSHARED_POLL_SECONDS
    yield "retry: 1000\n\n"
    async with state.notifier.subscribe(run_id) as sub:
        tail = state.notifier.tail(run_id)
        handed: list[Observation] | None = None  # what the last wake-up handed over; None: read the rows
        looks = tail.looks
        while True:
            if handed is None:
                looks = tail.looks
                batch = await state.store.events_after(run_id, after)
            sent = batch if handed is None else handed
            if sent:  # one write for the batch: each write crosses every middleware and the socket
                yield "".join(sse_event(observation) for observation in sent)
                after = sent[-1].seq
            if handed is None and batch:
                continue  # the rows may hold more
            if tail.end is not None and tail.end.seq == after:  # the end, handed over: every row is sent
                yield f"event: result\ndata: {tail.end.run}\n\n"
                return
            if handed is None:
                run = await state.store.get(run_id)
                if run is not None and run.finished:
                    # The worker flushed the journal before it stored the end: one more read sees every last event.
                    last = await state.store.events_after(run_id, after)
                    if last:
                        yield "".join(sse_event(observation) for observation in last)
                        after = last[-1].seq
                    else:
                        yield f"event: result\ndata: {run.model_dump_json()}\n\n"
                        return
                    handed = None
                    continue
            with anyio.move_on_after(wait) as waited:
                await sub.wait()
            handed = tail.since(after) if tail.looks == looks and not waited.cancelled_caught else None
            if waited.cancelled_caught and state.notifier.shared:
                yield ": keepalive\n\n"


async def jsonl_lines(state: DispatchState, run_id: str) -> AsyncIterator[str]:
    after = 0
    while True:
        batch = await state.store.events_after(run_id, after)
        if not batch:
            return
        yield "".join(to_jsonl(o) + "\n" for o in batch)
        after = batch[-1].seq
