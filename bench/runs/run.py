"""Runs benchmark: dispatch through the service against ``dispatch()`` in one process, and SSE latency across
instances, each with a ratio against a baseline measured in the same run.

1. Throughput of short runs (a custom agent emitting 20 events): 300 runs posted to an API process (no workers of its
   own) by 8 clients at once, each posting a run in a workspace of its own and following its stream to the end, then
   the next, executed by ``muster worker`` processes of one worker each — one, then two — until the last stream
   ended; against the same agent through ``muster_dispatch.dispatch()`` one run after the other in this process (with
   an in-memory journal). Clients at once keep the queue from running dry: one client posting and following one run
   after the other measures its own round trips, not what the workers get through. No goal: a ratio of 0.5 was asked
   once, and two HTTP exchanges per run alone keep it near 0.2 on this machine; what the service adds to a run is
   judged by its CPU against the floor below.
   Beside it, the CPU a run costs each process (this one — the clients —, each API and worker process, the
   database's PostgreSQL backends), and the ceiling that puts on runs per second with this machine's cores, whatever
   overlaps; and the CPU of one no-op HTTP exchange (client + API): a run is two (POST, stream), a floor for its cost.
   The runs with one worker are measured in five rounds, each after the floor's parts (two no-op exchanges' server
   CPU, ``dispatch()``, one statement writing a run's journal rows), and the verdict is the median round's server CPU
   per run against its own floor (goal: <= 3x): the machine's speed drifts by a third over a minute here, and a floor
   measured once beside runs measured later compared two machines.
2. SSE event latency p50/p99: a run's agent stamps each of its events with the wall clock as it yields it; a client
   of the OTHER API instance (the run posted to the first) receives them over SSE; latency = receipt - stamp. Against
   the no-op round trip (``GET /healthz``) of that same instance. Goal: p99 <= 3x.

Processes: two ``muster serve`` and up to two ``muster worker`` on one database, 127.0.0.1. PostgreSQL when
MUSTER_TEST_POSTGRES_URL points at 127.0.0.1 (a fresh database, dropped after), then one SQLite file (processes on it
wake each other through wake files watched with watchfiles: the second figure measures that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

import anyio
import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import bench_agents  # noqa: E402

from cpu import CpuMeter, Group, postgres_backends, process_cpu, thread_cpu  # noqa: E402
from muster_dispatch import AgentInput, Journal, custom_agent, dispatch  # noqa: E402
from pg import fresh_postgres  # noqa: E402
from serving import READY_WITHIN, free_port, wait_ready  # noqa: E402

MUSTER = Path(sys.executable).with_name("muster")
RUNS = 300
# Rounds of the floor's parts and the runs, alternating (see floor_lines).
ROUNDS = 5
WARMUP = 10
NOOP_SAMPLES = 2000
CLIENTS = 8
CORES = os.cpu_count() or 1
AGENTS = {
    "twenty": {"kind": "custom", "entrypoint": "bench_agents:twenty"},
    "ticker": {"kind": "custom", "entrypoint": "bench_agents:ticker"},
}


def ratio_line(name: str, value: float, unit: str, baseline_name: str, baseline: float, goal: str, ok: bool) -> None:
    ratio = value / baseline if baseline else float("inf")
    verdict = "meets" if ok else "MISSES"
    print(
        f"  {name:<34} {value:>9.2f} {unit:<6} | {baseline_name:<30} {baseline:>9.2f} {unit:<6} | "
        f"ratio {ratio:5.2f} ({verdict} goal {goal})",
        flush=True,
    )


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Cluster:
    def __init__(self, db_url: str, tmp: Path) -> None:
        self.tmp = tmp
        config = tmp / "muster.json"
        config.write_text(json.dumps({"dispatch_agents": AGENTS}))
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")},
            "MUSTER_DATABASE_URL": db_url,
            "MUSTER_CONFIG": str(config),
            "MUSTER_LOG_LEVEL": "WARNING",
            "MUSTER_WORKSPACES_ROOT": str(tmp / "workspaces"),
            "MUSTER_DISPATCH_HOMES": str(tmp / "homes"),
            "PYTHONPATH": str(HERE),
        }
        self.stack = ExitStack()
        self.pids: dict[str, int] = {}
        self.database = db_url.rpartition("/")[2] if db_url.startswith("postgresql") else None

    def _spawn(self, args: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("wb")
        self.stack.callback(log.close)
        proc = subprocess.Popen([str(MUSTER), *args], env=env, stdout=log, stderr=log)
        self.pids[name] = proc.pid

        def stop() -> None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        self.stack.callback(stop)
        return proc

    def api(self, name: str) -> str:
        port = free_port()
        proc = self._spawn(["serve", "--port", str(port)], {**self.env, "MUSTER_DISPATCH_WORKERS": "0"}, name)
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, proc, name, lambda: f":\n{(self.tmp / f'{name}.log').read_text()}")
        return base

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        env = {**self.env, "MUSTER_DISPATCH_WORKERS": "1", "MUSTER_LOG_LEVEL": "INFO"}
        proc = self._spawn(["worker"], env, name)
        deadline = time.monotonic() + READY_WITHIN
        while "worker(s) ready" not in (self.tmp / f"{name}.log").read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.05)
        return proc

    def meter(self, only: list[str] | None = None) -> CpuMeter:
        """The CPU of this process (the clients), of each server process, and of the database's backends (or of the
        groups named in ``only``)."""
        groups: dict[str, Group] = {"client": (lambda: [os.getpid()], process_cpu)}
        for name, pid in self.pids.items():
            groups[name] = (lambda pid=pid: [pid], process_cpu)  # type: ignore[misc]
        if self.database is not None:
            database = self.database
            groups["PostgreSQL"] = (lambda: postgres_backends(database), thread_cpu)
        return CpuMeter({name: group for name, group in groups.items() if only is None or name in only})


async def until_over(client: httpx.AsyncClient, run_id: str) -> None:
    """Follow the run's stream to its end, as a client wanting the run's outcome does: its ``result`` event, after
    which the service ends the stream. Read to the end, the connection goes back to the client's pool; a client
    leaving at the event's name dropped it, and every run paid a new connection on both sides."""
    over = False
    async with client.stream("GET", f"/dispatch/runs/{run_id}/events") as response:
        async for line in response.aiter_lines():
            over = over or line == "event: result"
    assert over, f"the stream of {run_id} ended without its result"


async def post(client: httpx.AsyncClient, agent: str, workspace: str) -> str:
    response = await client.post("/dispatch/runs", json={"agent": agent, "prompt": "go", "workspace": workspace})
    response.raise_for_status()
    run_id: str = response.json()["id"]
    return run_id


class Throughput(NamedTuple):
    runs_per_s: float
    cpu_ms: dict[str, float]  # CPU milliseconds per run, by process (group)

    @property
    def total_cpu_ms(self) -> float:
        return sum(self.cpu_ms.values())

    @property
    def ceiling(self) -> float:
        """The runs per second this machine's cores could give at most, at this CPU cost per run."""
        return CORES * 1000 / self.total_cpu_ms if self.total_cpu_ms else float("inf")


async def completed(client: httpx.AsyncClient, ids: set[str]) -> int:
    """How many of these runs the service lists as completed (every page of them)."""
    found, cursor = 0, None
    while True:
        params = {"status": "completed", "limit": 200, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/dispatch/runs", params=params)).json()
        found += sum(1 for r in page["runs"] if r["id"] in ids)
        cursor = page["next_cursor"]
        if cursor is None:
            return found


async def api_throughput(client: httpx.AsyncClient, tag: str, meter: CpuMeter) -> Throughput:
    """RUNS runs by CLIENTS clients at once, each client posting its runs one after the other in a workspace of its
    own, as ``dispatch()`` of the floor runs in one existing workspace (an agent's workspace outlives its runs; a
    new directory for every run cost the API a ``mkdir``, about a tenth of a millisecond here, that the floor never
    pays)."""
    for index in range(WARMUP):
        await until_over(client, await post(client, "twenty", f"{tag}-{index % CLIENTS}"))
    ids: list[str] = []
    todo = iter(range(RUNS))

    async def one_client(workspace: str) -> None:
        for _ in todo:
            run_id = await post(client, "twenty", workspace)
            ids.append(run_id)
            await until_over(client, run_id)

    meter.start()
    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index in range(CLIENTS):
            group.start_soon(one_client, f"{tag}-{index}")
    elapsed = time.perf_counter() - started
    spent = meter.stop()
    assert await completed(client, set(ids)) == RUNS, "every run completed"
    return Throughput(RUNS / elapsed, {name: seconds * 1000 / RUNS for name, seconds in spent.items()})


async def local_throughput(tmp: Path) -> Throughput:
    agent = custom_agent(bench_agents.twenty, name="twenty")
    workspace = tmp / "local"
    workspace.mkdir(exist_ok=True)
    for _ in range(WARMUP):
        await dispatch(agent, AgentInput("go"), workspace=workspace, journal=Journal()).result()
    cpu = time.process_time()
    started = time.perf_counter()
    for _ in range(RUNS):
        result = await dispatch(agent, AgentInput("go"), workspace=workspace, journal=Journal()).result()
        assert result.status == "completed"
    elapsed = time.perf_counter() - started
    return Throughput(RUNS / elapsed, {"dispatch()": (time.process_time() - cpu) * 1000 / RUNS})


def cpu_lines(label: str, measured: Throughput, local: Throughput, exchange_ms: float) -> None:
    """Where a run's CPU goes, and the ceiling it puts on the runs per second of this machine: however the work
    overlaps, CORES seconds of CPU a second is all there is. A run through the API is at least two HTTP exchanges
    (its POST, its stream): twice the no-op's CPU is a floor no change behind the routes can go under."""
    shares = ", ".join(f"{name} {ms:.2f}" for name, ms in measured.cpu_ms.items())
    print(
        f"    CPU per run (ms), {label}: {shares} = {measured.total_cpu_ms:.2f} "
        f"(dispatch() in one process: {local.total_cpu_ms:.2f}; one no-op HTTP exchange, client + API: "
        f"{exchange_ms:.2f})",
        flush=True,
    )
    at_cost = CORES * local.total_cpu_ms / measured.total_cpu_ms if measured.total_cpu_ms else float("inf")
    print(
        f"    ceiling on {CORES} cores at that CPU: {measured.ceiling:.0f} run/s = ratio "
        f"{measured.ceiling / local.runs_per_s:.2f} against dispatch() as measured, {at_cost:.2f} against dispatch() "
        f"at its CPU per run ({CORES} x {local.total_cpu_ms:.2f} / {measured.total_cpu_ms:.2f}); two no-op "
        f"exchanges alone: {CORES * local.total_cpu_ms / (2 * exchange_ms):.2f}",
        flush=True,
    )


async def noop_round_trip(client: httpx.AsyncClient, meter: CpuMeter) -> tuple[list[float], dict[str, float]]:
    """The no-op's round trips (ms), and the CPU one costs each process metered (ms)."""
    samples = []
    meter.start()
    for _ in range(NOOP_SAMPLES):
        started = time.perf_counter()
        (await client.get("/healthz")).raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    spent = meter.stop()
    return samples, {name: seconds * 1000 / NOOP_SAMPLES for name, seconds in spent.items()}


async def sse_latency(first: httpx.AsyncClient, other: httpx.AsyncClient) -> list[float]:
    run_id = await post(first, "ticker", "ticker")
    latencies: list[float] = []
    async with other.stream("GET", f"/dispatch/runs/{run_id}/events") as response:
        async for line in response.aiter_lines():
            if line == "event: result":
                break
            if not line.startswith("data: "):
                continue
            received = time.time()
            event = json.loads(line[6:])["event"]
            if isinstance(event.get("data"), dict) and "t" in event["data"]:
                latencies.append((received - event["data"]["t"]) * 1000)
    return latencies[10:]  # the first ones meet connections still warming up


class Floor(NamedTuple):
    """A run's work done with nothing wasted, CPU ms, measured in the same run: the server side of two no-op
    exchanges (a run's POST and its stream), ``dispatch()`` of the same agent in one process, and one statement
    writing the run's journal rows (this process's driver and, on PostgreSQL, the backend)."""

    exchanges: float
    dispatch: float
    journal: float

    @property
    def total(self) -> float:
        return self.exchanges + self.dispatch + self.journal


JOURNAL_SAMPLES = 500
JOURNAL_TABLE = "bench_floor_journal"
JOURNAL_DDL = (
    f"CREATE TABLE IF NOT EXISTS {JOURNAL_TABLE} (run_id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL, "
    "source TEXT NOT NULL, scope TEXT NOT NULL, event TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
)


def journal_rows(run: int) -> list[tuple[str, int, str, str, str, str]]:
    """The rows of one run of the ``twenty`` agent as its journal holds them (the event as JSON)."""
    at = "2030-01-01T00:00:00.000000+00:00"
    texts = [*(str(i) for i in range(bench_agents.EVENTS - 1)), "done"]
    kinds = ["text_delta"] * (bench_agents.EVENTS - 1) + ["text"]
    return [
        (f"run-{run}", seq, at, "agent", "{}", json.dumps({"type": kind, "text": text}))
        for seq, (kind, text) in enumerate(zip(kinds, texts, strict=True), start=1)
    ]


async def journal_statement(db_url: str, group: Cluster) -> float:
    """CPU ms of one statement inserting a run's journal rows, in this process and the database's backend."""
    if db_url.startswith("postgresql"):
        import asyncpg  # type: ignore[import-untyped]

        conn = await asyncpg.connect(db_url)
        try:
            await conn.execute(JOURNAL_DDL)
            insert = (
                f"INSERT INTO {JOURNAL_TABLE} SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], "
                "$5::text[], $6::text[])"
            )
            # This process's CPU from its own clock: in ``/proc``'s 10 ms ticks it was a few ticks of the figure.
            meter = group.meter(["PostgreSQL"])
            meter.start()
            started = time.process_time()
            for run in range(JOURNAL_SAMPLES):
                await conn.execute(insert, *(list(column) for column in zip(*journal_rows(run), strict=True)))
            client_s = time.process_time() - started
            spent = meter.stop()
            await conn.execute(f"DROP TABLE {JOURNAL_TABLE}")
        finally:
            await conn.close()
        return (client_s + float(sum(spent.values()))) * 1000 / JOURNAL_SAMPLES
    import sqlite3

    conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(JOURNAL_DDL)
        insert = f"INSERT INTO {JOURNAL_TABLE} VALUES " + ",".join(["(?,?,?,?,?,?)"] * bench_agents.EVENTS)
        started = time.process_time()
        for run in range(JOURNAL_SAMPLES):
            conn.execute(insert, [value for row in journal_rows(run) for value in row])
        spent_s = time.process_time() - started
        conn.execute(f"DROP TABLE {JOURNAL_TABLE}")
    finally:
        conn.close()
    return spent_s * 1000 / JOURNAL_SAMPLES


def server_cpu(measured: Throughput) -> dict[str, float]:
    """The run's server CPU per run by process (API, worker, database backends: not the clients), ms."""
    return {name: ms for name, ms in measured.cpu_ms.items() if name != "client"}


def server_ms(measured: Throughput) -> float:
    return sum(server_cpu(measured).values())


class Round(NamedTuple):
    """One round: the floor's parts, then the runs, measured one after the other."""

    floor: Floor
    local: Throughput
    measured: Throughput
    exchange: float  # one no-op HTTP exchange's CPU, client + API (ms)

    @property
    def ratio(self) -> float:
        return server_ms(self.measured) / self.floor.total


def floor_lines(rounds: list[Round]) -> Round:
    """Each round's server CPU per run against its floor, and the verdict on their median (goal: <= 3x): the
    machine's speed drifts by a third over a minute here, and a floor measured in one place against runs measured in
    another compared two machines. The round of the median ratio is returned."""
    for index, one in enumerate(rounds, start=1):
        floor = one.floor
        shares = ", ".join(f"{name} {ms:.2f}" for name, ms in server_cpu(one.measured).items())
        print(
            f"    round {index}: server CPU per run {server_ms(one.measured):.2f} ms ({shares}); floor: two no-op "
            f"exchanges' server CPU {floor.exchanges:.2f} + dispatch() {floor.dispatch:.2f} + one statement writing "
            f"the journal {floor.journal:.2f} = {floor.total:.2f} ms; ratio {one.ratio:.2f}",
            flush=True,
        )
    middle = sorted(rounds, key=lambda one: one.ratio)[len(rounds) // 2]
    ratio_line(
        f"server CPU per run, median of {len(rounds)}",
        server_ms(middle.measured),
        "ms",
        "its round's floor",
        middle.floor.total,
        "<= 3x",
        middle.ratio <= 3,
    )
    return middle


@contextmanager
def cluster(db_url: str, tmp: Path) -> Iterator[Cluster]:
    group = Cluster(db_url, tmp)
    with group.stack:
        yield group


async def rounds_of_one_worker(
    group: Cluster, db_url: str, tmp: Path, first: httpx.AsyncClient, other: httpx.AsyncClient
) -> tuple[list[Round], list[float]]:
    """ROUNDS rounds, each the floor's parts then RUNS runs through the API with one worker; and every no-op round
    trip's time (ms)."""
    rounds, noops = [], []
    for index in range(ROUNDS):
        noop, noop_cpu = await noop_round_trip(other, group.meter(["client", "api-2"]))
        noops.extend(noop)
        journal_ms = await journal_statement(db_url, group)
        local = await local_throughput(tmp)
        measured = await api_throughput(first, f"one{index}", group.meter())
        floor = Floor(2 * noop_cpu["api-2"], local.total_cpu_ms, journal_ms)
        rounds.append(Round(floor, local, measured, sum(noop_cpu.values())))
    return rounds, noops


async def run_on(label: str, db_url: str) -> None:
    print(f"== {label}", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with cluster(db_url, tmp) as group:
            first_url, other_url = group.api("api-1"), group.api("api-2")
            async with (
                httpx.AsyncClient(base_url=first_url, timeout=120) as first,
                httpx.AsyncClient(base_url=other_url, timeout=120) as other,
            ):
                group.worker("worker-1")
                rounds, noop = await rounds_of_one_worker(group, db_url, tmp, first, other)
                middle = floor_lines(rounds)
                one, local = middle.measured, middle.local
                ratio_line(
                    "runs/s, API + 1 worker",
                    one.runs_per_s,
                    "run/s",
                    "dispatch() in one process",
                    local.runs_per_s,
                    "(none)",
                    True,
                )
                exchange_ms = middle.exchange
                cpu_lines("1 worker (the median round)", one, local, exchange_ms)
                group.worker("worker-2")
                two = await api_throughput(first, "two", group.meter())
                ratio_line(
                    "runs/s, API + 2 workers",
                    two.runs_per_s,
                    "run/s",
                    "dispatch() in one process",
                    local.runs_per_s,
                    "(none)",
                    True,
                )
                cpu_lines("2 workers", two, local, exchange_ms)
                latencies = await sse_latency(first, other)
                n50, n99 = pct(noop, 0.5), pct(noop, 0.99)
                p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
                ratio_line("SSE event latency p50 (other API)", p50, "ms", "no-op round trip p50", n50, "(none)", True)
                ratio_line(
                    "SSE event latency p99 (other API)", p99, "ms", "no-op round trip p99", n99, "<= 3x", p99 <= 3 * n99
                )
                print(
                    f"  ({len(latencies)} events; {RUNS} runs of {bench_agents.EVENTS} events per throughput figure, "
                    f"{CLIENTS} clients at once)"
                )


async def main() -> None:
    started = time.perf_counter()
    pg_admin = os.environ.get("MUSTER_TEST_POSTGRES_URL", "")
    if "@127.0.0.1" in pg_admin or "@localhost" in pg_admin:
        async with fresh_postgres(pg_admin, "muster_bench_runs") as url:
            await run_on("PostgreSQL", url)
    else:
        print("== PostgreSQL: skipped (set MUSTER_TEST_POSTGRES_URL to a 127.0.0.1 server)")
    with tempfile.TemporaryDirectory() as tmp:
        await run_on("SQLite", f"sqlite:///{Path(tmp) / 'bench.db'}")
    print(f"== done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    anyio.run(main)
