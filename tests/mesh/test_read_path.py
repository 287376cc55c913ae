"""The inbox read in one step where the store can (on PostgreSQL: the lease renewal and the page in one statement,
outside any transaction; on SQLite: the whole transaction in one trip to the driver's thread), leaving every refusal
to the transaction; and a long-poll of a reader seen before reads the store once before it waits."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest

from muster_mesh import InboxEntry, InMemoryMeshStore, InvalidCursor, Mesh
from muster_mesh.clock import FakeClock
from muster_mesh.records import AgentRecord
from muster_mesh.testing import join, send
from muster_mesh.tokens import token_hash
from tests.mesh.test_conformance_sql import sql_factory

pytestmark = pytest.mark.anyio


async def test_one_step_read_renews_and_reads_or_leaves_the_row_alone(db_url: str) -> None:
    clock = FakeClock()
    async with sql_factory(db_url)(clock) as mesh:
        alice = await join(mesh, "alice")
        bob = await join(mesh, "bob")
        await send(mesh, alice, "one", to="bob")
        await send(mesh, alice, "two", to="bob")
        assert [m.body for m in (await mesh.read_inbox(token=bob)).messages] == ["one", "two"]
        hashed = token_hash(bob)
        clock.advance(10)
        now = clock()
        read = await mesh.store.renew_and_read(hashed, now, after=None, limit=10)
        assert read is not None, "one statement on PostgreSQL, one trip to the driver's thread on SQLite"
        agent, entries = read
        assert agent.agent_id == "bob" and agent.last_seen_at == now
        assert agent.expires_at == now + timedelta(seconds=agent.ttl_seconds)
        assert [(e.seq, e.message.body, e.message.sender) for e in entries] == [
            (1, "one", "alice"),
            (2, "two", "alice"),
        ]
        assert entries[0].message.sent_at.tzinfo is not None
        later = await mesh.store.renew_and_read(hashed, now, after=1, limit=10)
        assert later is not None and [e.seq for e in later[1]] == [2]
        assert (await mesh.store.renew_and_read(hashed, now, after=2, limit=10)) == (agent, [])

        # Whatever a plain read would refuse is left to the transaction, and the row is left alone.
        clock.advance(10)
        assert await mesh.store.renew_and_read(hashed, clock(), after=3, limit=10) is None
        assert await mesh.store.renew_and_read(token_hash("nobody"), clock(), after=None, limit=10) is None
        async with mesh.store.transaction() as tx:
            unchanged = await tx.get_agent("bob")
        assert unchanged is not None and unchanged.last_seen_at == now
        with pytest.raises(InvalidCursor):
            await mesh.read_inbox(token=bob, after=3)
        clock.advance(agent.ttl_seconds + 1)
        assert await mesh.store.renew_and_read(hashed, clock(), after=None, limit=10) is None


class CountingStore(InMemoryMeshStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def renew_and_read(
        self, token_hash: str, now: datetime, *, after: int | None, limit: int, shown: int = 0, active: bool = True
    ) -> tuple[AgentRecord, list[InboxEntry]] | None:
        self.reads += 1
        return await super().renew_and_read(token_hash, now, after=after, limit=limit, shown=shown, active=active)


async def test_a_reader_seen_before_subscribes_first_and_reads_once() -> None:
    store = CountingStore()
    mesh = Mesh(store, clock=FakeClock())
    alice = await join(mesh, "alice")
    bob = await join(mesh, "bob")
    await mesh.read_inbox(token=bob)
    store.reads = 0
    pages: list[Any] = []

    async def poll() -> None:
        pages.append(await mesh.read_inbox(token=bob, wait_seconds=30))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            while getattr(mesh.notifier, "waiting", 0) == 0:
                await anyio.sleep(0.01)
            reads_before_waiting = store.reads
            await send(mesh, alice, "wake up", to="bob")
    assert reads_before_waiting == 1, "subscribed before its one read: no second read to close the race"
    assert [m.body for m in pages[0].messages] == ["wake up"]
    assert store.reads == 1, "the page came with the wake-up"
