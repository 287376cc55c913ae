"""Several API instances on one PostgreSQL database: a message sent through one wakes a long-poll on another."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import asyncpg
import httpx
import pytest

from muster_api.db.notify import PgNotifier
from tests.mesh.support import auth, join, mesh_app, server_process
from tests.support.databases import PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> Iterator[str]:
    url = postgres_server.create()
    try:
        yield url
    finally:
        postgres_server.drop(url)


async def test_two_processes_wake_each_other(pg_url: str) -> None:
    with server_process(pg_url) as one, server_process(pg_url) as two:
        async with (
            httpx.AsyncClient(base_url=one.base_url, timeout=30) as c1,
            httpx.AsyncClient(base_url=two.base_url, timeout=30) as c2,
        ):
            alice = await join(c1, "alice")
            bob = await join(c2, "bob")
            for round_ in range(3):
                answers: list[httpx.Response] = []

                async def poll(after: int, into: list[httpx.Response]) -> None:
                    into.append(await c2.get(f"/mesh/inbox?after={after}&wait_seconds=30", headers=auth(bob)))

                with anyio.fail_after(25):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(poll, round_, answers)
                        # No way to see the other process's waiters: give the poll time to start waiting. Either
                        # way the answer must carry the message well before the 30 s timeout.
                        await anyio.sleep(0.3)
                        started = anyio.current_time()
                        msg = {"to": "bob", "body": f"across {round_}", "confirm": True}
                        assert (await c1.post("/mesh/messages", json=msg, headers=auth(alice))).json()["stored"] == 1
                assert [m["body"] for m in answers[0].json()["messages"]] == [f"across {round_}"]
                assert anyio.current_time() - started < 10, "woken by the notification, not by the timeout"


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
