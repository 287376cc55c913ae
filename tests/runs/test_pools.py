"""Pools: an agent with ``serve_tasks`` serves the tasks addressed to its role from every instance: each task is
claimed once (the mesh's atomic claim), run as a dispatch run (prompt = title and body) and done with that run's
text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from muster_api.app import create_app
from muster_api.settings import Settings
from muster_client import MusterClient
from tests.runs.support import dispatch_env, write_config
from tests.runs.test_membership import until
from tests.support.live import live_server

pytestmark = [pytest.mark.anyio]

REVIEWER = {"kind": "custom", "entrypoint": "tests.runs.agents:fast", "serve_tasks": {"role": "reviewer"}}


def done_tasks(url: str) -> list[Any]:
    with MusterClient(url) as rest:
        return list(rest.tasks(state="done").tasks)


@pytest.mark.postgres
async def test_a_pool_across_two_instances_does_each_task_once_with_its_runs_text(
    postgres_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url = postgres_server.create()
    dispatch_env(monkeypatch, tmp_path, workers=2)
    config = write_config(tmp_path / "muster.json", {"reviewer": REVIEWER})
    first, second = (create_app(Settings(database_url=db_url, config=config)) for _ in range(2))
    with live_server(first) as url, live_server(second):
        with MusterClient(url) as poster:
            poster.checkin("poster", confirm=True)
            for number in range(5):
                poster.task_post(f"review {number}", f"the change number {number}", role="reviewer", confirm=True)
        done = await until(lambda: len(found := done_tasks(url)) == 5 and found, "the five tasks done")
        assert sorted(task.result for task in done) == sorted(
            f"done: review {n}\n\nthe change number {n}" for n in range(5)
        )
        assert {task.holder for task in done} == {"reviewer"}
        async with httpx.AsyncClient(base_url=url) as client:
            histories = [(await client.get(f"/mesh/tasks/{task.id}")).json()["history"] for task in done]
            runs = (await client.get("/dispatch/runs", params={"agent": "reviewer"})).json()["runs"]
        for history in histories:
            kinds = [event["kind"] for event in history]
            assert kinds.count("claimed") == 1 and kinds.count("done") == 1, kinds
        assert len(runs) == 5 and {run["status"] for run in runs} == {"completed"}
