"""The app with a [notify] block pointing at a test receiver, its clock in the test's hands."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from muster_api.db.engine import create_engine
from muster_api.runtime import Runtime
from muster_api.settings import NotifySettings, Settings
from muster_mesh import FakeClock
from tests.support.app import serve

AGENTS = {
    "quota": {"kind": "custom", "entrypoint": "tests.runs.agents:broken"},
    "crash": {"kind": "custom", "entrypoint": "tests.notify.agents:crash"},
}
# Fast passes, retries at once (the clock stands still unless a test moves it), a short bound on an attempt.
PACE = {"scan_seconds": 0.05, "coalesce_seconds": 0, "backoff_seconds": 0, "timeout_seconds": 2, "max_attempts": 3}


def notify_config(path: Path, urls: list[str], **block: Any) -> Path:
    path.write_text(json.dumps({"dispatch_agents": AGENTS, "notify": {"urls": urls, **block}}), encoding="utf-8")
    return path


@asynccontextmanager
async def notify_app(
    db_url: str, config: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock | None = None, **pace: Any
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv("MUSTER_WORKSPACES_ROOT", str(config.parent / "workspaces"))
    monkeypatch.setenv("MUSTER_DISPATCH_HOMES", str(config.parent / "homes"))
    settings = Settings(database_url=db_url, config=config, notify=NotifySettings(**{**PACE, **pace}))
    clock = clock or FakeClock(datetime.now(UTC))
    runtime = Runtime(settings=settings, engine=create_engine(settings.database_url), now=clock)
    async with serve(db_url, runtime=runtime) as client:
        yield client


async def join(client: httpx.AsyncClient, agent_id: str, **fields: Any) -> dict[str, str]:
    r = await client.post("/mesh/checkin", json={"agent_id": agent_id, "confirm": True, **fields})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def send(client: httpx.AsyncClient, auth: dict[str, str], to: str, body: str) -> None:
    r = await client.post("/mesh/messages", json={"to": to, "body": body, "confirm": True}, headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["stored"] == 1


async def deliveries(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    r = await client.get("/notify/deliveries")
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["deliveries"]
    return found


async def settled(client: httpx.AsyncClient, count: int, within: float = 60.0) -> list[dict[str, Any]]:
    """The log once ``count`` deliveries are delivered or failed (a bound for a failure, never waited out)."""
    deadline = time.monotonic() + within
    while True:
        found = await deliveries(client)
        done = [d for d in found if d["state"] in ("delivered", "failed")]
        if len(done) >= count:
            return found
        assert time.monotonic() < deadline, f"{count} settled deliveries expected: {found}"
        await anyio.sleep(0.02)


async def ended(client: httpx.AsyncClient, run_id: str, within: float = 60.0) -> dict[str, Any]:
    """The run once it ended (a bound for a failure)."""
    deadline = time.monotonic() + within
    while True:
        run: dict[str, Any] = (await client.get(f"/dispatch/runs/{run_id}")).json()
        if run["status"] not in ("queued", "running"):
            return run
        assert time.monotonic() < deadline, f"run {run_id} did not end: {run}"
        await anyio.sleep(0.02)
