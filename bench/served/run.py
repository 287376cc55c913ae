"""A2A SendMessage round trip to a served echo agent through Muster (a dispatch run per message: queued, claimed by an
embedded worker, journal stored, task read back) vs a bare a2a-sdk server answering the same message directly.

Both servers run under uvicorn in this process on loopback; one a2a-sdk JSON-RPC client each (blocking SendMessage,
kept-alive connections), interleaved call by call so that drift hits both equally. Printed: the median and p90 round
trip of each side and the ratio Muster/bare (goal: median <= 2x). Muster's database: a fresh SQLite file, or
MUSTER_BENCH_DATABASE_URL.

Run: .venv/bin/python bench/served/run.py  (about 20 s; traffic only to 127.0.0.1)
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
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from a2a.client import Client, ClientConfig, ClientFactory  # noqa: E402
from a2a.client.card_resolver import parse_agent_card  # noqa: E402
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState  # noqa: E402
from tests.a2a.peers import a2a_peer, free_socket  # noqa: E402
from tests.served.support import write_config  # noqa: E402

from muster_api.app import create_app  # noqa: E402
from muster_api.settings import Settings  # noqa: E402

CALLS = 200
WARMUP = 10


@asynccontextmanager
async def muster(database_url: str, root: Path) -> AsyncIterator[str]:
    """The whole Muster app (lifespan, embedded workers) under uvicorn on a loopback port."""
    os.environ["MUSTER_WORKSPACES_ROOT"] = str(root / "workspaces")
    os.environ["MUSTER_DISPATCH_HOMES"] = str(root / "homes")
    settings = Settings(database_url=database_url, config=write_config(root / "muster.toml"), log_level="WARNING")
    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def client_for(http: httpx.AsyncClient, card_url: str) -> Client:
    card = parse_agent_card((await http.get(card_url)).json())
    return ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)


async def send(client: Client, text: str) -> str:
    request = SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    )
    async for event in client.send_message(request):
        task = event.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task.status
        return "".join(p.text for a in task.artifacts for p in a.parts)
    raise AssertionError("no answer")


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


async def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        database_url = os.environ.get("MUSTER_BENCH_DATABASE_URL") or f"sqlite:///{root / 'muster.db'}"
        async with (
            a2a_peer("Bare echo") as peer,
            muster(database_url, root) as base,
            httpx.AsyncClient(timeout=30) as bare_http,
            httpx.AsyncClient(timeout=30) as muster_http,
        ):
            bare = await client_for(bare_http, peer.card_url)
            served = await client_for(muster_http, f"{base}/a2a/serve/echo/.well-known/agent-card.json")
            kind = database_url.split(":", 1)[0]
            print(f"served bench: blocking SendMessage (JSON-RPC 1.0), {CALLS} calls per side, Muster on {kind}")
            for i in range(WARMUP):
                await send(bare, f"warm {i}")
                await send(served, f"warm {i}")
            bare_ms: list[float] = []
            muster_ms: list[float] = []
            for i in range(CALLS):
                text = f"hello {i}"
                t0 = time.perf_counter()
                assert await send(bare, text) == text
                t1 = time.perf_counter()
                assert await send(served, text) == f"echo: {text}"
                t2 = time.perf_counter()
                bare_ms.append((t1 - t0) * 1000)
                muster_ms.append((t2 - t1) * 1000)
    b, m = statistics.median(bare_ms), statistics.median(muster_ms)
    print(f"  bare a2a-sdk server        median {b:7.2f} ms  p90 {p90(bare_ms):7.2f} ms")
    print(f"  Muster served agent (run)  median {m:7.2f} ms  p90 {p90(muster_ms):7.2f} ms")
    verdict = "meets" if m <= 2 * b else "MISSES"
    print(
        f"  ratio Muster/bare: median {m / b:5.2f}x ({verdict} goal <= 2x)  p90 {p90(muster_ms) / p90(bare_ms):5.2f}x"
    )
    print(f"  {time.monotonic() - started:.1f} s total")


def run() -> Any:
    return asyncio.run(main())


if __name__ == "__main__":
    run()
