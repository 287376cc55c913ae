"""Several API instances on one PostgreSQL database: a message sent through one wakes a long-poll on another."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import anyio
import asyncpg
import httpx
import pytest

from muster_api.db.notify import PgNotifier
from muster_mesh import FakeClock
from tests.mesh.support import auth, join, mesh_app, server_process
from tests.support.databases import PostgresServer

# Server processes and PostgreSQL listeners.
pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> Iterator[str]:
    url = postgres_server.create()
    try:
        yield url
    finally:
        postgres_server.drop(url)


async def test_a_process_wakes_another(pg_url: str) -> None:
    """The sender is a server in its own OS process; the waiter an instance in this one, so that the test can see
    its long-poll waiting before the send: the message must reach it through PostgreSQL's NOTIFY."""
    with server_process(pg_url) as one:
        async with (
            httpx.AsyncClient(base_url=one.base_url, timeout=30) as c1,
            mesh_app(pg_url, FakeClock(datetime.now(UTC))) as c2,
        ):
            alice = await join(c1, "alice")
            bob = await join(c2, "bob")
            for round_ in range(3):
                answers: list[httpx.Response] = []

                async def poll(after: int, into: list[httpx.Response]) -> None:
                    into.append(await c2.get(f"/mesh/inbox?after={after}&wait_seconds=30", headers=auth(bob)))

                # Well inside the poll's 30 s: the answer comes from the wake, not from the poll's timeout.
                with anyio.fail_after(25):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(poll, round_, answers)
                        while notifier(c2).waiting == 0:
                            await anyio.sleep(0.01)
                        msg = {"to": "bob", "body": f"across {round_}", "confirm": True}
                        assert (await c1.post("/mesh/messages", json=msg, headers=auth(alice))).json()["stored"] == 1
                assert [m["body"] for m in answers[0].json()["messages"]] == [f"across {round_}"]


def notifier(client: httpx.AsyncClient) -> PgNotifier:
    value = client._transport.app.state.mesh.notifier  # type: ignore[attr-defined]
    assert isinstance(value, PgNotifier)
    return value


async def poll_while_sending(waiter: httpx.AsyncClient, sender: httpx.AsyncClient, wt: str, st: str, body: str) -> str:
    answers: list[httpx.Response] = []

    async def poll() -> None:
        answers.append(await waiter.get("/mesh/inbox?wait_seconds=30", headers=auth(wt)))

    with anyio.fail_after(25):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            while notifier(waiter).waiting == 0:
                await anyio.sleep(0.01)
            msg = {"to": "bob", "body": body, "confirm": True}
            assert (await sender.post("/mesh/messages", json=msg, headers=auth(st))).json()["stored"] == 1
    messages = answers[0].json()["messages"]
    return str(messages[-1]["body"])


async def test_wake_survives_a_lost_listener(pg_url: str) -> None:
    async with mesh_app(pg_url) as one, mesh_app(pg_url) as two:
        alice = await join(one, "alice")
        bob = await join(two, "bob")
        assert await poll_while_sending(two, one, bob, alice, "across") == "across"

        # Kill instance two's listener connection from outside: it must reconnect and still be woken.
        pid = notifier(two).listener_pid
        admin = await asyncpg.connect(pg_url)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        with anyio.fail_after(20):
            while notifier(two).reconnects == 0:
                await anyio.sleep(0.05)
        assert notifier(two).listener_pid != pid
        await one.post("/mesh/inbox/ack", json={"cursor": 1, "confirm": True}, headers=auth(bob))
        assert await poll_while_sending(two, one, bob, alice, "after reconnect") == "after reconnect"


async def test_an_instance_hears_every_capability_on_one_connection(pg_url: str) -> None:
    """PostgreSQL signals every listening backend of the database at every NOTIFY, whatever its channel: the mesh and
    dispatch of an instance listen on one connection, and both hear again once it is lost and re-opened."""
    listening = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
    async with mesh_app(pg_url) as client:
        app = client._transport.app  # type: ignore[attr-defined]
        mesh, runs = notifier(client), app.state.dispatch.notifier._pg
        assert mesh.listener_pid is not None and mesh.listener_pid == runs.listener_pid
        admin = await asyncpg.connect(pg_url)
        try:
            assert await admin.fetchval(listening) == 1
            lost = mesh.listener_pid
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", lost)
            with anyio.fail_after(20):
                while mesh.reconnects == 0 or runs.reconnects == 0:
                    await anyio.sleep(0.05)
            assert mesh.listener_pid == runs.listener_pid != lost
            assert await admin.fetchval(listening) == 1
        finally:
            await admin.close()
