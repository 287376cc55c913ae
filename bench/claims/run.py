"""Claims and tasks, each against a baseline measured in the same run, on the app in-process (httpx's ASGI
transport: both sides pay the same HTTP stack, without a network between).

- ``claims/check`` of 100 concrete paths against 1,000 live claims in 50 repos: p50 against a no-op route's p50
  (goal: at most 2x). On PostgreSQL, beside them, the no-op route with one ``SELECT 1``: the least a call that asks
  the database anything pays.
- Task claim throughput with 16 concurrent claimers, against a bare ``UPDATE … WHERE task_id = (SELECT … FOR UPDATE
  SKIP LOCKED)`` route on the same database (goal: at least 0.8x).

SQLite in a temporary directory, then PostgreSQL when ``MUSTER_TEST_POSTGRES_URL`` points at a server on this machine
(a fresh database, dropped after; ``make bench`` sets it when one answers). The app logs at WARNING, as every other
benchmark's service does: an access-log line per request would be a cost both sides pay, pulling the ratio towards 1.

    .venv/bin/python bench/claims/run.py
    MUSTER_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/claims/run.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
from fastapi import FastAPI, Request
from sqlalchemy import text

from muster_api.app import create_app
from muster_api.db.driver_pool import DriverPool
from muster_api.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.pg import fresh_postgres

CLAIMERS = 16
TASKS = 320
CHECKS = 200
ROUNDS = 3
BARE_CLAIM = text(
    "UPDATE mesh_tasks SET state = 'claimed', holder = :me, fence = fence + 1 WHERE task_id = ("
    "SELECT task_id FROM mesh_tasks WHERE state = 'open' ORDER BY priority DESC, created_at LIMIT 1 {lock}"
    ") RETURNING task_id"
)


def _baselines(app: FastAPI, postgres: bool, url: str) -> DriverPool | None:
    statement = text(BARE_CLAIM.text.format(lock="FOR UPDATE SKIP LOCKED" if postgres else ""))

    @app.get("/bench/noop")
    async def noop() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/bench/bare-claim")
    async def bare(request: Request) -> dict[str, str | None]:
        async with request.app.state.runtime.engine.begin() as conn:
            row = (await conn.execute(statement, {"me": "bare"})).first()
        return {"task_id": row[0] if row else None}

    if not postgres:
        return None
    # The no-op plus one ``SELECT 1`` on the kind of connection a check's statement runs on (``DriverPool``): what any
    # call that asks PostgreSQL anything pays at least. Printed beside the check for reference; no goal.
    pool = DriverPool(url)

    @app.get("/bench/select1")
    async def select1() -> dict[str, bool]:
        await pool.fetch("SELECT 1")
        return {"ok": True}

    return pool


@asynccontextmanager
async def database(postgres_admin: str | None) -> AsyncIterator[str]:
    if postgres_admin:
        async with fresh_postgres(postgres_admin, "bench_claims") as url:
            yield url
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/bench.db"


async def join(client: httpx.AsyncClient, agent_id: str, **fields: object) -> dict[str, str]:
    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True, "ttl_seconds": 86400, **fields})
    r.raise_for_status()
    return {"Authorization": f"Bearer {r.json()['token']}"}


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def timed(client: httpx.AsyncClient, method: str, path: str, **kw: object) -> float:
    start = time.perf_counter()
    r = await client.request(method, path, **kw)  # type: ignore[arg-type]
    r.raise_for_status()
    return time.perf_counter() - start


async def cpu_per_call(client: httpx.AsyncClient, method: str, path: str, **kw: object) -> float:
    """The process's CPU per call in ms (client and app share it, as they share the wall time): unlike a wall-clock
    p50 it does not count the time this process waited for a core on a busy machine."""
    start = time.process_time()
    for _ in range(CHECKS):
        (await client.request(method, path, **kw)).raise_for_status()  # type: ignore[arg-type]
    return (time.process_time() - start) / CHECKS * 1000


async def bench_check(client: httpx.AsyncClient, with_select: bool) -> tuple[float, float, float, float, float | None]:
    for repo in range(50):
        auth = await join(client, f"holder{repo}", repo=f"repo{repo}")
        patterns = [f"pkg{j}/mod/**" for j in range(20)]
        (await client.post("/mesh/claims", json={"paths": patterns, "confirm": True}, headers=auth)).raise_for_status()
    me = await join(client, "checker", repo="repo0")
    paths = [f"pkg{i % 40}/mod/file{i}.py" for i in range(100)]
    body = {"repo": "repo0", "paths": paths}
    checks: list[float] = []
    noops: list[float] = []
    selects: list[float] = []
    # One of each in turn: a busy machine's queue drifts over seconds, and both sides should meet the same one.
    for _ in range(CHECKS):
        checks.append(await timed(client, "POST", "/mesh/claims/check", json=body, headers=me))
        noops.append(await timed(client, "GET", "/bench/noop"))
        if with_select:
            selects.append(await timed(client, "GET", "/bench/select1"))
    check_cpu = await cpu_per_call(client, "POST", "/mesh/claims/check", json=body, headers=me)
    noop_cpu = await cpu_per_call(client, "GET", "/bench/noop")
    return p50(checks), p50(noops), check_cpu, noop_cpu, p50(selects) if selects else None


async def post_tasks(client: httpx.AsyncClient, auth: dict[str, str]) -> None:
    for i in range(TASKS):
        body = {"title": f"t{i}", "body": "b", "role": "worker", "priority": i % 3, "confirm": True}
        (await client.post("/mesh/tasks", json=body, headers=auth)).raise_for_status()


async def drain(
    client: httpx.AsyncClient, path: str, body: dict[str, object], auths: list[dict[str, str]]
) -> tuple[float, float]:
    """Claims per second of wall-clock, and the process's CPU per claim in ms (client and app; PostgreSQL's backends
    are not in it)."""
    taken = 0

    async def loop(auth: dict[str, str]) -> None:
        nonlocal taken
        while True:
            r = await client.post(path, json=body, headers=auth)
            r.raise_for_status()
            got = r.json().get("task") or r.json().get("task_id")
            if not got:
                return
            taken += 1

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(loop(a) for a in auths))
    elapsed, spent = time.perf_counter() - start, time.process_time() - cpu
    assert taken == TASKS, taken
    return taken / elapsed, spent / taken * 1000


async def finish_all(app: FastAPI) -> None:
    """Every task done between rounds (outside the timing), so that each round starts from the same queue."""
    async with app.state.runtime.engine.begin() as conn:
        await conn.execute(text("UPDATE mesh_tasks SET state = 'done' WHERE state <> 'done'"))


async def bench_tasks(app: FastAPI, client: httpx.AsyncClient) -> list[tuple[float, float, float, float]]:
    """ROUNDS alternating pairs (ours, then the bare route), each on a fresh queue of TASKS."""
    boss = await join(client, "boss")
    workers = [await join(client, f"w{i}", role="worker") for i in range(CLAIMERS)]
    rounds = []
    for _ in range(ROUNDS):
        await post_tasks(client, boss)
        ours, ours_cpu = await drain(client, "/mesh/tasks/claim", {"confirm": True}, workers)
        await finish_all(app)
        await post_tasks(client, boss)
        bare, bare_cpu = await drain(client, "/bench/bare-claim", {}, workers)
        await finish_all(app)
        rounds.append((ours, bare, ours_cpu, bare_cpu))
    return rounds


async def leg(postgres_admin: str | None) -> None:
    async with database(postgres_admin) as url:
        app = create_app(Settings(database_url=url, log_level="WARNING"))
        pool = _baselines(app, url.startswith("postgresql"), url)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60) as client:
                check, noop, check_cpu, noop_cpu, select = await bench_check(client, pool is not None)
                rounds = await bench_tasks(app, client)
        if pool is not None:
            await pool.aclose()
    kind = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"database: {kind}  ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, run {uuid.uuid4().hex[:6]}, load {load})")
    print(
        f"claims/check 100 paths vs 1,000 claims in 50 repos: p50 {check:.2f} ms; no-op p50 {noop:.2f} ms; "
        f"ratio {check / noop:.2f}x (goal <= 2x)"
    )
    print(
        f"claims/check CPU per call {check_cpu:.2f} ms; no-op {noop_cpu:.2f} ms; ratio {check_cpu / noop_cpu:.2f}x "
        "(the same goal, on CPU: a busy machine's waits left out)"
    )
    if select is not None:
        print(
            f"the no-op with one SELECT 1 on the check's kind of connection: p50 {select:.2f} ms, {select / noop:.2f}x "
            "the no-op (what any call that asks PostgreSQL anything pays at least; no goal)"
        )
    for ours, bare, ours_cpu, bare_cpu in rounds:
        print(
            f"task claim, {CLAIMERS} claimers: {ours:.0f}/s ({ours_cpu:.2f} ms CPU each); bare UPDATE … SKIP LOCKED "
            f"route {bare:.0f}/s ({bare_cpu:.2f} ms); ratio {ours / bare:.2f}x"
        )
    ratio = statistics.median(ours / bare for ours, bare, _, _ in rounds)
    print(f"task claim throughput, median of {ROUNDS} alternating pairs: {ratio:.2f}x (goal >= 0.8x)", flush=True)


async def main() -> None:
    await leg(None)
    admin = os.environ.get("MUSTER_TEST_POSTGRES_URL", "")
    if "@127.0.0.1" in admin or "@localhost" in admin:
        await leg(admin)
    else:
        print("database: PostgreSQL skipped (set MUSTER_TEST_POSTGRES_URL to a 127.0.0.1 server)")


if __name__ == "__main__":
    asyncio.run(main())
