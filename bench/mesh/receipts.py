"""Delivery receipts benchmark: the send path before and after receipts, on SQLite and on PostgreSQL.

Direct sends (``POST /mesh/messages``, a short body) from 16 concurrent clients in several processes, against the
same load on the code before receipts: that revision's sources (``git archive``) served the same way, by its own
``bench/mesh/server.py``, on a database of its own migrated by its own code. Both servers run side by side and are
measured alternately, best of three each. Goal: ratio >= 0.9.

The revision before receipts is the parent of the commit that added their migration; set MUSTER_BENCH_BASE to
compare against another one.

Usage: python bench/mesh/receipts.py  (PostgreSQL when MUSTER_TEST_POSTGRES_URL points at 127.0.0.1)
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from pg import fresh_postgres  # noqa: E402
from serving import mesh_bench_server  # noqa: E402

sys.path.insert(0, str(HERE))
from closed_loop import Call, join, rate  # noqa: E402

CLIENTS = 16
SEND_SECONDS = 3.0
ROUNDS = 3
MIGRATION = "services/api/src/muster_api/migrations/versions/0009_receipts_inbox_receipts.py"
SOURCES = ("packages", "services", "bench")


def base_revision() -> str:
    given = os.environ.get("MUSTER_BENCH_BASE")
    if given:
        return given
    added = subprocess.run(
        ["git", "log", "--format=%H", "--diff-filter=A", "-1", "--", MIGRATION],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not added:
        raise SystemExit(f"cannot find the commit that added {MIGRATION}: set MUSTER_BENCH_BASE")
    return f"{added}^"


def extract(revision: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", revision, *SOURCES], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def python_path(tree: Path) -> str:
    sources = [*sorted((tree / "packages").glob("*/src")), tree / "services" / "api" / "src"]
    return os.pathsep.join(str(p) for p in sources)


@contextmanager
def serve(db_url: str, tree: Path) -> Iterator[str]:
    """``tree``'s own bench server, importing ``tree``'s sources first (ahead of the editable install)."""
    env = {**os.environ, "MUSTER_LOG_LEVEL": "WARNING", "PYTHONPATH": python_path(tree)}
    server = tree / "bench" / "mesh" / "server.py"
    with mesh_bench_server(server, db_url, env, f"bench server of {tree}") as base:
        yield base


async def send_calls(base: str) -> list[Call]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        calls = []
        for i in range(CLIENTS):
            sender = await join(client, f"sender-{i}")
            await join(client, f"peer-{i}")
            body = {"to": f"peer-{i}", "body": f"review PR {i} please, the tests pass", "confirm": True}
            calls.append(Call("/mesh/messages", body, sender))
        return calls


async def send_figure(after: str, before: str) -> None:
    now_calls, then_calls = await send_calls(after), await send_calls(before)
    await anyio.to_thread.run_sync(rate, after, now_calls, 1.0)  # warm both (connections, statement caches)
    await anyio.to_thread.run_sync(rate, before, then_calls, 1.0)
    after_rates, before_rates = [], []
    for _ in range(ROUNDS):
        before_rates.append(await anyio.to_thread.run_sync(rate, before, then_calls, SEND_SECONDS))
        after_rates.append(await anyio.to_thread.run_sync(rate, after, now_calls, SEND_SECONDS))
    got, floor = max(after_rates), max(before_rates)
    ratio = got / floor
    print(
        f"  direct sends with receipts, {CLIENTS} clients {got:>9.1f} msg/s | before receipts {floor:>9.1f} msg/s | "
        f"ratio {ratio:5.2f} ({'meets' if ratio >= 0.9 else 'MISSES'} goal >= 0.9)"
    )


@asynccontextmanager
async def two_databases(kind: str, tmp: Path) -> AsyncIterator[tuple[str, str]]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'after.db'}", f"sqlite:///{tmp / 'before.db'}"
        return
    admin = os.environ["MUSTER_TEST_POSTGRES_URL"]
    async with fresh_postgres(admin, "muster_receipts_a") as a, fresh_postgres(admin, "muster_receipts_b") as b:
        yield a, b


async def run_on(label: str, kind: str, tmp: Path, before_tree: Path) -> None:
    print(f"== {label}")
    async with two_databases(kind, tmp) as (after_url, before_url):
        with serve(after_url, ROOT) as after, serve(before_url, before_tree) as before:
            await send_figure(after, before)


async def main() -> None:
    started = time.perf_counter()
    revision = base_revision()
    with tempfile.TemporaryDirectory() as tmp:
        before_tree = extract(revision, Path(tmp) / "before")
        print(f"== before receipts: {revision}")
        await run_on("SQLite", "sqlite", Path(tmp), before_tree)
        pg_admin = os.environ.get("MUSTER_TEST_POSTGRES_URL", "")
        if "@127.0.0.1" in pg_admin or "@localhost" in pg_admin:
            await run_on("PostgreSQL", "postgres", Path(tmp), before_tree)
        else:
            print("== PostgreSQL: skipped (set MUSTER_TEST_POSTGRES_URL to a 127.0.0.1 server)")
    print(f"== done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    anyio.run(main)
