"""Helpers for the mesh's service tests: an app on a database with a fake clock, real server processes, headers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from muster_api.db.engine import create_engine
from muster_api.db.notify import PgNotifier
from muster_api.runtime import Runtime
from muster_api.settings import Settings
from muster_mesh import FakeClock
from tests.support.app import serve
from tests.support.net import READY_WITHIN, free_port

ROOT = Path(__file__).resolve().parents[2]

AGENT_FIELDS = {
    "agent_id",
    "role",
    "repo",
    "caps",
    "status",
    "status_since",
    "status_age_seconds",
    "last_seen_at",
    "heartbeat_age_seconds",
    "expires_at",
    "ttl_seconds",
    "alive",
    "last_activity",
    "state",
}
MESSAGE_FIELDS = {"seq", "message_id", "from", "body", "thread_id", "sent_at"}


@asynccontextmanager
async def mesh_app(db_url: str, clock: FakeClock | None = None, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = Settings(database_url=db_url, **settings)
    runtime = Runtime(settings=config, engine=create_engine(config.database_url), now=clock or FakeClock())
    async with serve(db_url, runtime=runtime) as client:
        yield client


def pg_notifier(client: httpx.AsyncClient) -> PgNotifier:
    """The mesh's notifier of an app on PostgreSQL served by ``mesh_app``."""
    value = client._transport.app.state.mesh.notifier  # type: ignore[attr-defined]
    assert isinstance(value, PgNotifier)
    return value


async def long_poll_during(
    waiter: httpx.AsyncClient, token: str, action: Callable[[], Awaitable[None]], *, after: int | None = None
) -> httpx.Response:
    """The answer of a 30 s long-poll on ``waiter`` (from ``after``, else from the read cursor) that is waiting when
    ``action`` runs. Well inside the poll's wait: the answer must come from a wake-up, not from the poll's end."""
    answers: list[httpx.Response] = []
    params = {"wait_seconds": 30} if after is None else {"after": after, "wait_seconds": 30}

    async def poll() -> None:
        answers.append(await waiter.get("/mesh/inbox", params=params, headers=auth(token)))

    with anyio.fail_after(25):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            while pg_notifier(waiter).waiting == 0:
                await anyio.sleep(0.01)
            await action()
    return answers[0]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def join(client: httpx.AsyncClient, agent_id: str, **fields: Any) -> str:
    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True, **fields})
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    assert isinstance(token, str)
    return token


@dataclass
class ServerProcess:
    """A ``muster`` API server in its own process on a free loopback port."""

    db_url: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash or a power cut of the process."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@contextmanager
def server_process(db_url: str, *, ready_within: float = READY_WITHIN, **env: str) -> Iterator[ServerProcess]:
    port = free_port()
    environ = {
        **os.environ,
        "MUSTER_DATABASE_URL": db_url,
        "MUSTER_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    argv = [sys.executable, "-m", "uvicorn", "muster_api.app:app_from_env", "--factory"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    # uvicorn closes a keep-alive connection after 5 s idle; a client reusing it at that instant reads a reset
    # (httpx.ReadError) on a loaded machine. Tests keep their pools for their whole run, so idle ones stay open.
    argv += ["--timeout-keep-alive", "300"]
    process = subprocess.Popen(argv, env=environ, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = ServerProcess(db_url, port, process)
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise RuntimeError(f"server exited with {process.returncode}: {err[-2000:]}")
            try:
                if httpx.get(f"{server.base_url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                process.kill()
                _, err = process.communicate()
                raise TimeoutError(
                    f"server not ready within {ready_within:.0f} s: {err.decode(errors='replace')[-2000:]}"
                )
            time.sleep(0.05)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
