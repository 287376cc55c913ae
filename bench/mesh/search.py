"""Mesh search benchmark, on SQLite and on PostgreSQL, each figure with a ratio against a baseline of the same run.

1. Send throughput with the search index maintained: direct sends (``POST /mesh/messages``, a 20-word body) from
   16 concurrent clients in several processes, against the same server code on a database whose index was dropped
   after migrating (on SQLite the FTS5 triggers, so a send writes its own rows only and the indexing step finds an
   empty queue; on PostgreSQL the generated tsvector column). Both servers run side by side;
   the two are measured alternately, best of three each. Goal: ratio >= 0.9.
2. ``GET /mesh/search`` over 100,000 messages (20 words each from a 3,000-word vocabulary; one word is in ~0.7% of
   them): p50 of a one-word search by an agent over its own messages, and of the overseer's search over all of them
   (``view=all``, ~700 matches ranked for a page of 20), each against the p50 of a no-op round trip (``GET
   /healthz``) taken just before each search (alternating pairs). Goal: <= 5x. Beside the wall-clock: the CPU per
   call of the server process (utime + stime, all threads) and, on PostgreSQL, of its backends, for both; the load
   average.

Usage: python bench/mesh/search.py [--only sqlite|postgres]  (PostgreSQL when MUSTER_TEST_POSTGRES_URL points at
127.0.0.1)
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.to_thread
import httpx

from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.mesh.search import index_pending
from muster_api.mesh.sqlite_driver import on_driver_thread
from muster_api.mesh.tables import agents, inbox, messages
from muster_api.settings import Settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from cpu import CpuMeter, Group, postgres_backends, process_cpu, thread_cpu  # noqa: E402
from pg import fresh_postgres  # noqa: E402
from serving import mesh_bench_server  # noqa: E402

sys.path.insert(0, str(HERE))
from closed_loop import Call, join, rate  # noqa: E402

CLIENTS = 16
SEND_SECONDS = 3.0
ROUNDS = 3
MESSAGES = 100_000
AGENTS = 100
WORDS_PER_MESSAGE = 20
VOCABULARY = [f"w{n}x" for n in range(3000)]
SEARCH_SAMPLES = 200
DROP_SQLITE = [
    "DROP TRIGGER mesh_messages_fts_update",
    "DROP TRIGGER mesh_messages_fts_delete",
    "DROP TRIGGER mesh_messages_fts_insert",
]
DROP_POSTGRES = ["DROP INDEX ix_mesh_messages_search_doc", "ALTER TABLE mesh_messages DROP COLUMN search_doc"]
random.seed(2540)


def body() -> str:
    return " ".join(random.choices(VOCABULARY, k=WORDS_PER_MESSAGE))


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratio_line(name: str, value: float, unit: str, baseline_name: str, baseline: float, goal: str, ok: bool) -> None:
    ratio = value / baseline if baseline else float("inf")
    print(
        f"  {name:<38} {value:>9.2f} {unit:<6} | {baseline_name:<30} {baseline:>9.2f} {unit:<6} | "
        f"ratio {ratio:5.2f} ({'meets' if ok else 'MISSES'} goal {goal})"
    )


@contextmanager
def serve(db_url: str, *, migrate: bool) -> Iterator[str]:
    env = {**os.environ, "MUSTER_LOG_LEVEL": "WARNING", "MUSTER_MIGRATE_ON_STARTUP": "true" if migrate else "false"}
    with mesh_bench_server(HERE / "server.py", db_url, env, "bench server") as base:
        yield base


async def send_calls(base: str) -> list[Call]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        calls = []
        for i in range(CLIENTS):
            sender = await join(client, f"sender-{i}")
            await join(client, f"peer-{i}")
            calls.append(Call("/mesh/messages", {"to": f"peer-{i}", "body": body(), "confirm": True}, sender))
        return calls


async def send_figure(with_index: str, without_index: str) -> None:
    indexed, bare = await send_calls(with_index), await send_calls(without_index)
    await anyio.to_thread.run_sync(rate, with_index, indexed, 1.0)  # warm both (connections, statement caches)
    await anyio.to_thread.run_sync(rate, without_index, bare, 1.0)
    with_rates: list[float] = []
    without_rates: list[float] = []
    cpu: dict[str, float] = {}
    for _ in range(ROUNDS):
        without_rates.append(await measured_rate(without_index, bare, cpu))
        with_rates.append(await measured_rate(with_index, indexed, cpu))
    got, floor = max(with_rates), max(without_rates)
    ratio_line(
        f"direct sends, index kept, {CLIENTS} clients",
        got,
        "msg/s",
        "same, index dropped",
        floor,
        ">= 0.9",
        got / floor >= 0.9,
    )
    kept, dropped = (cpu[base] / ROUNDS * 1e6 for base in (with_index, without_index))
    print(f"  (server CPU per send: index kept {kept:.0f} us, dropped {dropped:.0f} us)")


async def measured_rate(base: str, calls: list[Call], cpu: dict[str, float]) -> float:
    """The send rate of ``calls`` at ``base``; adds the server's CPU per send (all its threads) to ``cpu[base]``."""
    pid = server_pid(base)
    meter = CpuMeter({"server": (lambda: [pid], process_cpu)})
    meter.start()
    got = await anyio.to_thread.run_sync(rate, base, calls, SEND_SECONDS)
    cpu[base] = cpu.get(base, 0.0) + meter.stop()["server"] / (got * SEND_SECONDS)
    return got


async def populate(db_url: str, names: list[str]) -> None:
    """100,000 messages among the agents, inserted as the stores insert them (so the index is kept as it is)."""
    engine = create_engine(Settings(database_url=db_url).database_url)
    start = datetime.now(UTC) - timedelta(days=1)
    seqs = dict.fromkeys(names, 1_000_000)
    try:
        for batch in range(0, MESSAGES, 5000):
            rows, entries = [], []
            for n in range(batch, batch + 5000):
                sender, recipient = random.sample(names, 2)
                message_id = uuid.uuid4().hex
                rows.append(
                    {
                        "message_id": message_id,
                        "sender": sender,
                        "body": body(),
                        "thread_id": f"t{n % 500}",
                        "sent_at": start + timedelta(milliseconds=n),
                    }
                )
                seqs[recipient] += 1
                entries.append({"recipient": recipient, "seq": seqs[recipient], "message_id": message_id})
            async with engine.begin() as conn:
                await conn.execute(messages.insert(), rows)
                await conn.execute(inbox.insert(), entries)
            if engine.dialect.name == "sqlite":  # as the store's checkpointer does after its writes
                async with engine.connect() as conn:
                    await on_driver_thread((await conn.get_raw_connection()).driver_connection, index_pending)
        async with engine.begin() as conn:
            for name, seq in seqs.items():
                await conn.execute(agents.update().where(agents.c.agent_id == name).values(last_seq=seq))
        if engine.dialect.name == "postgresql":
            async with engine.begin() as conn:
                await conn.exec_driver_sql("ANALYZE mesh_messages")
                await conn.exec_driver_sql("ANALYZE mesh_inbox")
    finally:
        await engine.dispose()


def server_pid(base: str) -> int:
    """The bench server listening at ``base`` (its command line ends with the port)."""
    port = base.rsplit(":", 1)[1].encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) >= 4 and argv[-2] == port and argv[1].endswith(b"server.py"):
            return int(entry.name)
    raise RuntimeError(f"no bench server on port {port.decode()}")


def meter(base: str, db_url: str) -> CpuMeter:
    pid = server_pid(base)
    groups: dict[str, Group] = {"server": (lambda: [pid], process_cpu)}
    if db_url.startswith("postgresql"):
        database = db_url.rsplit("/", 1)[1]
        groups["postgres"] = (lambda: postgres_backends(database), thread_cpu)
    return CpuMeter(groups)


def measured(cpu: CpuMeter, into: dict[str, float]) -> None:
    for group, seconds in cpu.stop().items():
        into[group] = into.get(group, 0.0) + seconds


async def search_figure(base: str, db_url: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        names = [f"member-{i}" for i in range(AGENTS)]
        tokens = [await join(client, name) for name in names]
        started = time.perf_counter()
        await populate(db_url, names)
        print(f"  ({MESSAGES} messages among {AGENTS} agents stored in {time.perf_counter() - started:.1f} s)")
        for label, view, who in (
            ("an agent's own messages", "mine", tokens[0]),
            ("every message (overseer)", "all", {}),
        ):
            noop, times, hits = [], [], 0
            cpu = meter(base, db_url)
            noop_cpu: dict[str, float] = {}
            search_cpu: dict[str, float] = {}
            for _ in range(SEARCH_SAMPLES):
                word = random.choice(VOCABULARY)
                cpu.start()
                t0 = time.perf_counter()
                (await client.get("/healthz")).raise_for_status()
                noop.append((time.perf_counter() - t0) * 1000)
                measured(cpu, noop_cpu)
                cpu.start()
                t0 = time.perf_counter()
                r = await client.get("/mesh/search", params={"q": word, "view": view}, headers=who)
                times.append((time.perf_counter() - t0) * 1000)
                measured(cpu, search_cpu)
                r.raise_for_status()
                hits += len(r.json()["hits"])
            n50, p50, p99 = pct(noop, 0.5), pct(times, 0.5), pct(times, 0.99)
            ratio_line(f"search, {label}, p50", p50, "ms", "no-op round trip p50", n50, "<= 5x", p50 <= 5 * n50)
            print(f"  ({SEARCH_SAMPLES} one-word searches, {hits / SEARCH_SAMPLES:.1f} hits a page; p99 {p99:.2f} ms)")
            for group, seconds in search_cpu.items():
                per_search, per_noop = seconds / SEARCH_SAMPLES * 1000, noop_cpu.get(group, 0.0) / SEARCH_SAMPLES * 1000
                print(f"  (CPU per call, {group}: search {per_search:.2f} ms, no-op {per_noop:.2f} ms)")
            print(f"  (load average {os.getloadavg()[0]:.1f})")


async def without_index(db_url: str) -> None:
    """The schema at the head, less the search index (what the send path wrote before it existed)."""
    engine = create_engine(Settings(database_url=db_url).database_url)
    try:
        await upgrade(engine)
        drops = DROP_SQLITE if engine.dialect.name == "sqlite" else DROP_POSTGRES
        async with engine.begin() as conn:
            for statement in drops:
                await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()


@asynccontextmanager
async def two_databases(kind: str, tmp: Path) -> AsyncIterator[tuple[str, str]]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'indexed.db'}", f"sqlite:///{tmp / 'bare.db'}"
        return
    admin = os.environ["MUSTER_TEST_POSTGRES_URL"]
    async with fresh_postgres(admin, "muster_search_a") as a, fresh_postgres(admin, "muster_search_b") as b:
        yield a, b


async def run_on(label: str, kind: str, tmp: Path) -> None:
    print(f"== {label}")
    async with two_databases(kind, tmp) as (indexed_url, bare_url):
        await without_index(bare_url)
        with serve(indexed_url, migrate=True) as indexed, serve(bare_url, migrate=False) as bare:
            await send_figure(indexed, bare)
        with serve(indexed_url, migrate=True) as indexed:
            await search_figure(indexed, indexed_url)


async def on_postgres(tmp: Path) -> None:
    pg_admin = os.environ.get("MUSTER_TEST_POSTGRES_URL", "")
    if "@127.0.0.1" in pg_admin or "@localhost" in pg_admin:
        await run_on("PostgreSQL", "postgres", tmp)
    else:
        print("== PostgreSQL: skipped (set MUSTER_TEST_POSTGRES_URL to a 127.0.0.1 server)")


async def main() -> None:
    started = time.perf_counter()
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack():
            if only in (None, "sqlite"):
                await run_on("SQLite", "sqlite", Path(tmp))
            if only in (None, "postgres"):
                await on_postgres(Path(tmp))
    print(f"== done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    anyio.run(main)
