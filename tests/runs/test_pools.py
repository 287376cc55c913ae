"""Pools: an agent with ``serve_tasks`` serves the tasks addressed to its role from every instance: each task is
claimed once (the mesh's atomic claim), run as a dispatch run (prompt = title and body) and done with that run's
text."""

from __future__ import annotations

from datetime import datetime
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


async def test_a_pool_in_quota_claims_nothing_until_the_reset(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    agent = {**REVIEWER, "entrypoint": "tests.runs.agents:quota_on_demand"}
    config = write_config(tmp_path / "muster.json", {"reviewer": agent})
    with live_server(create_app(Settings(database_url=db_url, config=config))) as url:
        with MusterClient(url) as poster:
            poster.checkin("poster", confirm=True)
            poster.task_post("first", "hit the quota", role="reviewer", confirm=True)
            poster.task_post("second", "an ordinary review", role="reviewer", confirm=True)
        [second] = await until(lambda: done_tasks(url), "the second task done")
        assert second.result == "done: second\n\nan ordinary review"
        async with httpx.AsyncClient(base_url=url) as client:
            tasks = (await client.get("/mesh/tasks")).json()["tasks"]
            [first] = [task for task in tasks if task["title"] == "first"]
            runs = (await client.get("/dispatch/runs", params={"agent": "reviewer"})).json()["runs"]
            history = (await client.get(f"/mesh/tasks/{second.id}")).json()["history"]
        assert first["state"] == "failed" and "quota" in first["reason"], first
        [quota_run] = [run for run in runs if run["error"] and run["error"]["code"] == "quota"]
        reset = datetime.fromisoformat(quota_run["error"]["details"]["reset_at"])
        [claimed] = [datetime.fromisoformat(event["at"]) for event in history if event["kind"] == "claimed"]
        assert claimed >= reset, "no claim while the agent was in quota"
