"""Mesh benchmark: every figure is printed with a ratio against a baseline measured in the same run.

1. Store: confirmed sends + one inbox read per send, on SQLite (and PostgreSQL when MUSTER_TEST_POSTGRES_URL
   points at 127.0.0.1), against the in-memory store as the baseline.
2. Wake: time from a send's answer to a waiting reader seeing the message, long-poll (notifier) against the baseline
   of polling every 100 ms, through a real uvicorn server on 127.0.0.1.
3. REST: confirmed sends per second over HTTP against GET /healthz (the bare HTTP cost) on the same server.

Bounded: a fixed number of operations per figure (under a minute on a 2-core machine); traffic only to 127.0.0.1.
"""

from __future__ import annotations

import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import uvicorn

from muster_api.app import create_app
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.mesh.store import SqlMeshStore
from muster_api.settings import Settings
from muster_mesh import AckRequest, Address, CheckinRequest, InMemoryMeshStore, Mesh, SendRequest
from muster_mesh.store import MeshStore

STORE_SENDS = 300
WAKE_ROUNDS = 25
REST_CALLS = 300
POLL_INTERVAL = 0.1
random.seed(2540)


def line(name: str, value: float, unit: str, baseline_name: str, baseline: float, ratio: float, better: str) -> None:
    figure = f"{name:<36} {value:>9.2f} {unit:<6}"
    print(f"{figure} baseline {baseline_name:<14} {baseline:>9.2f} {unit:<6} ratio {ratio:6.2f}x ({better})")


async def store_rate(store: MeshStore) -> float:
    mesh = Mesh(store)
    alice = (await mesh.checkin(CheckinRequest(agent_id="alice", confirm=True))).token
    bob = (await mesh.checkin(CheckinRequest(agent_id="bob", confirm=True))).token
    assert alice and bob
    request = SendRequest(to=Address(agent="bob"), body="x" * 200, confirm=True)
    started = time.perf_counter()
    for i in range(STORE_SENDS):
        await mesh.send(request, token=alice)
        page = await mesh.inbox(token=bob)
        await mesh.ack(AckRequest(cursor=page.next_cursor, confirm=True), token=bob)
        assert page.next_cursor == i + 1
    return STORE_SENDS / (time.perf_counter() - started)


@asynccontextmanager
async def sql_store(url: str) -> AsyncIterator[MeshStore]:
    engine = create_engine(Settings(database_url=url).database_url)
    try:
        await upgrade(engine)
        yield SqlMeshStore(engine)
    finally:
        await engine.dispose()


@asynccontextmanager
async def fresh_postgres(admin_url: str) -> AsyncIterator[str]:
    import asyncpg  # type: ignore[import-untyped]

    name = f"muster_bench_{os.getpid()}"
    base = admin_url.rpartition("/")[0]
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{base}/{name}"
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def server(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    # The server gets its own thread and event loop: sharing the client's loop adds tens of ms to every request,
    # which would measure the benchmark harness rather than the service.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(Settings(database_url=db_url, log_level="WARNING")),
        log_level="warning",
        timeout_graceful_shutdown=2,
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not srv.started:
            await anyio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        srv.should_exit = True
        await anyio.to_thread.run_sync(thread.join)
        sock.close()


async def join(client: httpx.AsyncClient, agent_id: str) -> dict[str, str]:
    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True})
    r.raise_for_status()
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def wake_latency(
    client: httpx.AsyncClient, sender: dict[str, str], reader: dict[str, str], *, long_poll: bool
) -> float:
    seen = anyio.Event()
    seen_at = 0.0

    async def read() -> None:
        nonlocal seen_at
        while True:
            if long_poll:
                r = await client.get("/mesh/inbox?wait=20", headers=reader)
            else:
                r = await client.get("/mesh/inbox", headers=reader)
            if r.json()["messages"]:
                seen_at = time.perf_counter()
                seen.set()
                await client.post(
                    "/mesh/inbox/ack", json={"cursor": r.json()["next_cursor"], "confirm": True}, headers=reader
                )
                return
            if not long_poll:
                await anyio.sleep(POLL_INTERVAL)

    samples = []
    for _ in range(WAKE_ROUNDS):
        seen = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            # Let the reader settle into its wait, then send at a random point of the polling rhythm (a fixed
            # offset would flatter or punish the polling baseline).
            await anyio.sleep(0.05 + random.uniform(0, POLL_INTERVAL))
            msg = {"to": {"agent": "reader"}, "body": "wake", "confirm": True}
            r = await client.post("/mesh/messages", json=msg, headers=sender)
            sent_at = time.perf_counter()
            r.raise_for_status()
            await seen.wait()
        samples.append(max(seen_at - sent_at, 0.0) * 1000)
    return statistics.median(samples)


async def rest_rate(call: Callable[[], Awaitable[httpx.Response]]) -> float:
    started = time.perf_counter()
    for _ in range(REST_CALLS):
        (await call()).raise_for_status()
    return REST_CALLS / (time.perf_counter() - started)


async def main() -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        print("== mesh store: send + read + ack per message")
        memory = await store_rate(InMemoryMeshStore())
        line("in-memory store", memory, "msg/s", "in-memory", memory, 1.0, "reference")
        async with sql_store(f"sqlite:///{Path(tmp) / 'store.db'}") as store:
            sqlite = await store_rate(store)
        line("SQLite store", sqlite, "msg/s", "in-memory", memory, sqlite / memory, "of in-memory throughput")
        pg_admin = os.environ.get("MUSTER_TEST_POSTGRES_URL", "")
        if "@127.0.0.1" in pg_admin or "@localhost" in pg_admin:
            async with fresh_postgres(pg_admin) as url, sql_store(url) as store:
                pg = await store_rate(store)
            line("PostgreSQL store", pg, "msg/s", "in-memory", memory, pg / memory, "of in-memory throughput")
        else:
            print("PostgreSQL store: skipped (set MUSTER_TEST_POSTGRES_URL to a 127.0.0.1 server)")

        print("== over HTTP (uvicorn on 127.0.0.1, SQLite)")
        async with server(f"sqlite:///{Path(tmp) / 'http.db'}") as client:
            sender = await join(client, "sender")
            reader = await join(client, "reader")
            polled = await wake_latency(client, sender, reader, long_poll=False)
            waited = await wake_latency(client, sender, reader, long_poll=True)
            line(
                "wake latency, long-poll (median)",
                waited,
                "ms",
                f"poll/{int(POLL_INTERVAL * 1000)}ms",
                polled,
                polled / waited if waited else float("inf"),
                "faster than interval polling",
            )
            health = await rest_rate(lambda: client.get("/healthz"))
            msg = {"to": {"agent": "reader"}, "body": "x" * 200, "confirm": True}
            sends = await rest_rate(lambda: client.post("/mesh/messages", json=msg, headers=sender))
            line("REST send rate", sends, "req/s", "GET /healthz", health, sends / health, "of bare HTTP rate")
    print(f"== done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
