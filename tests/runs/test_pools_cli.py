"""Pools of the REAL CLIs against the fake model servers, in quota: a pool serving through a fallback agent moves its
next task to the candidate not in quota (the one in quota is not started again before its reset); a pool of one CLI
stops claiming until the reset its CLI reported."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from muster_client import MusterClient
from tests.dispatch.cli.support import RESET_EPOCH
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes import anthropic
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply
from tests.runs.support import dispatch_app, dispatch_env
from tests.runs.test_cli_runs import claude, codex
from tests.runs.test_membership import until

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


def task_named(url: str, title: str) -> Any:
    with MusterClient(url) as rest:
        return next((task for task in rest.tasks().tasks if task.title == title and task.state == "done"), None)


def post(url: str, title: str) -> None:
    with MusterClient(url) as poster:
        poster.checkin(f"poster-{title}", confirm=True)
        poster.task_post(title, f"review {title}", role="reviewer", confirm=True)


async def run_of(client: httpx.AsyncClient, agent: str, title: str) -> Any:
    runs = (await client.get("/dispatch/runs", params={"agent": agent})).json()["runs"]
    [run] = [run for run in runs if run["prompt"].startswith(f"{title}\n")]
    return run


async def test_a_quota_on_one_candidate_moves_the_pools_next_task_to_the_fallback(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAI,
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH, times=1))  # then Claude would answer
    fake_openai.script.reset(default=Reply(text="Codex reviewed it."))
    agents = {
        "claude": claude(fake_anthropic.url, subscription=True),
        "codex": codex(fake_openai.url),
        "team": {"kind": "fallback", "agents": ["claude", "codex"], "serve_tasks": {"role": "reviewer"}},
    }
    async with dispatch_app(db_url, tmp_path, agents) as client:
        url = str(client.base_url)
        post(url, "first")
        first = await until(lambda: task_named(url, "first"), "the first task done")
        claude_asked = len(fake_anthropic.script.model_requests())
        post(url, "second")
        second = await until(lambda: task_named(url, "second"), "the second task done, the pool not stopped")
        first_run, second_run = await run_of(client, "team", "first"), await run_of(client, "team", "second")
        events = (await client.get(f"/dispatch/runs/{second_run['id']}/events?format=jsonl")).text
    assert (first.result, second.result) == ("Codex reviewed it.", "Codex reviewed it.")
    assert [(a["agent"], a["status"]) for a in first_run["attempts"]] == [("claude", "failed"), ("codex", "completed")]
    assert [(a["agent"], a["status"]) for a in second_run["attempts"]] == [("codex", "completed")], second_run
    assert len(fake_anthropic.script.model_requests()) == claude_asked, (
        "Claude, in quota, was not started for the second task"
    )
    assert "claude skipped: in quota until 2030-01-01T00:00:00" in events


async def test_a_pool_of_one_cli_in_quota_claims_nothing_until_the_reset_it_reported(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    reset_epoch = int(time.time()) + 4
    fake_anthropic.script.reset(anthropic.usage_limited(reset_epoch, times=1), default=Reply(text="Reviewed it."))
    agents = {"reviewer": {**claude(fake_anthropic.url, subscription=True), "serve_tasks": {"role": "reviewer"}}}
    async with dispatch_app(db_url, tmp_path, agents) as client:
        url = str(client.base_url)
        post(url, "first")
        quota_run = await until(lambda: _finished_run(url, "reviewer"), "the first run ended")
        post(url, "second")
        second = await until(lambda: task_named(url, "second"), "the second task done after the reset")
        history = (await client.get(f"/mesh/tasks/{second.id}")).json()["history"]
    assert quota_run["error"]["code"] == "quota", quota_run
    reset = datetime.fromisoformat(quota_run["error"]["details"]["reset_at"])
    [claimed] = [datetime.fromisoformat(event["at"]) for event in history if event["kind"] == "claimed"]
    assert claimed >= reset, "no claim while the agent was in quota"
    assert second.result == "Reviewed it."


def _finished_run(url: str, agent: str) -> Any:
    runs = httpx.get(f"{url}/dispatch/runs", params={"agent": agent}).json()["runs"]
    return next((run for run in runs if run["status"] in ("completed", "failed")), None)
