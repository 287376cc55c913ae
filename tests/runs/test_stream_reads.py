"""What a run's SSE stream reads: subscribed before it reads the run, a stream opened while its run is queued reads
once (the run and its rows, none yet); rows written after come with the wake-ups of the writes."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from muster_api.db.engine import create_engine
from muster_api.dispatch.component import DispatchState, run_store
from muster_api.dispatch.errors import UnknownRunError
from muster_api.dispatch.events import sse_stream
from muster_api.dispatch.notify import RunNotifier
from muster_api.dispatch.store import new_run_id, observation_json
from muster_api.dispatch.worker import ending
from muster_api.settings import Settings
from muster_dispatch import Observation
from tests.runs.test_store import LEASE, NOW, _completed, _queue

pytestmark = pytest.mark.anyio


class Counting:
    """The store, counting the reads a stream makes."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def get(self, run_id: str) -> Any:
        self.reads.append("run")
        return await self.store.get(run_id)

    async def events_after(self, run_id: str, after: int, limit: int = 1000) -> Any:
        self.reads.append("rows")
        return await self.store.events_after(run_id, after, limit)

    async def run_and_json(self, run_id: str, after: int, limit: int = 1000) -> Any:
        self.reads.append("run, rows")
        return await self.store.run_and_json(run_id, after, limit)


async def test_a_stream_opened_while_its_run_is_queued_reads_the_run_once_and_no_rows(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    notifier = RunNotifier(engine)
    store = run_store(engine, notifier)
    try:
        counting = Counting(store)
        state = cast(DispatchState, SimpleNamespace(notifier=notifier, store=counting))
        async with anyio.create_task_group() as group:
            await group.start(notifier.run)
            run_id = await _queue(store, new_run_id(), "w")
            stream = sse_stream(state, run_id, 0)
            assert await anext(stream) == b"retry: 1000\n\n"
            rows = [
                Observation(seq, NOW.isoformat(), "agent", {}, {"type": "text", "text": str(seq)}) for seq in (1, 2)
            ]
            await store.append_events(run_id, rows[:1])
            with anyio.fail_after(30):
                assert (await anext(stream)).endswith(b"\nid: 1\n\n")
            assert counting.reads == ["run, rows"]
            # The rest, however it is woken, up to the end.
            claimed = await store.claim("w1", NOW, NOW + LEASE)
            assert claimed is not None
            end = ending(claimed[0], _completed(), 2)
            assert await store.finish(run_id, "w1", _completed(), rows[1:], end)
            with anyio.fail_after(30):
                rest = b"".join([chunk async for chunk in stream]).decode()
            assert rest.count("id: ") == 1 and "id: 2\n" in rest and rest.count("event: result") == 1
            group.cancel_scope.cancel()
    finally:
        await store.aclose()
        await engine.dispose()


async def test_a_stream_of_no_run_refuses_before_its_first_item(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    notifier = RunNotifier(engine)
    store = run_store(engine, notifier)
    try:
        state = cast(DispatchState, SimpleNamespace(notifier=notifier, store=store))
        with pytest.raises(UnknownRunError):
            await anext(sse_stream(state, new_run_id(), 0))
    finally:
        await store.aclose()
        await engine.dispose()


async def test_rows_read_for_a_stream_say_what_a_handed_row_says(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    store = run_store(engine, RunNotifier(engine))
    try:
        run_id = await _queue(store, new_run_id(), "w")
        rows = [
            Observation(1, NOW.isoformat(), "agent", {"turn": 1}, {"type": "text", "text": 'héllo ✓ "quoted"\n'}),
            Observation(2, NOW.isoformat(), "harness", {}, {"type": "usage", "nested": {"a": [1, 2.5, None, True]}}),
        ]
        await store.append_events(run_id, rows)
        run, read = await store.run_and_json(run_id, 0)
        assert run is not None and run.id == run_id
        assert [(seq, json.loads(text)) for seq, text in read] == [(o.seq, o.to_dict()) for o in rows]
        if db_url.startswith("sqlite"):  # the very text (PostgreSQL's jsonb keeps no key order)
            assert read == [(o.seq, observation_json(o)) for o in rows]
        assert [seq for seq, _ in (await store.run_and_json(run_id, 1))[1]] == [2]
        assert await store.run_and_json(new_run_id(), 0) == (None, [])
    finally:
        await store.aclose()
        await engine.dispose()


async def test_the_stream_of_a_run_over_when_it_opens_is_one_item(db_url: str) -> None:
    """Rows and result in the first item, which the route answers without keeping a stream open."""
    engine = create_engine(Settings(database_url=db_url).database_url)
    notifier = RunNotifier(engine)
    store = run_store(engine, notifier)
    try:
        state = cast(DispatchState, SimpleNamespace(notifier=notifier, store=store))
        run_id = await _queue(store, new_run_id(), "w")
        claimed = await store.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None
        rows = [Observation(seq, NOW.isoformat(), "agent", {}, {"type": "text", "text": str(seq)}) for seq in (1, 2)]
        assert await store.finish(run_id, "w1", _completed(), rows, ending(claimed[0], _completed(), 2))
        over: list[bool] = []
        stream = sse_stream(state, run_id, 0, over)
        first = (await anext(stream)).decode()
        await stream.aclose()
        assert over == [True]
        assert first.startswith("retry: 1000\n\n") and first.count("\nid: ") == 2
        assert first.endswith("\n\n") and first.count("event: result\n") == 1 and first.index("event: result") > 0
    finally:
        await store.aclose()
        await engine.dispose()
