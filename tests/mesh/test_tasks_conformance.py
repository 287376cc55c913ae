"""The tasks' conformance checks on the in-memory store and the SQL store (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest

from muster_mesh import FakeClock, Mesh
from muster_mesh.tasks import (
    CLAIMED_NOTE,
    TOKEN_NOTE,
    ClaimedInOneStep,
    ClaimStep,
    TaskClaim,
    TaskPost,
    Tasks,
    TaskStore,
)
from muster_mesh.tasks_testing import TASK_CHECKS
from muster_mesh.testing import MeshFactory, join
from muster_mesh.tokens import token_hash
from tests.mesh.test_claims_conformance import memory
from tests.mesh.test_conformance_sql import sql_factory

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("name", sorted(TASK_CHECKS))
async def test_memory_store(name: str) -> None:
    await TASK_CHECKS[name](memory)


@pytest.mark.parametrize("name", sorted(TASK_CHECKS))
async def test_sql_store(name: str, db_url: str) -> None:
    await TASK_CHECKS[name](sql_factory(db_url))


async def _no_step(step: ClaimStep) -> ClaimedInOneStep | None:
    return None


def in_transactions(db_url: str) -> MeshFactory:
    """The SQL store without its one-step claim: every claim takes the transaction (as one does when the store has
    not seen the caller's TTL yet), so that path keeps the same rules."""
    base = sql_factory(db_url)

    @asynccontextmanager
    async def make(clock: FakeClock) -> AsyncIterator[Mesh]:
        async with base(clock) as mesh:
            mesh.store.claim_in_one_step = _no_step  # type: ignore[attr-defined]
            yield mesh

    return make


@pytest.mark.parametrize("name", sorted(TASK_CHECKS))
async def test_sql_store_in_transactions(name: str, db_url: str) -> None:
    await TASK_CHECKS[name](in_transactions(db_url))


@pytest.mark.parametrize("own", [False, True], ids=["another_poster", "own_task"])
async def test_sql_store_claims_in_one_step(own: bool, db_url: str) -> None:
    """The one step itself: the claim, its token and attempt, the history row, the poster's message in the task's
    thread, the caller's renewed lease; on a task the caller posted too (its renewal and its sequence are one row)."""
    clock = FakeClock()
    async with sql_factory(db_url)(clock) as mesh:
        tasks = Tasks(mesh)
        worker = await join(mesh, "w", role="builder", ttl_seconds=60)
        boss = worker if own else await join(mesh, "boss")
        # A first call renews through the transaction, where the store learns the TTL the step needs.
        assert (await tasks.claim(TaskClaim(confirm=True), token=worker)).task is None
        posted = (await tasks.post(TaskPost(title='say "hi"', body="b", role="builder", confirm=True), token=boss)).task
        assert posted is not None
        clock.advance(30)
        step = ClaimStep(
            token_hash=token_hash(worker),
            now=mesh.now(),
            only_role=None,
            only_repo=None,
            only_cap=None,
            max_attempts=3,
            fail_reason="cap",
            message_id="m" * 32,
        )
        store: TaskStore = mesh.store  # type: ignore[assignment]
        done = await store.claim_in_one_step(step)
        assert done is not None and done.agent_id == "w" and done.task is not None and done.told_seq == 1
        assert (done.task.task_id, done.task.holder, done.task.fence, done.task.attempts) == (posted.id, "w", 1, 1)
        again = await store.claim_in_one_step(replace(step, message_id="n" * 32))
        assert again is not None and again.task is None and again.told_seq is None
        inbox = (await mesh.read_inbox(token=boss)).messages
        assert [(m.sender, m.body, m.thread_id) for m in inbox] == [
            ("w", CLAIMED_NOTE + 'say "hi"', f"task:{posted.id}")
        ]
        history = (await tasks.get(posted.id)).history
        assert [(e.kind, e.agent, e.note) for e in history][-1] == ("claimed", "w", f"{TOKEN_NOTE}1")
        # The lease was renewed at the claim: 30 s in, it now runs to 90 s.
        clock.advance(45)
        shown = (await tasks.get(posted.id)).state
        assert shown == "claimed"
