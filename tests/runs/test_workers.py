"""Two ``muster worker`` processes and one API process (no workers of its own) on one database: a PostgreSQL, or one
SQLite file the three processes share (its write lock serialises the claims)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.runs.processes import api, process_env, worker
from tests.runs.support import write_config

# Slow: `muster worker` processes.
pytestmark = pytest.mark.slow

AGENTS = {
    "mark": {"kind": "custom", "entrypoint": "tests.runs.agents:mark"},
    "hold": {"kind": "custom", "entrypoint": "tests.runs.agents:hold"},
}


def until_finished(client: httpx.Client, run_id: str) -> dict[str, Any]:
    """Follow the run's SSE stream to its ``result`` event; the run as GET answers it then."""
    with client.stream("GET", f"/dispatch/runs/{run_id}/events", timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line == "event: result":
                break
    run: dict[str, Any] = client.get(f"/dispatch/runs/{run_id}").json()
    return run


def until_event(client: httpx.Client, run_id: str, text: str) -> None:
    with client.stream("GET", f"/dispatch/runs/{run_id}/events", timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and f'"text": "{text}"' in line:
                return
    raise AssertionError(f"run {run_id} ended without an event saying {text!r}")


def test_forty_runs_each_executed_once_and_a_killed_worker_interrupts_only_its_run(db_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path / "muster.json", AGENTS)
    # Long enough that a live worker waiting for SQLite's write lock on a loaded machine keeps its runs (a 2 s lease
    # lapsed there, and a live run was interrupted); short enough that the killed worker's run is taken soon.
    lease = {"MUSTER_DISPATCH_LEASE_SECONDS": "6"}
    env_api = process_env(db_url, config, tmp_path, "api", MUSTER_DISPATCH_WORKERS="0", **lease)
    env_one = process_env(db_url, config, tmp_path, "one", MUSTER_DISPATCH_WORKERS="2", **lease)
    env_two = process_env(db_url, config, tmp_path, "two", MUSTER_DISPATCH_WORKERS="2", **lease)
    with (
        api(env_api, tmp_path / "api.log") as url,
        worker(env_one, tmp_path / "one.log") as one,
        worker(env_two, tmp_path / "two.log") as two,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        ids = []
        for index in range(40):
            response = client.post("/dispatch/runs", json={"agent": "mark", "prompt": "x", "workspace": f"m{index}"})
            assert response.status_code == 202, response.text
            ids.append(response.json()["id"])
        runs = [until_finished(client, run_id) for run_id in ids]
        assert [r["status"] for r in runs] == ["completed"] * 40
        root = tmp_path / "workspaces"
        executions = [(root / f"m{i}" / "executions").read_text().split() for i in range(40)]
        assert all(len(lines) == 1 for lines in executions), executions
        pids = {lines[0] for lines in executions}
        assert pids <= {str(one.pid), str(two.pid)}
        assert all(r["text"] == lines[0] for r, lines in zip(runs, executions, strict=True))
        assert {r["worker"].split(":")[1] for r in runs} == pids

        held = client.post("/dispatch/runs", json={"agent": "hold", "prompt": "gate", "workspace": "held"}).json()
        until_event(client, held["id"], "started")
        running = client.get(f"/dispatch/runs/{held['id']}").json()
        assert running["status"] == "running"
        victim, survivor = (one, two) if running["worker"].split(":")[1] == str(one.pid) else (two, one)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        interrupted = until_finished(client, held["id"])
        assert interrupted["status"] == "interrupted"
        assert interrupted["error"]["code"] == "interrupted"
        journal = client.get(f"/dispatch/runs/{held['id']}/events?format=jsonl").text.splitlines()
        assert any('"text": "started"' in line for line in journal), "the events up to the kill are kept"

        after = [
            client.post("/dispatch/runs", json={"agent": "mark", "prompt": "x", "workspace": f"after{i}"}).json()
            for i in range(4)
        ]
        finished = [until_finished(client, run["id"]) for run in after]
        assert [r["status"] for r in finished] == ["completed"] * 4
        assert {r["worker"].split(":")[1] for r in finished} == {str(survivor.pid)}
