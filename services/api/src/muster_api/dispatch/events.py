"""A run's journal as a stream: SSE while it runs (resumable with Last-Event-ID on any instance), or the package's
JSONL. Readers wait on the notifier, and send what a wake-up handed over when it continues their stream exactly;
otherwise they read the rows.

SSE: each journal row is a plain message (no ``event:`` field; ``id:`` its sequence number, ``data:`` the
observation ``{seq, at, source, scope, event}``); the stream ends with one ``event: result`` carrying the run. The
rows stay unnamed because an agent's own events include a ``result`` (the CLI's final answer): the one named event
is the end of the stream, whatever the agent emitted.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

import anyio
from fastapi.sse import format_sse_event

from muster_api.dispatch.errors import UnknownRunError
from muster_api.dispatch.store import observation_json
from muster_api.dispatch.worker import UNSHARED_POLL_SECONDS
from muster_dispatch import Observation
from muster_dispatch.journal import to_jsonl

if TYPE_CHECKING:
    from muster_api.dispatch.component import DispatchState

KEEPALIVE_SECONDS = 15.0
PAGE = 1000


# The frames are written by FastAPI's SSE encoder, the one the mesh's inbox stream answers through.
RETRY = format_sse_event(retry=1000)
KEEPALIVE = format_sse_event(comment="keepalive")


def sse_frame(seq: int, data: str) -> bytes:
    return format_sse_event(data_str=data, id=str(seq))


def sse_event(observation: Observation) -> bytes:
    return sse_frame(observation.seq, observation_json(observation))


def _result(run_json: str) -> bytes:
    return format_sse_event(event="result", data_str=run_json)


async def _pages(state: DispatchState, run_id: str, after: int) -> AsyncIterator[list[Observation]]:
    """The stored rows after ``after``, a page at a time."""
    while True:
        batch = await state.store.events_after(run_id, after, PAGE)
        if batch:
            yield batch
            after = batch[-1].seq
        if len(batch) < PAGE:
            return


async def _frames(state: DispatchState, run_id: str, first: list[tuple[int, str]]) -> AsyncIterator[tuple[bytes, int]]:
    """The rows read (``first``, a page) and the pages after them, each page as one write and its last sequence
    number."""
    if first:
        yield b"".join(sse_frame(seq, data) for seq, data in first), first[-1][0]
    if len(first) == PAGE:
        async for batch in _pages(state, run_id, first[-1][0]):
            yield b"".join(sse_event(observation) for observation in batch), batch[-1].seq


def handed_over(state: DispatchState, run_id: str, after: int) -> bytes | None:
    """The whole stream (the rows after ``after``, then the result) of a run this process queued whose end's
    wake-up handed its whole journal over: what ``sse_stream`` would read and send, without a subscription or a
    read. None for any other run."""
    told = state.notifier.ended(run_id)
    if told is None:
        return None
    frames = (sse_event(observation) for observation in told.observations if observation.seq > after)
    return b"".join([RETRY, *frames, _result(told.end.run)])


async def sse_stream(
    state: DispatchState, run_id: str, after: int, over: list[bool] | None = None
) -> AsyncGenerator[bytes, None]:
    """Every event after ``after``, then the final ``result`` event carrying the run, then the end.

    Its first item comes once the stream is subscribed to the run's wake-ups and has read the run (raising
    ``UnknownRunError`` when there is none): the route waits for it before it answers; it is empty when there is
    nothing to send yet. Read after the subscription, the run is the only read a queued run's stream needs: its
    journal is empty, and every row written from then on comes with a wake-up this stream hears; a run this process
    queued needs none while no wake-up has named it. What there is to send leaves in one write when the stream is
    about to wait, or at its end (each write crosses every middleware and the socket), the retry advice with the
    first of them: a run over when its stream opens is one item, and ``over`` (when given) says an item is the last
    by the time it is yielded."""
    wait = KEEPALIVE_SECONDS if state.notifier.shared else UNSHARED_POLL_SECONDS
    async with state.notifier.subscribe(run_id) as sub:
        tail = state.notifier.tail(run_id)
        looks = tail.looks
        # A run this process queued that no wake-up has named since is as it was queued (no rows), and from the
        # subscription on every change comes with a wake-up: the read would tell nothing more.
        unheard = state.notifier.unheard(run_id)
        known, rows = (unheard, []) if unheard is not None else await state.store.run_and_json(run_id, after, PAGE)
        if known is None:
            raise UnknownRunError(f"no run {run_id}", field="run_id", rule="exists")
        out: list[bytes] = []
        retry, started = RETRY, False  # the reconnection delay leaves with the stream's first write
        # None: send the rows read; else what the last wake-up handed over. A queued run has no rows yet.
        handed: list[Observation] | None = [] if known.status == "queued" else None
        while True:
            ended: str | None = None
            if handed is None:
                # The run read before its rows, in one read (and wake-ups counted from before it): once it is over,
                # the rows read after it are all of them.
                if known is None:
                    looks = tail.looks
                    known, rows = await state.store.run_and_json(run_id, after, PAGE)
                paged = False
                async for frames, last in _frames(state, run_id, rows):
                    if paged:  # a long journal leaves a page at a time
                        yield b"".join([retry, *out])
                        retry, out = b"", []
                    out.append(frames)
                    after, paged = last, True
                if known is not None and known.finished:
                    ended = known.model_dump_json()
            elif handed:
                out.append(b"".join(sse_event(observation) for observation in handed))
                after = handed[-1].seq
            if ended is None and tail.end is not None and tail.end.seq == after:  # the end, handed over
                ended = tail.end.run
            if ended is not None:
                if over is not None:
                    over.append(True)
                yield b"".join([retry, *out, _result(ended)])
                return
            known = None  # a run read earlier may have ended since, unheard: read again before rows are read
            if out:
                yield b"".join([retry, *out])
                retry, out = b"", []
            elif not started:  # the route's answer: subscribed, the run known, nothing to send yet
                yield b""
            started = True
            with anyio.move_on_after(wait) as waited:
                await sub.wait()
            handed = tail.since(after) if tail.looks == looks and not waited.cancelled_caught else None
            if waited.cancelled_caught and state.notifier.shared:
                yield retry + KEEPALIVE
                retry = b""


async def jsonl_lines(state: DispatchState, run_id: str) -> AsyncIterator[str]:
    async for batch in _pages(state, run_id, 0):
        yield "".join(to_jsonl(o) + "\n" for o in batch)
