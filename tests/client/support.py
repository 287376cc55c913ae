"""A live Muster service for client-side tests: a real server process on loopback, with an API key, custom dispatch
agents and, when given, remote A2A agents in its config file."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio

from tests.mesh.support import ServerProcess, server_process

API_KEY = "client-test-key"


CUSTOM_AGENTS: dict[str, dict[str, object]] = {
    "fast": {"kind": "custom", "entrypoint": "tests.runs.agents:fast"},
    "broken": {"kind": "custom", "entrypoint": "tests.runs.agents:broken"},
}
"""Dispatch agents of every live service here: custom agents from the run tests (no CLI involved)."""


def write_config(path: Path, agents: dict[str, dict[str, object]]) -> Path:
    """The ``agents`` block (remote A2A agents) and the ``dispatch_agents`` block as a JSON config file."""
    path.write_text(json.dumps({"agents": agents, "dispatch_agents": CUSTOM_AGENTS}), encoding="utf-8")
    return path


@contextmanager
def live_service(
    db_url: str, tmp_path: Path, *, agents: dict[str, dict[str, object]] | None = None, **env: str
) -> Iterator[ServerProcess]:
    config = write_config(tmp_path / "muster.json", agents or {})
    keys = json.dumps([API_KEY])
    env = {
        "MUSTER_WORKSPACES_ROOT": str(tmp_path / "workspaces"),
        "MUSTER_DISPATCH_HOMES": str(tmp_path / "homes"),
        **env,
    }
    # Generous: importing the service takes seconds of CPU, and the machine running the tests may be busy.
    with server_process(db_url, MUSTER_CONFIG=str(config), MUSTER_API_KEYS=keys, **env) as server:
        yield server


@asynccontextmanager
async def live_service_in_thread(
    db_url: str, tmp_path: Path, *, agents: dict[str, dict[str, object]] | None = None, **env: str
) -> AsyncIterator[ServerProcess]:
    """``live_service`` started and stopped off the event loop: the loop stays free to run what the service calls
    back at start-up (an a2a-sdk peer in this process, whose card it fetches)."""
    manager = live_service(db_url, tmp_path, agents=agents, **env)
    server = await anyio.to_thread.run_sync(manager.__enter__)
    try:
        yield server
    finally:
        await anyio.to_thread.run_sync(manager.__exit__, None, None, None)
