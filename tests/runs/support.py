"""Helpers of the run tests: a config file of dispatch agents, the app with its workers, SSE read to its end."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from muster_api.app import create_app
from muster_api.settings import Settings
from tests.support.live import live_server

AGENTS: dict[str, Any] = {
    "fast": {"kind": "custom", "entrypoint": "tests.runs.agents:fast"},
    "hold": {"kind": "custom", "entrypoint": "tests.runs.agents:hold"},
    "broken": {"kind": "custom", "entrypoint": "tests.runs.agents:broken"},
    "mark": {"kind": "custom", "entrypoint": "tests.runs.agents:mark"},
}


def write_config(path: Path, agents: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps({"dispatch_agents": dict(agents)}), encoding="utf-8")
    return path


def dispatch_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, workers: int = 1, lease: float = 30) -> Path:
    """Workspaces and homes under ``tmp_path``; returns the workspaces root."""
    root = tmp_path / "workspaces"
    monkeypatch.setenv("MUSTER_WORKSPACES_ROOT", str(root))
    monkeypatch.setenv("MUSTER_DISPATCH_HOMES", str(tmp_path / "homes"))
    monkeypatch.setenv("MUSTER_DISPATCH_WORKERS", str(workers))
    monkeypatch.setenv("MUSTER_DISPATCH_LEASE_SECONDS", str(lease))
    return root


@asynccontextmanager
async def dispatch_app(
    db_url: str, tmp_path: Path, agents: Mapping[str, Any] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The app over real loopback HTTP (httpx's ASGI transport would buffer an SSE stream until it ends)."""
    config = write_config(tmp_path / "muster.json", AGENTS if agents is None else agents)
    app = create_app(Settings(database_url=db_url, config=config))
    with live_server(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            yield client


@dataclass
class Stream:
    events: list[dict[str, Any]] = field(default_factory=list)  # {id, event (its type), data}
    result: dict[str, Any] | None = None


def parse_sse(lines: list[str]) -> Stream:
    stream = Stream()
    current: dict[str, Any] = {}
    for line in lines:
        if not line:
            if "data" in current:
                data = json.loads(current["data"])
                if current.get("event") == "result":
                    stream.result = data
                else:
                    assert "event" not in current, "journal rows are unnamed messages"
                    stream.events.append({"id": int(current["id"]), "event": data["event"]["type"], "data": data})
            current = {}
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        current[key] = value.removeprefix(" ")
    return stream


async def read_sse(
    client: httpx.AsyncClient, run_id: str, *, last_event_id: int | None = None, stop_after: int | None = None
) -> Stream:
    """The run's SSE stream until its ``result`` event (or ``stop_after`` events, then the connection is dropped)."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    lines: list[str] = []
    async with client.stream("GET", f"/dispatch/runs/{run_id}/events", headers=headers, timeout=60) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        count = 0
        async for line in response.aiter_lines():
            lines.append(line)
            if line.startswith("id: "):
                count += 1
            if stop_after is not None and count >= stop_after and line == "":
                break
    return parse_sse(lines)


async def start(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/dispatch/runs", json=body)
    assert response.status_code == 202, response.text
    run: dict[str, Any] = response.json()
    assert response.headers["location"] == f"/dispatch/runs/{run['id']}"
    return run


async def finished(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run once it is over (its SSE stream read to the end), as GET answers it."""
    stream = await read_sse(client, run_id)
    assert stream.result is not None
    response = await client.get(f"/dispatch/runs/{run_id}")
    assert response.status_code == 200
    run: dict[str, Any] = response.json()
    assert stream.result == run, "the stream ends with the run as stored"
    return run
