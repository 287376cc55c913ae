"""PostgreSQL's pending messages (a task claim's message to the poster): delivered in statements shared by the
claims of the moment, in sequence with no gap; left over by a killed process, delivered by the sweeper and at start,
their recipients woken; dropped when the recipient is not live."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from sqlalchemy import func, select

from muster_api.mesh.inbox_pending import DELIVER_PENDING, Deliverer, deliver_pending
from muster_api.mesh.store_postgres import PostgresMeshStore
from muster_api.mesh.tables import agents, inbox, inbox_pending
from muster_mesh import FakeClock, Mesh
from muster_mesh.tasks import TaskClaim, TaskPost, Tasks
from muster_mesh.testing import join
from tests.mesh.support import auth, long_poll_during, mesh_app
from tests.mesh.support import join as join_over_rest
from tests.mesh.test_conformance_sql import sql_factory

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def pg_store(mesh: Mesh) -> PostgresMeshStore:
    assert isinstance(mesh.store, PostgresMeshStore)
    return mesh.store


async def leave_pending(store: PostgresMeshStore, recipient: str, now: datetime, count: int = 1) -> list[str]:
    """Pending messages as a claim leaves them when its process dies before their delivery."""
    ids = [uuid.uuid4().hex for _ in range(count)]
    rows = [
        {"recipient": recipient, "message_id": i, "sender": "w", "body": f"b{n}", "thread_id": "t", "sent_at": now}
        for n, i in enumerate(ids)
    ]
    async with store.engine.begin() as conn:
        await conn.execute(inbox_pending.insert(), rows)
    return ids


async def pending_count(store: PostgresMeshStore) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(inbox_pending))).scalar_one())


async def test_the_sweeper_delivers_leftovers_and_drops_a_dead_recipients(pg_db_url: str) -> None:
    clock = FakeClock()
    async with sql_factory(pg_db_url)(clock) as mesh:
        store = pg_store(mesh)
        boss = await join(mesh, "boss", ttl_seconds=3600)
        await join(mesh, "gone", ttl_seconds=60)
        clock.advance(120)
        kept = await leave_pending(store, "boss", mesh.now(), count=2)
        await leave_pending(store, "gone", mesh.now())
        await mesh.sweep()
        assert await pending_count(store) == 0
        page = await mesh.read_inbox(token=boss)
        assert [(m.seq, m.message_id, m.sender, m.body) for m in page.messages] == [
            (1, kept[0], "w", "b0"),
            (2, kept[1], "w", "b1"),
        ]
        async with store.engine.connect() as conn:
            gone_seq = (await conn.execute(select(agents.c.last_seq).where(agents.c.agent_id == "gone"))).scalar()
            gone_inbox = (
                await conn.execute(select(func.count()).select_from(inbox).where(inbox.c.recipient == "gone"))
            ).scalar()
        assert (gone_seq, gone_inbox) == (0, 0)


async def test_a_starting_instance_delivers_leftovers(pg_db_url: str) -> None:
    clock = FakeClock()
    async with mesh_app(pg_db_url, clock) as client:
        boss = await join_over_rest(client, "boss")
    async with sql_factory(pg_db_url)(clock) as mesh:
        left = await leave_pending(pg_store(mesh), "boss", mesh.now())
    async with mesh_app(pg_db_url, clock) as client:
        page = (await client.get("/mesh/inbox", headers=auth(boss))).json()
    assert [(m["seq"], m["message_id"]) for m in page["messages"]] == [(1, left[0])]


async def test_concurrent_claims_share_a_delivery_and_take_consecutive_seqs(pg_db_url: str) -> None:
    """Twenty messages waited for at once: one statement (or two, if the first began before the others joined)
    delivers them, with the sequences 1 to 20, one each."""
    clock = FakeClock()
    async with sql_factory(pg_db_url)(clock) as mesh:
        store = pg_store(mesh)
        await join(mesh, "boss")
        ids = await leave_pending(store, "boss", mesh.now(), count=20)
        statements = 0
        fetch = store.deliverer._fetch

        async def counted(sql: str, *args: Any) -> list[Any]:
            nonlocal statements
            statements += sql == DELIVER_PENDING
            return await fetch(sql, *args)

        store.deliverer._fetch = counted
        seqs: dict[str, int | None] = {}

        async def wait_for(message_id: str) -> None:
            seqs[message_id] = await store.deliverer.deliver(message_id, mesh.now())

        async with anyio.create_task_group() as tg:
            for message_id in ids:
                tg.start_soon(wait_for, message_id)
        assert [seqs[i] for i in ids] == list(range(1, 21))  # in the order they were left
        assert statements <= 2


async def test_a_message_another_statement_delivered_answers_its_seq(pg_db_url: str) -> None:
    """Another instance's delivery (or the sweeper's) took the row first: the waiting claim still learns its
    sequence, and a dropped one none."""
    clock = FakeClock()
    async with sql_factory(pg_db_url)(clock) as mesh:
        store = pg_store(mesh)
        await join(mesh, "boss")
        await join(mesh, "gone", ttl_seconds=60)
        clock.advance(120)
        delivered = await leave_pending(store, "boss", mesh.now(), count=3)
        dropped = await leave_pending(store, "gone", mesh.now())
        await deliver_pending(store.driver.fetch, mesh.now())
        assert await store.deliverer.deliver(delivered[1], mesh.now()) == 2
        assert await store.deliverer.deliver(dropped[0], mesh.now()) is None


async def test_a_claim_whose_delivery_fails_answers_and_leaves_the_message_pending(pg_db_url: str) -> None:
    """The claim is committed when its delivery runs: a failed delivery must not turn it into an error (the caller
    would hold a task it was told it did not get). The message waits for the next delivery or the sweeper."""
    clock = FakeClock()
    async with sql_factory(pg_db_url)(clock) as mesh:
        store = pg_store(mesh)
        tasks = Tasks(mesh)
        worker = await join(mesh, "w", role="builder")
        boss = await join(mesh, "boss")
        assert (await tasks.claim(TaskClaim(confirm=True), token=worker)).task is None  # the TTL learned
        posted = (await tasks.post(TaskPost(title="t", body="b", role="builder", confirm=True), token=boss)).task
        assert posted is not None

        async def failing(sql: str, *args: Any) -> list[Any]:
            raise OSError("the connection went away")

        store.deliverer._fetch = failing
        got = (await tasks.claim(TaskClaim(confirm=True), token=worker)).task
        assert got is not None and got.id == posted.id and got.holder == "w"
        assert await pending_count(store) == 1
        assert (await mesh.read_inbox(token=boss)).messages == []
        await mesh.sweep()
        assert [m.thread_id for m in (await mesh.read_inbox(token=boss)).messages] == [f"task:{posted.id}"]


async def test_the_sweeper_wakes_the_agents_it_delivers_leftovers_to(pg_db_url: str) -> None:
    """A long-poll waiting when the sweeper delivers a leftover answers with it, not at the end of its wait."""
    clock = FakeClock()
    async with sql_factory(pg_db_url)(clock) as mesh:
        store = pg_store(mesh)
        boss = await join(mesh, "boss", ttl_seconds=3600)
        pages: list[list[str]] = []

        async def poll() -> None:
            page = await mesh.read_inbox(token=boss, wait_seconds=60)
            pages.append([m.message_id for m in page.messages])

        with anyio.fail_after(20):  # well inside the poll's 60 s: the answer comes from the wake-up
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                while mesh.notifier.waiting == 0:  # type: ignore[attr-defined]
                    await anyio.sleep(0.01)
                left = await leave_pending(store, "boss", mesh.now())
                await mesh.sweep()
        assert pages == [left]


async def test_a_starting_instance_wakes_the_agents_it_delivers_leftovers_to(pg_db_url: str) -> None:
    """The leftover reaches a long-poll on another instance: the starting one's wake-up goes by NOTIFY."""
    clock = FakeClock(datetime.now(UTC))
    async with mesh_app(pg_db_url, clock) as waiter:
        boss = await join_over_rest(waiter, "boss")
        left: list[str] = []

        async def leave_then_start_another() -> None:
            async with sql_factory(pg_db_url)(clock) as mesh:
                left.extend(await leave_pending(pg_store(mesh), "boss", mesh.now()))
            async with mesh_app(pg_db_url, clock):
                pass

        answer = await long_poll_during(waiter, boss, leave_then_start_another)
        assert [m["message_id"] for m in answer.json()["messages"]] == left


async def test_a_claims_delivery_wakes_the_recipients_of_rows_no_claim_here_waits_for(pg_db_url: str) -> None:
    """A claim's delivery takes every pending row, a killed process's leftovers too: their recipients are woken by
    it (the claim's own poster is woken by the claim, with its message)."""
    clock = FakeClock()
    async with sql_factory(pg_db_url)(clock) as mesh:
        store = pg_store(mesh)
        await join(mesh, "boss")
        other = await join(mesh, "other")
        woken: list[list[str]] = []

        async def wake(agent_ids: Sequence[str]) -> None:
            woken.append(list(agent_ids))

        deliverer = Deliverer(store.driver.fetch, wake)
        leftover = await leave_pending(store, "other", mesh.now())
        waited = await leave_pending(store, "boss", mesh.now())
        assert await deliverer.deliver(waited[0], mesh.now()) == 1
        assert woken == [["other"]]
        assert [m.message_id for m in (await mesh.read_inbox(token=other)).messages] == leftover
