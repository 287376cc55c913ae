"""The conformance suite every ``CallStore`` must pass (in memory, SQL on each database).

It needs no test framework: each check is ``async def check(make)`` where ``make()`` is an async context manager
yielding a new, empty store. A test runner parametrises over ``CHECKS``, one test per named behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from muster_a2a.calls import CallStore
from muster_a2a.models import CallRecord, ToolResult

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)

StoreFactory = Callable[[], AbstractAsyncContextManager[CallStore]]
Check = Callable[[StoreFactory], Coroutine[Any, Any, None]]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


def sample(call_id: str, *, at: datetime = T0, **fields: object) -> CallRecord:
    values: dict[str, object] = {
        "id": call_id,
        "agent": "alpha",
        "tool": "Alpha_echo",
        "task": "complete hello ✓",
        "created_at": at,
        "updated_at": at,
        "expires_at": at + timedelta(minutes=5),
    }
    values.update(fields)
    return CallRecord.model_validate(values)


@check
async def a_saved_call_reads_back(make: StoreFactory) -> None:
    async with make() as store:
        record = sample("c1", task_id="t-1", context_id="ctx-1", dialect="v1.0/JSONRPC", state="working", polls=3)
        await store.save(record)
        assert await store.get("c1") == record
        assert await store.get("missing") is None


@check
async def a_save_replaces_the_call(make: StoreFactory) -> None:
    async with make() as store:
        record = sample("c2")
        await store.save(record)
        record.state = "completed"
        record.task_id = "t-2"
        record.updated_at = T0 + timedelta(seconds=7)
        record.result = ToolResult(
            text="answer\nsecond",
            metadata={
                "agent": "alpha",
                "task_id": "t-2",
                "context_id": None,
                "state": "completed",
                "polls": 1,
                "ms": 12,
            },
        )
        await store.save(record)
        loaded = await store.get("c2")
        assert loaded == record
        assert loaded is not None and loaded.result is not None and loaded.result.metadata["polls"] == 1
        assert loaded.updated_at.tzinfo is not None


@check
async def in_flight_lists_unfinished_calls_oldest_first(make: StoreFactory) -> None:
    async with make() as store:
        done = sample("c3", at=T0, result=ToolResult(text="ok"))
        later = sample("c5", at=T0 + timedelta(seconds=2), task_id="t-5", state="working")
        earlier = sample("c4", at=T0 + timedelta(seconds=1))
        for record in (done, later, earlier):
            await store.save(record)
        mine = {"c3", "c4", "c5"}
        assert [r.id for r in await store.in_flight() if r.id in mine] == ["c4", "c5"]
        later.result = ToolResult(text="finished")
        await store.save(later)
        assert [r.id for r in await store.in_flight() if r.id in mine] == ["c4"]


@check
async def a_save_leaves_the_lease_to_claims(make: StoreFactory) -> None:
    async with make() as store:
        lease = T0 + timedelta(seconds=30)
        record = sample("c6", owner="me", lease_expires_at=lease)
        await store.save(record)
        assert await store.get("c6") == record, "an insert stores the owner and the lease"
        record.owner, record.lease_expires_at, record.state = "intruder", T0, "working"
        await store.save(record)
        loaded = await store.get("c6")
        assert loaded is not None and loaded.state == "working"
        assert (loaded.owner, loaded.lease_expires_at) == ("me", lease), "a replace leaves the lease to claim/renew"
        record.result = ToolResult(text="over")
        await store.save(record)
        finished = await store.get("c6")
        assert finished is not None and finished.result == record.result
        assert (finished.owner, finished.lease_expires_at) == (None, None), "a finished call is held by nobody"


@check
async def claims_take_free_and_lapsed_calls_only(make: StoreFactory) -> None:
    async with make() as store:
        live, lapsed, until = T0 + timedelta(hours=1), T0 - timedelta(seconds=1), T0 + timedelta(seconds=30)
        records = [
            sample("k1", at=T0 + timedelta(seconds=1)),  # nobody holds it
            sample("k2", at=T0 + timedelta(seconds=2), owner="other", lease_expires_at=live),
            sample("k3", at=T0 + timedelta(seconds=3), owner="other", lease_expires_at=lapsed),
            sample("k4", at=T0 + timedelta(seconds=4), result=ToolResult(text="over")),
        ]
        for record in records:
            await store.save(record)
        mine = {"k1", "k2", "k3", "k4"}
        claimed = [r for r in await store.claim("me", T0, until) if r.id in mine]
        assert [r.id for r in claimed] == ["k1", "k3"], "free and lapsed calls, oldest first; never a held or done one"
        assert all((r.owner, r.lease_expires_at) == ("me", until) for r in claimed)
        stored = await store.get("k3")
        assert stored is not None and (stored.owner, stored.lease_expires_at) == ("me", until)
        assert not [r for r in await store.claim("third", T0, until) if r.id in mine], (
            "held calls are not claimed again"
        )

        later = until + timedelta(seconds=10)
        assert await store.renew("me", ["k1", "k2", "k3", "k4", "missing"], later) == {"k1", "k3"}
        assert not [r for r in await store.claim("third", until + timedelta(seconds=1), later) if r.id in mine]
        await store.release("me", ["k1"])
        released = await store.get("k1")
        assert released is not None and (released.owner, released.lease_expires_at) == (None, None)
        assert [r.id for r in await store.claim("third", T0, later) if r.id in mine] == ["k1"]
        assert await store.renew("me", ["k1"], later) == set(), "a call taken over is not renewed by its old owner"
        await store.release("me")
        assert [r.id for r in await store.claim("third", T0, later) if r.id in mine] == ["k3"]
        # k2's lease (held by "other") lapses at T0+1h.
        assert "k2" not in {r.id for r in await store.claim("fourth", live - timedelta(seconds=1), later)}
        assert "k2" in {r.id for r in await store.claim("fourth", live + timedelta(seconds=1), later)}


@check
async def concurrent_claimers_never_share_a_call(make: StoreFactory) -> None:
    async with make() as store:
        now, until = T0 + timedelta(hours=2), T0 + timedelta(hours=3)
        ids = [f"q{n:02d}" for n in range(12)]
        for n, call_id in enumerate(ids):
            await store.save(sample(call_id, at=T0 + timedelta(hours=1, seconds=n)))
        [first] = await store.claim("solo", now, until, limit=1)
        got: dict[str, list[str]] = {}

        async def claimer(owner: str) -> None:
            got[owner] = [r.id for r in await store.claim(owner, now, until, limit=4)]

        async with anyio.create_task_group() as group:
            for owner in ("a", "b", "c", "d"):
                group.start_soon(claimer, owner)
        everyone = [call_id for claimed in got.values() for call_id in claimed if call_id in ids]
        assert first.id not in everyone
        assert len(everyone) == len(set(everyone)), f"a call was claimed twice: {got}"
        assert first.id == "q00"
        assert sorted([first.id, *everyone]) == ids, "concurrent claimers skip each other's calls but leave none behind"
        for call_id in ids:
            stored = await store.get(call_id)
            assert stored is not None and stored.owner in {"solo", "a", "b", "c", "d"}
            assert stored.id == first.id or stored.id in got[stored.owner]
