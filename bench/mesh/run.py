"""Mesh benchmark: its four figures (check-in throughput, wake latency, a send after a pause, directory pages), on
SQLite and on PostgreSQL, each with a ratio against a baseline measured in the same run on the same server.

1. Check-in throughput: confirmed renewals (``POST /mesh/checkin`` with the agent's token) from 16 concurrent
   clients (in several processes: ``closed_loop.py``), against a bare ASGI endpoint of the same server doing one
   equivalent upsert on the same database (``bench/mesh/server.py``). Goal: ratio >= 1.0.
2. Send → long-poll wake latency p50/p99: from the message's ``sent_at`` (the server's clock as it takes the send:
   its database work, commit and wake-up are inside) until a reader blocked in ``GET /mesh/inbox?wait_seconds=30``
   holds the message, against the round trip of the same server's no-op endpoint (``GET /healthz``). Goal: p99 <=
   2x. The latency counted from the sender issuing its HTTP request is printed beside it.
3. A send after 150 ms of quiet: the median round trip of a direct send issued 150 ms after the previous request,
   over the median no-op round trip issued after the same quiet, against the same two medians back to back. Agents
   mostly send after a pause: the send path must pay no more for it than the no-op does. Goal: the quiet ratio no
   worse than the back-to-back one.
4. ``GET /mesh/agents`` pages of 100 with 10,000 live and 50,000 expired agents (agent ids interleaved), against the
   no-op round trip. Goal: <= 3x.

The server runs in its own process (uvicorn on 127.0.0.1, one per database); the clients here. Bounded: a fixed
amount of work per figure, about a minute per database on a 2-core machine. PostgreSQL runs when
MUSTER_TEST_POSTGRES_URL points at 127.0.0.1 (a fresh database is created and dropped).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.to_thread
import httpx

from muster_api.db.dialect import dialect_of
from muster_api.db.engine import create_engine
from muster_api.mesh.tables import agents
from muster_api.settings import Settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from pg import fresh_postgres  # noqa: E402

sys.path.insert(0, str(HERE))
from closed_loop import PROCESSES, Call, rate  # noqa: E402
from processes import serve  # noqa: E402

CLIENTS = 16
THROUGHPUT_SECONDS = 3.0
# A p99 of 300 samples is the third-worst one: on a shared 2-core machine, one burst of someone else's work decided
# it. 800 samples (after a discarded warm-up), each paired with a no-op round trip taken just before it, so that the
# baseline and the figure see the same machine.
WAKE_WARMUP = 50
WAKE_SAMPLES = 800
LIVE_AGENTS = 10_000
EXPIRED_AGENTS = 50_000
LIST_SAMPLES = 200
# The pause figure: samples of each kind (quiet send, quiet no-op, back-to-back send, back-to-back no-op).
QUIET_SECONDS = 0.150
PAUSE_SAMPLES = 60
random.seed(2540)


def ratio_line(name: str, value: float, unit: str, baseline_name: str, baseline: float, goal: str, ok: bool) -> None:
    ratio = value / baseline if baseline else float("inf")
    verdict = "meets" if ok else "MISSES"
    print(
        f"  {name:<34} {value:>9.2f} {unit:<6} | {baseline_name:<26} {baseline:>9.2f} {unit:<6} | "
        f"ratio {ratio:5.2f} ({verdict} goal {goal})"
    )


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def join(client: httpx.AsyncClient, agent_id: str, **fields: object) -> dict[str, str]:
    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True, **fields})
    r.raise_for_status()
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def checkin_figure(client: httpx.AsyncClient) -> None:
    tokens = [await join(client, f"renew-{i}", role="builder", status="working") for i in range(CLIENTS)]
    renew = [
        Call("/mesh/checkin", {"agent_id": f"renew-{i}", "status": "working", "confirm": True}, tokens[i])
        for i in range(CLIENTS)
    ]
    bare = [Call("/bench/upsert", {"agent_id": f"base-{i}", "status": "working"}, {}) for i in range(CLIENTS)]
    base = str(client.base_url)

    async def throughput(calls: list[Call], seconds: float = THROUGHPUT_SECONDS) -> float:
        return await anyio.to_thread.run_sync(rate, base, calls, seconds)

    await throughput(bare, 1.0)  # warm both paths (connections, statement caches)
    await throughput(renew, 1.0)
    # Alternated, best of two each: the machine is shared, so one unlucky second should not decide the figure.
    mesh_rates, bare_rates = [], []
    for _ in range(2):
        bare_rates.append(await throughput(bare))
        mesh_rates.append(await throughput(renew))
    mesh, floor = max(mesh_rates), max(bare_rates)
    ratio_line(
        f"check-in renewals, {CLIENTS} clients", mesh, "req/s", "bare ASGI upsert", floor, ">= 1.0", mesh / floor >= 1.0
    )
    print(
        f"  (the clients in {PROCESSES} processes: one Python process of {CLIENTS} clients is slower than the server)"
    )


async def noop_round_trips(client: httpx.AsyncClient, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        (await client.get("/healthz")).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def wake_figure(client: httpx.AsyncClient, reader_client: httpx.AsyncClient) -> list[float]:
    sender = await join(client, "wake-sender")
    reader = await join(client, "wake-reader")
    noop: list[float] = []
    from_stored: list[float] = []
    from_issue: list[float] = []
    for i in range(WAKE_WARMUP + WAKE_SAMPLES):
        noop_ms = (await noop_round_trips(client, 1))[0]
        got_at = 0.0
        got_wall = 0.0
        sent_at = 0.0

        async def read(after: int) -> None:
            nonlocal got_at, got_wall, sent_at
            r = await reader_client.get(f"/mesh/inbox?after={after}&wait_seconds=30", headers=reader)
            got_at, got_wall = time.perf_counter(), time.time()
            messages = r.json()["messages"]
            assert messages, "a long-poll must answer with the message"
            sent_at = datetime.fromisoformat(messages[0]["sent_at"]).timestamp()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read, i)
            await anyio.sleep(0.01)  # let the reader settle into its wait (not part of the latency)
            issued = time.perf_counter()
            msg = {"to": "wake-reader", "body": "wake", "confirm": True}
            (await client.post("/mesh/messages", json=msg, headers=sender)).raise_for_status()
        if i < WAKE_WARMUP:
            continue
        noop.append(noop_ms)
        # sent_at is the server's clock when it took the send (same machine, same wall clock as here).
        from_stored.append((got_wall - sent_at) * 1000)
        from_issue.append((got_at - issued) * 1000)
    n50, n99 = pct(noop, 0.5), pct(noop, 0.99)
    p50, p99 = pct(from_stored, 0.5), pct(from_stored, 0.99)
    ratio_line("send → wake p50", p50, "ms", "no-op round trip p50", n50, "(p99 <= 2x)", True)
    ratio_line("send → wake p99", p99, "ms", "no-op round trip p99", n99, "p99 <= 2x", p99 <= 2 * n99)
    print(
        "  (from the message's sent_at, the server's clock as it takes the send, to the waiting reader holding it; "
        f"counted from the sender issuing its request instead: p50 {pct(from_issue, 0.5):.2f} ms, "
        f"p99 {pct(from_issue, 0.99):.2f} ms)"
    )
    return noop


async def pause_figure(client: httpx.AsyncClient) -> None:
    sender = await join(client, "pause-sender")
    await join(client, "pause-reader")
    msg = {"to": "pause-reader", "body": "after a pause", "confirm": True}

    async def send() -> float:
        started = time.perf_counter()
        (await client.post("/mesh/messages", json=msg, headers=sender)).raise_for_status()
        return (time.perf_counter() - started) * 1000

    async def noop() -> float:
        return (await noop_round_trips(client, 1))[0]

    quiet_send: list[float] = []
    quiet_noop: list[float] = []
    busy_send: list[float] = []
    busy_noop: list[float] = []
    for _ in range(5):  # warm both paths
        await send()
        await noop()
    # Interleaved, so that both kinds see the same machine: quiet, then back to back.
    for _ in range(PAUSE_SAMPLES):
        await anyio.sleep(QUIET_SECONDS)
        quiet_send.append(await send())
        await anyio.sleep(QUIET_SECONDS)
        quiet_noop.append(await noop())
        busy_send.append(await send())
        busy_noop.append(await noop())
        busy_send.append(await send())
        busy_noop.append(await noop())
    qs, qn, bs, bn = (pct(x, 0.5) for x in (quiet_send, quiet_noop, busy_send, busy_noop))
    ratio_line("send after 150 ms quiet, p50", qs, "ms", "no-op after 150 ms quiet", qn, "(see below)", True)
    ratio_line("send back to back, p50", bs, "ms", "no-op back to back", bn, "(see below)", True)
    quiet, busy = qs / qn, bs / bn
    verdict = "meets" if quiet <= busy else "MISSES"
    print(
        f"  send/no-op after 150 ms quiet {quiet:5.2f} vs back to back {busy:5.2f}: quiet/back-to-back "
        f"{quiet / busy:5.2f} ({verdict} goal <= 1.00)"
    )


async def populate(db_url: str) -> None:
    engine = create_engine(Settings(database_url=db_url).database_url)
    now = datetime.now(UTC)
    ids = [f"ag-{i:06d}" for i in range(LIVE_AGENTS + EXPIRED_AGENTS)]
    random.shuffle(ids)
    rows = []
    for n, agent_id in enumerate(ids):
        live = n < LIVE_AGENTS
        seen = now - timedelta(seconds=random.randint(0, 600) if live else random.randint(4000, 90_000))
        rows.append(
            {
                "agent_id": agent_id,
                "token_hash": f"h{n:063d}",
                "role": random.choice(["builder", "reviewer", "ping"]),
                "repo": "muster",
                "caps": ["merge"] if n % 3 == 0 else [],
                "status": "working on the roster benchmark",
                "ttl_seconds": 3600,
                "last_seen_at": seen,
                "status_since": seen,
                "expires_at": seen + timedelta(seconds=3600),
                "last_seq": 0,
                "read_cursor": 0,
                "floor_seq": 0,
            }
        )
    try:
        async with engine.begin() as conn:
            for start in range(0, len(rows), 5000):
                await conn.execute(agents.insert(), rows[start : start + 5000])
        if dialect_of(engine).row_locks:  # PostgreSQL: fresh statistics for the planner (kept only once committed)
            async with engine.begin() as conn:
                await conn.exec_driver_sql("ANALYZE mesh_agents")
    finally:
        await engine.dispose()


async def list_figure(client: httpx.AsyncClient, db_url: str) -> None:
    await populate(db_url)
    times = []
    # Each page paired with a no-op round trip taken just before it, so that the baseline and the figure see the
    # same machine (a shared one: a burst of someone else's work would otherwise land on one side only).
    noop: list[float] = []
    cursor: str | None = None
    pages = 0
    for _ in range(LIST_SAMPLES):
        noop += await noop_round_trips(client, 1)
        url = "/mesh/agents?limit=100" + (f"&cursor={cursor}" if cursor else "")
        started = time.perf_counter()
        r = await client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        body = r.json()
        assert len(body["agents"]) == 100 or body["next_cursor"] is None
        assert all(a["alive"] for a in body["agents"])
        cursor = body["next_cursor"]
        pages += 1
    n50 = pct(noop, 0.5)
    p50, p99 = pct(times, 0.5), pct(times, 0.99)
    ratio_line("agents_list page of 100, p50", p50, "ms", "no-op round trip p50", n50, "<= 3x", p50 <= 3 * n50)
    print(
        f"  ({LIVE_AGENTS} live + {EXPIRED_AGENTS} expired agents; {pages} pages walked with the cursor; "
        f"p99 {p99:.2f} ms)"
    )


async def run_on(label: str, db_url: str) -> None:
    print(f"== {label}")
    with serve(db_url) as process:
        base = process.base
        limits = httpx.Limits(max_connections=CLIENTS + 4, max_keepalive_connections=CLIENTS + 4)
        async with (
            httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client,
            httpx.AsyncClient(base_url=base, timeout=60) as reader_client,
        ):
            await checkin_figure(client)
            await wake_figure(client, reader_client)
            await pause_figure(client)
            await list_figure(client, db_url)


async def main() -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        await run_on("SQLite", f"sqlite:///{Path(tmp) / 'bench.db'}")
    pg_admin = os.environ.get("MUSTER_TEST_POSTGRES_URL", "")
    if "@127.0.0.1" in pg_admin or "@localhost" in pg_admin:
        async with fresh_postgres(pg_admin, "muster_bench") as url:
            await run_on("PostgreSQL", url)
    else:
        print("== PostgreSQL: skipped (set MUSTER_TEST_POSTGRES_URL to a 127.0.0.1 server)")
    print(f"== done in {time.perf_counter() - started:.1f} s")
    # Sustained load and memory: its own processes (servers and a multi-process load generator).
    subprocess.run([sys.executable, str(HERE / "load.py")], check=True)


if __name__ == "__main__":
    anyio.run(main)
