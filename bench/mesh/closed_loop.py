"""A closed-loop load generator in several processes: each client sends its request again as soon as it is answered,
for a fixed window, and the rate is what all of them got through together.

One Python process running sixteen httpx clients spends more CPU per request than the Muster server spends answering
a check-in renewal: a figure measured from one such process is the client's speed, not the server's. Spread over
several processes (each its own event loop and connections), the clients keep the server busy, as real agents on
other machines would.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier

import anyio
import httpx

PROCESSES = 4
FAILED = -1


async def join(client: httpx.AsyncClient, agent_id: str) -> dict[str, str]:
    """Check ``agent_id`` in for a day; the headers its calls present."""
    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True, "ttl_seconds": 86400})
    r.raise_for_status()
    return {"Authorization": f"Bearer {r.json()['token']}"}


@dataclass(frozen=True)
class Call:
    """One client's request: a POST of ``body`` to ``path`` with ``headers``."""

    path: str
    body: dict[str, object]
    headers: dict[str, str]


async def _run(base: str, calls: list[Call], seconds: float, barrier: Barrier) -> int:
    limits = httpx.Limits(max_connections=len(calls), max_keepalive_connections=len(calls))
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:

        async def once(call: Call) -> None:
            (await client.post(call.path, json=call.body, headers=call.headers)).raise_for_status()

        async with anyio.create_task_group() as tg:  # one connection per client, opened before the window
            for call in calls:
                tg.start_soon(once, call)
        await anyio.to_thread.run_sync(barrier.wait)
        done = 0
        deadline = time.perf_counter() + seconds

        async def loop(call: Call) -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await once(call)
                done += 1

        async with anyio.create_task_group() as tg:
            for call in calls:
                tg.start_soon(loop, call)
        return done


def _process(base: str, calls: list[Call], seconds: float, barrier: Barrier, out: mp.SimpleQueue[int]) -> None:
    try:
        out.put(anyio.run(_run, base, calls, seconds, barrier))
    except BaseException:
        out.put(FAILED)  # the parent waits for every process's count: it must not wait for this one forever
        raise


def rate(base: str, calls: list[Call], seconds: float, processes: int = PROCESSES) -> float:
    """Requests per second of ``calls`` (one client each) repeated for ``seconds``, the clients spread over
    ``processes`` processes that start their window together."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    out: mp.SimpleQueue[int] = ctx.SimpleQueue()
    workers = [
        ctx.Process(target=_process, args=(base, calls[i::processes], seconds, barrier, out)) for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        barrier.wait(timeout=120)
        started = time.perf_counter()
        counts = [out.get() for _ in workers]
        if FAILED in counts:
            raise RuntimeError("a load generator process failed (its traceback is above)")
        done = sum(counts)
        return done / max(time.perf_counter() - started, seconds)
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
