"""What a run's SSE stream reads: subscribed before it reads the run, a stream opened while its run is queued reads
once (the run and its rows, none yet), and not at all when this process queued the run and no wake-up has named it
since; rows written after come with the wake-ups of the writes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from a2a.types import AgentCard, TaskState
from sqlalchemy.exc import IntegrityError

from muster_api.db.engine import create_engine
from muster_api.dispatch.component import DispatchState, run_store
from muster_api.dispatch.errors import UnknownRunError
from muster_api.dispatch.events import handed_over, sse_stream
from muster_api.dispatch.models import Run
from muster_api.dispatch.notify import RunEnd, RunNotifier, RunWaiters
from muster_api.dispatch.routes import SseResponse
from muster_api.dispatch.store import SqlRunStore, new_run_id, observation_json
from muster_api.dispatch.wakefiles import run_file
from muster_api.dispatch.worker import ending
from muster_api.served.handler import ServedAgentHandler
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

    async def run_and_events(self, run_id: str, after: int, limit: int = 1000) -> Any:
        self.reads.append("run, events")
        return await self.store.run_and_events(run_id, after, limit)


def _row(seq: int) -> Observation:
    return Observation(seq, NOW.isoformat(), "agent", {}, {"type": "text", "text": str(seq)})


@asynccontextmanager
async def process(db_url: str) -> AsyncIterator[tuple[RunNotifier, SqlRunStore]]:
    """One process's notifier and run store on the database, closed after."""
    engine = create_engine(Settings(database_url=db_url).database_url)
    notifier = RunNotifier(engine)
    store = run_store(engine, notifier)
    try:
        yield notifier, store
    finally:
        await store.aclose()
        await engine.dispose()


@asynccontextmanager
async def two_processes(db_url: str) -> AsyncIterator[tuple[RunNotifier, Counting, RunNotifier, SqlRunStore]]:
    """Two processes on the database, their notifiers listening: the first one's store counts its reads."""
    async with (
        process(db_url) as (notifier, store),
        process(db_url) as (other, elsewhere),
        anyio.create_task_group() as group,
    ):
        await group.start(notifier.run)
        await group.start(other.run)
        yield notifier, Counting(store), other, elsewhere
        group.cancel_scope.cancel()


def _state(notifier: RunNotifier, store: Any, **more: Any) -> DispatchState:
    return cast(DispatchState, SimpleNamespace(notifier=notifier, store=store, **more))


async def test_a_stream_of_a_run_this_process_queued_reads_nothing(db_url: str) -> None:
    async with process(db_url) as (notifier, store), anyio.create_task_group() as group:
        counting = Counting(store)
        await group.start(notifier.run)
        run_id = await _queue(store, new_run_id(), "w")
        stream = sse_stream(_state(notifier, counting), run_id, 0)
        assert await anext(stream) == b""  # nothing to send yet: the retry advice waits for the first rows
        rows = [_row(1), _row(2)]
        await store.append_events(run_id, rows[:1])
        with anyio.fail_after(30):
            first = await anext(stream)
        assert first.startswith(b"retry: 1000\n\n") and first.endswith(b"\nid: 1\n\n")
        assert counting.reads == []
        # The rest, however it is woken, up to the end.
        claimed = await store.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None
        end = ending(claimed[0], _completed(), 2)
        assert await store.finish(run_id, "w1", _completed(), rows[1:], end)
        with anyio.fail_after(30):
            rest = b"".join([chunk async for chunk in stream]).decode()
        assert rest.count("id: ") == 1 and "id: 2\n" in rest and rest.count("event: result") == 1
        group.cancel_scope.cancel()


async def test_a_stream_of_no_run_refuses_before_its_first_item(db_url: str) -> None:
    async with process(db_url) as (notifier, store):
        with pytest.raises(UnknownRunError):
            await anext(sse_stream(_state(notifier, store), new_run_id(), 0))


async def test_rows_read_for_a_stream_say_what_a_handed_row_says(db_url: str) -> None:
    async with process(db_url) as (_, store):
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


async def test_the_stream_of_a_run_over_when_it_opens_is_one_item(db_url: str) -> None:
    """Rows and result in the first item, which the route answers without keeping a stream open."""
    async with process(db_url) as (notifier, store):
        run_id = await _queue(store, new_run_id(), "w")
        claimed = await store.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None
        rows = [_row(1), _row(2)]
        assert await store.finish(run_id, "w1", _completed(), rows, ending(claimed[0], _completed(), 2))
        over: list[bool] = []
        stream = sse_stream(_state(notifier, store), run_id, 0, over)
        first = (await anext(stream)).decode()
        await stream.aclose()
        assert over == [True]
        assert first.startswith("retry: 1000\n\n") and first.count("\nid: ") == 2
        assert first.endswith("\n\n") and first.count("event: result\n") == 1 and first.index("event: result") > 0


def _events(stream_text: str) -> list[tuple[str | None, str | None, Any]]:
    """A stream's events as (event name, id, decoded data), its retry advice left out."""
    found = []
    for block in stream_text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith("retry"))
        if fields:
            found.append((fields.get("event"), fields.get("id"), json.loads(fields["data"])))
    return found


async def test_a_short_run_queued_here_streams_what_its_end_handed_over_without_a_read(db_url: str) -> None:
    """The end of a run whose journal is one write hands the whole journal over with it: a stream of the process that
    queued the run, opened after that, reads nothing and says what a stream reading the rows says."""
    async with two_processes(db_url) as (notifier, counting, other, elsewhere):
        store = counting.store
        run_id = await _queue(store, new_run_id(), "w")
        # The wake-up carries rows across processes on PostgreSQL (NOTIFY), within the process on SQLite (wake files
        # carry nothing): there the process that queued it executes it, as `muster serve` with its own workers does.
        worker = elsewhere if db_url.startswith("postgresql") else store
        claimed = await worker.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None
        rows = [_row(1), _row(2), _row(3)]
        assert await worker.finish(run_id, "w1", _completed(), rows, ending(claimed[0], _completed(), 3))
        with anyio.fail_after(30):
            while notifier.ended(run_id) is None:
                await anyio.sleep(0.01)
        kept = handed_over(_state(notifier, counting), run_id, 0)
        assert kept is not None and counting.reads == []
        assert kept.startswith(b"retry: 1000\n\n")
        read = b"".join([chunk async for chunk in sse_stream(_state(other, Counting(elsewhere)), run_id, 0)])
        assert _events(kept.decode()) == _events(read.decode())
        assert [seq for _, seq, _ in _events(kept.decode())] == ["1", "2", "3", None]
        resumed = handed_over(_state(notifier, counting), run_id, 2)
        assert resumed is not None and [seq for _, seq, _ in _events(resumed.decode())] == ["3", None]
        assert handed_over(_state(other, elsewhere), run_id, 0) is None  # not queued there


async def test_a_run_whose_journal_took_several_writes_is_read(db_url: str) -> None:
    async with process(db_url) as (notifier, store):
        counting = Counting(store)
        run_id = await _queue(store, new_run_id(), "w")
        claimed = await store.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None
        await store.append_events(run_id, [_row(1)])
        assert await store.finish(run_id, "w1", _completed(), [_row(2)], ending(claimed[0], _completed(), 2))
        assert handed_over(_state(notifier, counting), run_id, 0) is None
        streamed = b"".join([chunk async for chunk in sse_stream(_state(notifier, counting), run_id, 0)])
        assert counting.reads == ["run, rows"]
        assert [seq for _, seq, _ in _events(streamed.decode())] == ["1", "2", None]


def test_only_a_whole_journal_with_its_end_is_kept_for_a_run_queued_here() -> None:
    waiters = RunWaiters()
    runs = [Run(id=f"r{i}", agent="a", prompt="p", workspace="w", status="queued", queued_at=NOW) for i in range(5)]
    for run in runs:
        waiters.queued(run)
    end = RunEnd(2, runs[0].model_dump_json())
    waiters.hand("r0", [_row(1), _row(2)], end)
    waiters.hand("r1", [_row(2)], end)  # not from its first row: something was missed
    waiters.hand("r2", [_row(1), _row(2)], None)  # not its end
    waiters.hand("r3", [_row(1), _row(2)], RunEnd(3, end.run))  # not its last row
    waiters.hand("elsewhere", [_row(1), _row(2)], end)  # not queued here
    assert list(waiters.ended) == ["r0"] and waiters.ended["r0"].observations == (_row(1), _row(2))
    waiters.fire(["r0"])  # an end is final: a later wake-up naming the run changes nothing
    waiters.fire_all()
    assert list(waiters.ended) == ["r0"]
    for index in range(RunWaiters.UNHEARD + 1):
        waiters.queued(runs[4].model_copy(update={"id": f"q{index}"}))
        waiters.hand(f"q{index}", [], RunEnd(0, end.run))
    assert len(waiters.ended) == RunWaiters.UNHEARD and "r0" not in waiters.ended


async def test_a_stream_of_a_run_queued_by_another_process_reads_the_run_once(db_url: str) -> None:
    async with two_processes(db_url) as (notifier, counting, _, elsewhere):
        run_id = await _queue(elsewhere, new_run_id(), "w")
        stream = sse_stream(_state(notifier, counting), run_id, 0)
        assert await anext(stream) == b""
        assert counting.reads == ["run, rows"]
        await elsewhere.append_events(run_id, [_row(1)])
        with anyio.fail_after(30):
            assert (await anext(stream)).endswith(b"\nid: 1\n\n")
        await stream.aclose()


async def test_a_run_queued_here_that_a_wake_up_named_is_read_again(db_url: str) -> None:
    """Rows another process wrote before the stream opened reach it: their wake-up made this process forget the run
    as it queued it."""
    async with two_processes(db_url) as (notifier, counting, _, elsewhere):
        run_id = await _queue(counting.store, new_run_id(), "w")
        assert notifier.unheard(run_id) is not None
        assert await elsewhere.claim("w1", NOW, NOW + LEASE) is not None
        await elsewhere.append_events(run_id, [_row(1), _row(2)])
        with anyio.fail_after(30):
            while notifier.unheard(run_id) is not None:
                await anyio.sleep(0.01)
        stream = sse_stream(_state(notifier, counting), run_id, 0)
        first = await anext(stream)
        assert counting.reads == ["run, rows"]
        assert first.count(b"\nid: ") == 2
        await stream.aclose()


def test_what_this_process_queued_is_forgotten_at_any_wake_up_naming_it_or_all() -> None:
    waiters = RunWaiters()
    runs = [Run(id=f"r{i}", agent="a", prompt="p", workspace="w", status="queued", queued_at=NOW) for i in range(3)]
    for run in runs:
        waiters.queued(run)
    waiters.hand("r0", [], None)
    waiters.fire(["r1"])
    assert list(waiters.unheard) == ["r2"]
    waiters.fire_all()  # a lost listening connection: anything may have been missed
    assert waiters.unheard == {}
    for index in range(RunWaiters.UNHEARD + 1):
        waiters.queued(runs[0].model_copy(update={"id": f"q{index}"}))
    assert len(waiters.unheard) == RunWaiters.UNHEARD and "q0" not in waiters.unheard


def test_a_wake_of_one_file_forgets_the_runs_queued_here_of_that_file_alone() -> None:
    waiters = RunWaiters(group=run_file)
    ids = [new_run_id() for _ in range(64)]
    for run_id in ids:
        waiters.queued(Run(id=run_id, agent="a", prompt="p", workspace="w", status="queued", queued_at=NOW))
    woken = run_file(ids[0])
    waiters.hand(ids[1], [], None)  # forgotten on its own before its file wakes
    waiters.forget_group(woken)
    assert set(waiters.unheard) == {run_id for run_id in ids[2:] if run_file(run_id) != woken}
    for run_id in ids:
        waiters.forget_group(run_file(run_id))
    assert waiters.unheard == {}


async def test_a_run_whose_queueing_failed_is_not_known_here(db_url: str) -> None:
    async with process(db_url) as (notifier, store):
        await _queue(store, new_run_id(), "busy")
        refused = new_run_id()
        with pytest.raises(IntegrityError):  # one run per workspace at a time
            await _queue(store, refused, "busy")
        assert notifier.unheard(refused) is None
        with pytest.raises(UnknownRunError):
            await anext(sse_stream(_state(notifier, store), refused, 0))


async def test_a_served_agents_answer_waits_for_a_run_queued_here_without_reading_it(db_url: str) -> None:
    """A blocking A2A ``SendMessage`` waits for the run it queued: no read, its end's wake-up handed everything over
    (a run whose journal took several writes is read once, after the wake-up of its end)."""
    async with process(db_url) as (notifier, store), anyio.create_task_group() as group:
        counting = Counting(store)
        state = _state(notifier, counting, settings=SimpleNamespace(renew_every=60.0))
        handler = ServedAgentHandler(state, "fast", cast(AgentCard, None))
        await group.start(notifier.run)
        run_id = await _queue(store, new_run_id(), "w")
        answers: list[Any] = []

        async def answer(run_id: str) -> None:
            answers.append(await handler._finished(run_id))

        group.start_soon(answer, run_id)
        await anyio.wait_all_tasks_blocked()
        assert counting.reads == [] and not answers
        claimed = await store.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None
        assert await store.finish(run_id, "w1", _completed(), [_row(1)], ending(claimed[0], _completed(), 1))
        with anyio.fail_after(30):
            while not answers:
                await anyio.sleep(0.01)
        assert counting.reads == []
        assert answers[0].id == run_id and answers[0].status.state == TaskState.TASK_STATE_COMPLETED
        stored = await store.get(run_id)
        assert stored is not None
        read = await handler._task(stored)
        assert answers[0] == read and len(read.history) == 2  # the prompt and the one row
        counting.reads.clear()
        longer = await _queue(store, new_run_id(), "w2")
        group.start_soon(answer, longer)
        await anyio.wait_all_tasks_blocked()
        claimed = await store.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None
        await store.append_events(longer, [_row(1)])
        assert await store.finish(longer, "w1", _completed(), [_row(2)], ending(claimed[0], _completed(), 2))
        with anyio.fail_after(30):
            while len(answers) < 2:
                await anyio.sleep(0.01)
        assert counting.reads == ["run, events"] and len(answers[1].history) == 3
        group.cancel_scope.cancel()


async def _sent(items: AsyncIterator[bytes], over: list[bool]) -> list[tuple[str, bytes | None, bool | None]]:
    sent: list[tuple[str, bytes | None, bool | None]] = []

    async def send(message: Any) -> None:
        sent.append((message["type"], message.get("body"), message.get("more_body")))

    await SseResponse(items, over).stream_response(send)
    return sent


async def test_the_sse_response_ends_with_its_last_item_and_writes_nothing_for_an_empty_one() -> None:
    over: list[bool] = []

    async def items() -> AsyncIterator[bytes]:
        yield b""  # the stream's first item when it has nothing to send yet
        yield b"id: 1\n\n"
        over.append(True)
        yield b"event: result\n\n"

    assert (await _sent(items(), over))[1:] == [
        ("http.response.body", b"id: 1\n\n", True),
        ("http.response.body", b"event: result\n\n", False),
    ]


async def test_an_sse_response_ends_when_its_client_leaves_and_only_then() -> None:
    closed, left, written = anyio.Event(), anyio.Event(), anyio.Event()
    sent: list[Any] = []

    async def items() -> AsyncIterator[bytes]:
        try:
            yield b"id: 1\n\n"
            await anyio.sleep_forever()  # a run that goes on without events
            yield b"never"
        finally:
            closed.set()

    async def receive() -> Any:
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)
        if message.get("body"):
            written.set()

    response = SseResponse(items(), [])
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(response, {"type": "http"}, receive, send)
            await written.wait()
            assert not closed.is_set()
            left.set()
            await closed.wait()
    assert [m.get("body") for m in sent] == [None, b"id: 1\n\n"]


async def test_an_sse_response_whose_items_stop_unannounced_still_ends() -> None:
    async def items() -> AsyncIterator[bytes]:
        yield b"id: 1\n\n"

    assert (await _sent(items(), []))[1:] == [
        ("http.response.body", b"id: 1\n\n", True),
        ("http.response.body", b"", False),
    ]
