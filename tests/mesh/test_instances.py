"""Several API instances on one PostgreSQL database: a message sent through one wakes a long-poll on another."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import anyio
import asyncpg
import httpx
import pytest

from muster_mesh import FakeClock
from tests.mesh.support import auth, join, long_poll_during, mesh_app, pg_notifier, server_process
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
                msg = {"to": "bob", "body": f"across {round_}", "confirm": True}

                async def send(msg: dict[str, object] = msg) -> None:
                    assert (await c1.post("/mesh/messages", json=msg, headers=auth(alice))).json()["stored"] == 1

                answer = await long_poll_during(c2, bob, send, after=round_)
                assert [m["body"] for m in answer.json()["messages"]] == [f"across {round_}"]


async def poll_while_sending(waiter: httpx.AsyncClient, sender: httpx.AsyncClient, wt: str, st: str, body: str) -> str:
    async def send() -> None:
        msg = {"to": "bob", "body": body, "confirm": True}
        assert (await sender.post("/mesh/messages", json=msg, headers=auth(st))).json()["stored"] == 1

    answer = await long_poll_during(waiter, wt, send)
    messages = answer.json()["messages"]
    return str(messages[-1]["body"])


async def test_wake_survives_a_lost_listener(pg_url: str) -> None:
    async with mesh_app(pg_url) as one, mesh_app(pg_url) as two:
        alice = await join(one, "alice")
        bob = await join(two, "bob")
        assert await poll_while_sending(two, one, bob, alice, "across") == "across"

        # Kill instance two's listener connection from outside: it must reconnect and still be woken.
        pid = pg_notifier(two).listener_pid
        admin = await asyncpg.connect(pg_url)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        with anyio.fail_after(20):
            while pg_notifier(two).reconnects == 0:
                await anyio.sleep(0.05)
        assert pg_notifier(two).listener_pid != pid
        await one.post("/mesh/inbox/ack", json={"cursor": 1, "confirm": True}, headers=auth(bob))
        assert await poll_while_sending(two, one, bob, alice, "after reconnect") == "after reconnect"


async def test_an_instance_hears_every_capability_on_one_connection(pg_url: str) -> None:
    """PostgreSQL signals every listening backend of the database at every NOTIFY, whatever its channel: the mesh and
    dispatch of an instance listen on one connection, and both hear again once it is lost and re-opened."""
    listening = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
    async with mesh_app(pg_url) as client:
        app = client._transport.app  # type: ignore[attr-defined]
        mesh, runs = pg_notifier(client), app.state.dispatch.notifier._pg
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
