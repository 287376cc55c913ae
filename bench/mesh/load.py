"""Mesh under sustained load, and the service's memory: the mesh benchmark's fourth leg (run by ``run.py``).

Two API instances (``bench/mesh/server.py``: uvicorn on the Muster app, one process each) share one fresh PostgreSQL
database. 100 agents long-poll their inboxes (``GET /mesh/inbox?wait_seconds=30``, half on each instance), 50 agents
send direct messages to random ones of them as fast as they are answered (closed loop, half on each instance), for
60 s. Printed: messages/s, p99 send latency, p99 wake latency (from the message's ``sent_at`` to the reader holding
it), every message counted (sent, received, lost, duplicated), and the servers' CPU per delivered message (utime +
stime of both server processes from ``/proc/<pid>/stat``, before and after, over the messages delivered: the send,
its wake and the re-poll together). Baseline, same servers, same load generator, same run: ``GET /healthz`` from the
same 50 clients, CPU per no-op request and its p99.

The load generator is several processes, each with its own event loop (uvloop) and one lean keep-alive connection
per client (``wire.py``); its own CPU use is printed beside the figures, so that a reader can see it was not
saturated.

Memory: the RSS (``VmRSS`` of ``/proc/<pid>/status``) of each server process idle, after the load, with 10,000 live
agents (checked in through the API), and after 100,000 messages in all (the load's, then fan-outs to roles of 100 of
those agents); on PostgreSQL, and on SQLite with one instance.

Shorter runs: MUSTER_BENCH_LOAD_SECONDS (default 60), MUSTER_BENCH_MEMORY_MESSAGES (default 100000; 0 skips the
memory figures),
MUSTER_BENCH_LOAD_WORKERS (load generator processes, default 4). Run alone: ``python bench/mesh/load.py``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
from anyio.abc import TaskGroup

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from pg import fresh_postgres  # noqa: E402

sys.path.insert(0, str(HERE))
from processes import serve  # noqa: E402
from wire import Connection  # noqa: E402

LOAD_SECONDS = float(os.environ.get("MUSTER_BENCH_LOAD_SECONDS", "60"))
MEMORY_MESSAGES = int(os.environ.get("MUSTER_BENCH_MEMORY_MESSAGES", "100000"))
WORKERS = int(os.environ.get("MUSTER_BENCH_LOAD_WORKERS", "4"))
BASELINE_SECONDS = max(3.0, min(15.0, LOAD_SECONDS / 4))
READERS = 100
SENDERS = 50
MEMORY_AGENTS = 10_000
MEMORY_GROUPS = 100  # roles of 100 agents each: a fan-out to one stores 100 messages
WAIT_SECONDS = 30
DRAIN_SECONDS = 35.0  # longer than a long-poll: a message still missing after it is lost
TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- server processes


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (fields 14 and 15 of /proc/<pid>/stat, after the command name)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------------------------------------- load generator


@dataclass
class Agent:
    agent_id: str
    token: str
    instance: int


@dataclass
class Job:
    """One load generator process's share of a phase."""

    mode: str  # "noop", "load", "send" or "checkin"
    bases: list[str]
    seconds: float = 0.0
    readers: list[Agent] = field(default_factory=list)
    senders: list[Agent] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    address: str = "to"  # a send's field the targets go in: "to" (direct) or "role" (fan-out)
    quota: int = 0  # "noop": clients; "send": messages; "checkin": agent ids from ``first``
    first: int = 0


@dataclass
class Outcome:
    cpu: float = 0.0
    sent: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)
    send_ms: list[float] = field(default_factory=list)
    wake_ms: list[float] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # failed requests by status code or transport error
    stored: int = 0  # inbox entries the sends stored

    def failed(self, kind: str) -> None:
        self.errors += 1
        self.failures[kind] += 1


@dataclass
class Shared:
    start: Any
    stop: Any
    sent: Synchronized[int]
    received: Synchronized[int]
    results: Any


def auth(agent: Agent) -> dict[str, str]:
    return {"Authorization": f"Bearer {agent.token}"}


async def read_forever(client: Connection, reader: Agent, out: Outcome, shared: Shared) -> None:
    headers = auth(reader)
    cursor: int | None = None
    while True:
        query = f"wait_seconds={WAIT_SECONDS}" + (f"&after={cursor}" if cursor is not None else "")
        try:
            status, body = await client.request("GET", f"/mesh/inbox?{query}", headers)
        except OSError as exc:
            # A keep-alive connection the server closed as it was reused: counted, and the read is repeated.
            out.requests += 1
            out.failed(f"GET {type(exc).__name__}")
            continue
        held = time.time()
        out.requests += 1
        if status != 200:
            out.failed(f"GET {status}")
            continue
        page = json.loads(body)
        for m in page["messages"]:
            out.received.append(m["message_id"])
            out.wake_ms.append((held - datetime.fromisoformat(m["sent_at"]).timestamp()) * 1000)
        if page["messages"]:
            with shared.received.get_lock():
                shared.received.value += len(page["messages"])
        cursor = page["next_cursor"]


async def send_until(
    client: Connection,
    sender: Agent,
    targets: list[str],
    address: str,
    until: float,
    quota: int | None,
    out: Outcome,
    shared: Shared,
) -> None:
    headers = auth(sender)
    rng = random.Random(sender.agent_id)
    n = 0
    while time.monotonic() < until and (quota is None or n < quota):
        body = {address: rng.choice(targets), "body": f"{sender.agent_id} {n}", "confirm": True}
        started = time.perf_counter()
        try:
            status, answered = await client.request("POST", "/mesh/messages", headers, body)
        except OSError as exc:
            # Not repeated: the message may have been stored (it then counts as unexpected, not as lost).
            out.requests += 1
            out.failed(f"POST {type(exc).__name__}")
            continue
        out.send_ms.append((time.perf_counter() - started) * 1000)
        out.requests += 1
        n += 1
        if status != 200:
            out.failed(f"POST {status}")
            continue
        answer = json.loads(answered)
        out.sent.append(answer["message_id"])
        out.stored += answer["stored"]
        with shared.sent.get_lock():
            shared.sent.value += 1


async def noop_until(client: Connection, until: float, out: Outcome) -> None:
    while time.monotonic() < until:
        started = time.perf_counter()
        status, _ = await client.request("GET", "/healthz")
        out.send_ms.append((time.perf_counter() - started) * 1000)
        out.requests += 1
        if status != 200:
            out.errors += 1


async def checkin_range(client: Connection, ids: Iterator[int], out: Outcome) -> None:
    for i in ids:
        body = {"agent_id": f"mem-{i:05d}", "role": f"mem-{i % MEMORY_GROUPS}", "confirm": True}
        status, _ = await client.request("POST", "/mesh/checkin", None, body)
        out.requests += 1
        if status != 200:
            out.errors += 1


async def wait_stop(shared: Shared) -> None:
    while not shared.stop.is_set():
        await anyio.sleep(0.05)


def start_clients(job: Job, connect: Callable[[int], Connection], out: Outcome, shared: Shared, tg: TaskGroup) -> None:
    """The job's closed-loop clients (senders, no-op callers or check-ins), until their deadline or quota."""
    until = time.monotonic() + job.seconds
    if job.mode == "noop":
        for i in range(job.quota):
            tg.start_soon(noop_until, connect(i), until, out)
    elif job.mode == "checkin":
        ids = iter(range(job.first, job.first + job.quota))
        for i in range(16):
            tg.start_soon(checkin_range, connect(i), ids, out)
    else:
        n = len(job.senders)
        for i, sender in enumerate(job.senders):
            share = None if job.mode == "load" else job.quota // n + (i < job.quota % n)
            client = connect(sender.instance)
            tg.start_soon(send_until, client, sender, job.targets, job.address, until, share, out, shared)


async def run_job(job: Job, shared: Shared) -> Outcome:
    """Each client its own keep-alive connection to its instance (``wire.Connection``: see there why not httpx)."""
    out = Outcome()
    opened: list[Connection] = []

    def connect(instance: int) -> Connection:
        opened.append(Connection(job.bases[instance % len(job.bases)]))
        return opened[-1]

    try:
        await anyio.to_thread.run_sync(shared.start.wait)
        cpu0 = time.process_time()
        async with anyio.create_task_group() as tg:
            for reader in job.readers:
                tg.start_soon(read_forever, connect(reader.instance), reader, out, shared)
            async with anyio.create_task_group() as workers:
                start_clients(job, connect, out, shared, workers)
            shared.results.put(("done", len(out.sent)))
            if job.readers:
                await wait_stop(shared)
            tg.cancel_scope.cancel()
        out.cpu = time.process_time() - cpu0
        return out
    finally:
        for connection in opened:
            connection.close()


def worker_main(job: Job, shared: Shared) -> None:
    out = anyio.run(run_job, job, shared, backend_options={"use_uvloop": True})
    shared.results.put(("outcome", out))


@dataclass
class Phase:
    outcome: Outcome
    wall: float
    server_cpu: float
    loadgen_cpu: float
    loadgen_peak: float  # the busiest load generator process's share of one core


def merge(outcomes: list[Outcome]) -> Outcome:
    total = Outcome()
    for o in outcomes:
        total.sent += o.sent
        total.received += o.received
        total.send_ms += o.send_ms
        total.wake_ms += o.wake_ms
        total.requests += o.requests
        total.errors += o.errors
        total.failures += o.failures
        total.stored += o.stored
        total.cpu += o.cpu
    return total


def run_phase(jobs: list[Job], pids: list[int]) -> Phase:
    """Run the jobs in one process each, started together; measured from their start until every outcome is in."""
    ctx = mp.get_context("spawn")
    shared = Shared(ctx.Event(), ctx.Event(), ctx.Value("q", 0), ctx.Value("q", 0), ctx.Queue())
    procs = [ctx.Process(target=worker_main, args=(job, shared)) for job in jobs]
    for p in procs:
        p.start()
    time.sleep(0.5 + 0.2 * len(procs))  # let the workers import and open their clients (not measured)
    cpu0 = sum(cpu_seconds(pid) for pid in pids)
    started = time.monotonic()
    shared.start.set()
    outcomes: list[Outcome] = []
    done = 0
    drain_until: float | None = None
    while len(outcomes) < len(procs):
        try:
            kind, value = shared.results.get(timeout=0.1)
        except Exception:  # queue.Empty
            kind, value = "", None
        if kind == "done":
            done += 1
        elif kind == "outcome":
            outcomes.append(value)
        if done == len(procs) and not shared.stop.is_set():
            drain_until = drain_until or time.monotonic() + DRAIN_SECONDS
            if shared.received.value >= shared.sent.value or time.monotonic() > drain_until:
                shared.stop.set()
    wall = time.monotonic() - started
    server_cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
    for p in procs:
        p.join()
    total = merge(outcomes)
    return Phase(total, wall, server_cpu, total.cpu, max(o.cpu for o in outcomes) / wall)


# ---------------------------------------------------------------------------------------------- the figures


def split(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i::n] for i in range(n)]


def join_agents(bases: list[str], prefix: str, count: int) -> list[Agent]:
    agents = []
    with httpx.Client(timeout=30) as client:
        for i in range(count):
            instance, agent_id = i % len(bases), f"{prefix}-{i:03d}"
            body = {"agent_id": agent_id, "role": "builder", "confirm": True}
            r = client.post(f"{bases[instance]}/mesh/checkin", json=body)
            r.raise_for_status()
            agents.append(Agent(agent_id, r.json()["token"], instance))
    return agents


def baseline(bases: list[str], pids: list[int]) -> tuple[float, float]:
    jobs = [Job("noop", bases, BASELINE_SECONDS, quota=len(share)) for share in split(list(range(SENDERS)), WORKERS)]
    phase = run_phase(jobs, pids)
    o = phase.outcome
    per = phase.server_cpu / o.requests * 1000
    print(
        f"  baseline GET /healthz, {SENDERS} clients: {o.requests / phase.wall:8.1f} req/s, "
        f"p99 {pct(o.send_ms, 0.99):.1f} ms, server CPU {per:.3f} ms/request (errors {o.errors})"
    )
    return per, pct(o.send_ms, 0.99)


def load(bases: list[str], pids: list[int], readers: list[Agent], senders: list[Agent]) -> Phase:
    targets = [r.agent_id for r in readers]
    jobs = [
        Job("load", bases, LOAD_SECONDS, readers=rs, senders=ss, targets=targets)
        for rs, ss in zip(split(readers, WORKERS), split(senders, WORKERS), strict=True)
    ]
    return run_phase(jobs, pids)


def report_load(phase: Phase, base_cpu: float, base_p99: float) -> None:
    o = phase.outcome
    sent, received = set(o.sent), set(o.received)
    lost, dup, stray = len(sent - received), len(o.received) - len(received), len(received - sent)
    per = phase.server_cpu / max(len(received), 1) * 1000
    p99_send = pct(o.send_ms, 0.99)
    print(
        f"  {READERS} readers long-polling, {SENDERS} senders, 2 instances, {LOAD_SECONDS:.0f} s: "
        f"{len(received) / phase.wall:8.1f} messages/s delivered"
    )
    print(
        f"  messages: sent {len(o.sent)}, received {len(o.received)}, lost {lost}, duplicated {dup}, unexpected {stray}"
        f", failed requests {o.errors}"
        + (f" ({', '.join(f'{k}: {v}' for k, v in o.failures.items())})" if o.errors else "")
    )
    print(
        f"  send p50 {pct(o.send_ms, 0.5):.1f} ms, p99 {p99_send:.1f} ms ({p99_send / base_p99:.2f}x the no-op p99); "
        f"wake p50 {pct(o.wake_ms, 0.5):.1f} ms, p99 {pct(o.wake_ms, 0.99):.1f} ms (sent_at -> reader holds it)"
    )
    verdict = "meets" if per <= 2.0 else "MISSES"
    print(
        f"  server CPU per delivered message {per:.3f} ms ({verdict} goal <= 2 ms) | per no-op request "
        f"{base_cpu:.3f} ms | ratio {per / base_cpu:.2f}"
    )
    print(
        f"  load generator: {WORKERS} processes, {phase.loadgen_cpu:.1f} s CPU in {phase.wall:.1f} s "
        f"({phase.loadgen_cpu / phase.wall:.2f} cores; busiest process {phase.loadgen_peak:.0%} of a core); "
        f"servers {phase.server_cpu / phase.wall:.2f} cores; machine load {os.getloadavg()[0]:.2f}"
    )


def memory(bases: list[str], pids: list[int], senders: list[Agent], delivered: int) -> None:
    def rss(label: str) -> None:
        print(f"  RSS {label:<32} " + ", ".join(f"{rss_mib(pid):7.1f} MiB" for pid in pids))

    if delivered:
        rss(f"after {delivered} messages")
    step = -(-MEMORY_AGENTS // WORKERS)
    jobs = [
        Job("checkin", bases, 3600, quota=min(step, MEMORY_AGENTS - first), first=first)
        for first in range(0, MEMORY_AGENTS, step)
    ]
    phase = run_phase(jobs, pids)
    if phase.outcome.errors:
        raise RuntimeError(f"{phase.outcome.errors} check-ins failed")
    rss(f"with {MEMORY_AGENTS} live agents")
    # The rest as fan-outs to roles of 100 agents (each stores 100 messages): the direct sends of the load are the
    # per-message path; these fill the inboxes without another ten minutes of it.
    fanouts = -(-max(MEMORY_MESSAGES - delivered, 0) // (MEMORY_AGENTS // MEMORY_GROUPS))
    roles = [f"mem-{k}" for k in range(MEMORY_GROUPS)]
    jobs = [
        Job(
            "send",
            bases,
            3600,
            senders=ss,
            targets=roles,
            address="role",
            quota=fanouts // WORKERS + (w < fanouts % WORKERS),
        )
        for w, ss in enumerate(split(senders, WORKERS))
    ]
    phase = run_phase(jobs, pids)
    if phase.outcome.errors:
        raise RuntimeError(f"{phase.outcome.errors} fan-outs failed")
    rss(f"after {delivered + phase.outcome.stored} messages")
    print(
        f"  ({delivered} direct messages under load, then {len(phase.outcome.sent)} fan-outs storing "
        f"{phase.outcome.stored} in {phase.wall:.1f} s)"
    )


async def on_postgres(url: str) -> None:
    print("== PostgreSQL, 2 instances")
    with serve(url) as first, serve(url) as second:
        servers = [first, second]
        bases, pids = [s.base for s in servers], [s.pid for s in servers]
        print("  RSS idle                             " + ", ".join(f"{rss_mib(pid):7.1f} MiB" for pid in pids))
        readers = join_agents(bases, "reader", READERS)
        senders = join_agents(bases, "sender", SENDERS)
        base_cpu, base_p99 = baseline(bases, pids)
        phase = load(bases, pids, readers, senders)
        report_load(phase, base_cpu, base_p99)
        if MEMORY_MESSAGES > 0:
            memory(bases, pids, senders, len(set(phase.outcome.received)))


def on_sqlite(url: str) -> None:
    """Memory only: one instance per database file (its wake-ups stay in the process)."""
    print("== SQLite, 1 instance: memory")
    with serve(url) as server:
        print(f"  RSS idle                             {rss_mib(server.pid):7.1f} MiB")
        memory([server.base], [server.pid], join_agents([server.base], "sender", SENDERS), 0)


async def main() -> None:
    started = time.perf_counter()
    pg_admin = os.environ.get("MUSTER_TEST_POSTGRES_URL", "")
    if "@127.0.0.1" in pg_admin or "@localhost" in pg_admin:
        async with fresh_postgres(pg_admin, "muster_load") as url:
            await on_postgres(url)
    else:
        print("== PostgreSQL: skipped (set MUSTER_TEST_POSTGRES_URL to a 127.0.0.1 server)")
    if MEMORY_MESSAGES > 0:
        with tempfile.TemporaryDirectory() as tmp:
            on_sqlite(f"sqlite:///{Path(tmp) / 'load.db'}")
    print(f"== load done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    anyio.run(main)
