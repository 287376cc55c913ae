"""The run store's writes that a worker chains: the end of a run claims the next queued one for the same owner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from muster_api.db.engine import create_engine
from muster_api.dispatch.component import run_store
from muster_api.dispatch.notify import RunNotifier
from muster_api.dispatch.store import SqlRunStore, new_run_id
from muster_api.settings import Settings
from muster_dispatch import Observation

pytestmark = pytest.mark.anyio

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)


async def _queue(store: SqlRunStore, run_id: str, workspace: str) -> str:
    await store.create(
        {
            "id": run_id,
            "agent": "fast",
            "prompt": "p",
            "workspace": workspace,
            "active_workspace": workspace,
            "request": {"continuation": None, "live_input": False},
            "status": "queued",
            "deadline_s": None,
            "idempotency_key": None,
            "queued_at": NOW,
        }
    )
    return run_id


def _two_ids() -> list[str]:
    """Two run ids in claim order (the oldest first: the smaller id)."""
    return sorted([new_run_id(), new_run_id()])


def _completed() -> dict[str, Any]:
    return {"status": "completed", "finished_at": NOW, "text": "done", "attempts": [], "usage": {}, "error": None}


async def test_the_end_of_a_run_claims_the_next_queued_one_for_the_same_owner(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    store = run_store(engine, RunNotifier(engine))
    try:
        first, second = [await _queue(store, run_id, name) for run_id, name in zip(_two_ids(), "ab", strict=True)]
        claimed = await store.claim("w1", NOW, NOW + LEASE)
        assert claimed is not None and claimed[0].id == first
        last = [Observation(1, NOW.isoformat(), "agent", {}, {"type": "text", "text": "done"})]
        stored, following = await store.finish_and_claim(first, "w1", _completed(), last, NOW, NOW + LEASE)
        assert stored and following is not None
        run, has_controls = following
        assert (run.id, run.status, run.worker, run.lease_expires_at) == (second, "running", "w1", NOW + LEASE)
        assert not has_controls
        done = await store.get(first)
        assert done is not None and done.status == "completed" and done.text == "done"
        assert [o.seq for o in await store.events_after(first, 0)] == [1]
        # Nothing queued any more: the end is stored, and nothing is claimed.
        assert await store.finish_and_claim(second, "w1", _completed(), [], NOW, NOW + LEASE) == (True, None)
    finally:
        await store.aclose()
        await engine.dispose()


async def test_an_end_refused_to_a_worker_that_lost_the_run_still_claims_the_next_one(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    store = run_store(engine, RunNotifier(engine))
    try:
        first, second = [await _queue(store, run_id, name) for run_id, name in zip(_two_ids(), "ab", strict=True)]
        assert await store.claim("w1", NOW, NOW + LEASE) is not None
        assert await store.interrupt_lapsed(NOW + 2 * LEASE) == [first]
        last = [Observation(1, NOW.isoformat(), "agent", {}, {"type": "text", "text": "late"})]
        stored, following = await store.finish_and_claim(first, "w1", _completed(), last, NOW, NOW + LEASE)
        assert not stored and following is not None and following[0].id == second
        interrupted = await store.get(first)
        assert interrupted is not None and interrupted.status == "interrupted"
        assert await store.events_after(first, 0) == []  # the late rows of a run taken away are not stored
    finally:
        await store.aclose()
        await engine.dispose()
