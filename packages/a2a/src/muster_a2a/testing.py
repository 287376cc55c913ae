"""Conformance suite for ``CallStore`` implementations: every store (in memory, SQL on each database) must pass.

Usage from a test: ``await check_call_store(store)`` with a fresh, empty store.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from muster_a2a.calls import CallStore
from muster_a2a.models import CallRecord, ToolResult

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)


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


async def check_round_trip(store: CallStore) -> None:
    record = sample("c1", task_id="t-1", context_id="ctx-1", dialect="v1.0/JSONRPC", state="working", polls=3)
    await store.save(record)
    assert await store.get("c1") == record
    assert await store.get("missing") is None


async def check_save_replaces(store: CallStore) -> None:
    record = sample("c2")
    await store.save(record)
    record.state = "completed"
    record.task_id = "t-2"
    record.updated_at = T0 + timedelta(seconds=7)
    record.result = ToolResult(
        text="answer\nsecond",
        metadata={"agent": "alpha", "task_id": "t-2", "context_id": None, "state": "completed", "polls": 1, "ms": 12},
    )
    await store.save(record)
    loaded = await store.get("c2")
    assert loaded == record
    assert loaded is not None and loaded.result is not None and loaded.result.metadata["polls"] == 1
    assert loaded.updated_at.tzinfo is not None


async def check_in_flight(store: CallStore) -> None:
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


async def check_call_store(store: CallStore) -> None:
    """Every check, in order, on one fresh store (ids do not overlap)."""
    await check_round_trip(store)
    await check_save_replaces(store)
    await check_in_flight(store)
