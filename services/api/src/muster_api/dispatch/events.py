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

from muster_api.dispatch.models import Run
from muster_api.dispatch.worker import UNSHARED_POLL_SECONDS
from muster_dispatch import Observation
from muster_dispatch.journal import to_jsonl

if TYPE_CHECKING:
    from muster_api.dispatch.component import DispatchState

KEEPALIVE_SECONDS = 15.0
PAGE = 1000


def sse_event(observation: Observation) -> str:
    data = json.dumps(observation.to_dict(), ensure_ascii=False)
    return f"id: {observation.seq}\ndata: {data}\n\n"


def _result(run_json: str) -> str:
    return f"event: result\ndata: {run_json}\n\n"


async def _pages(state: DispatchState, run_id: str, after: int) -> AsyncIterator[list[Observation]]:
    """The stored rows after ``after``, a page at a time."""
    while True:
        batch = await state.store.events_after(run_id, after, PAGE)
        if batch:
            yield batch
            after = batch[-1].seq
        if len(batch) < PAGE:
            return


async def sse_stream(state: DispatchState, run: Run, after: int) -> AsyncIterator[str]:
    """Every event after ``after``, then the final ``result`` event carrying the run, then the end. ``run`` is the
    run as read before the stream began."""
    wait = KEEPALIVE_SECONDS if state.notifier.shared else UNSHARED_POLL_SECONDS
    yield "retry: 1000\n\n"
    async with state.notifier.subscribe(run.id) as sub:
        tail = state.notifier.tail(run.id)
        handed: list[Observation] | None = None  # what the last wake-up handed over; None: read the rows
        # The run read before its rows: once it is over, the rows read after it are all of them. A run read before
        # the subscription may have ended unheard since: only a finished one is trusted.
        known: Run | None = run if run.finished else None
        looks = tail.looks
        while True:
            if handed is None:
                looks = tail.looks
                known = known or await state.store.get(run.id)
                async for batch in _pages(state, run.id, after):
                    yield "".join(sse_event(observation) for observation in batch)
                    after = batch[-1].seq
                if known is not None and known.finished:
                    yield _result(known.model_dump_json())
                    return
                known = None
            elif handed:  # one write for the batch: each write crosses every middleware and the socket
                yield "".join(sse_event(observation) for observation in handed)
                after = handed[-1].seq
            if tail.end is not None and tail.end.seq == after:  # the end, handed over: every row is sent
                yield _result(tail.end.run)
                return
            with anyio.move_on_after(wait) as waited:
                await sub.wait()
            handed = tail.since(after) if tail.looks == looks and not waited.cancelled_caught else None
            if waited.cancelled_caught and state.notifier.shared:
                yield ": keepalive\n\n"


async def jsonl_lines(state: DispatchState, run_id: str) -> AsyncIterator[str]:
    async for batch in _pages(state, run_id, 0):
        yield "".join(to_jsonl(o) + "\n" for o in batch)
