"""Runs of the REAL Claude Code and Codex CLIs through the API, against the fake model servers of tests/dispatch."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.dispatch.cli.support import (
    CODEX_KEY_VAR,
    RESET_EPOCH,
    assistant_texts,
    new_marker,
    processes_with,
    user_texts,
)
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes import anthropic, openai
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import MODEL as CODEX_MODEL
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply
from tests.runs.processes import process_env, worker
from tests.runs.support import dispatch_app, dispatch_env, finished, read_sse, start, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


def claude(url: str, *, subscription: bool = False, **extra: str) -> dict[str, Any]:
    variables = {"ANTHROPIC_BASE_URL": url, "CLAUDE_CODE_MAX_RETRIES": "2", **extra}
    if subscription:
        variables["CLAUDE_CODE_OAUTH_TOKEN"] = "sk-ant-oat01-test-token"
    else:
        variables["ANTHROPIC_API_KEY"] = "sk-ant-test-key"
    return {"kind": "cli", "harness": "claude", "variables": variables}


def codex(url: str) -> dict[str, Any]:
    variables = {
        "MUSTER_CODEX_BASE_URL": f"{url}/v1",
        "MUSTER_CODEX_ENV_KEY": CODEX_KEY_VAR,
        CODEX_KEY_VAR: "sk-test-key",
        "MUSTER_CODEX_MAX_RETRIES": "1",
        "MUSTER_CODEX_SANDBOX": "danger-full-access",
    }
    return {"kind": "cli", "harness": "codex", "model": CODEX_MODEL, "variables": variables}


async def test_claude_run_live_then_jsonl_then_replay_without_a_model_request(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    fake_anthropic.script.plan(Reply(text="Hello from Claude."))
    async with dispatch_app(db_url, tmp_path, {"claude": claude(fake_anthropic.url)}) as client:
        listed = (await client.get("/dispatch/agents")).json()["agents"]
        assert listed[0]["installed"] is True and listed[0]["version"] == "2.1.328"
        run = await start(client, agent="claude", prompt="Say hello", workspace="w")
        stream = await read_sse(client, run["id"])
        types = [e["event"] for e in stream.events]
        assert "conversation" in types and "text" in types and "finished" in types
        done = (await client.get(f"/dispatch/runs/{run['id']}")).json()
        assert done["status"] == "completed" and done["text"] == "Hello from Claude."
        assert done["conversation"] and done["usage"]["output"] == 30 and done["selected"] == "claude"
        jsonl = (await client.get(f"/dispatch/runs/{run['id']}/events?format=jsonl")).text.splitlines()
        assert [json.loads(line)["seq"] for line in jsonl] == [e["id"] for e in stream.events], (jsonl, types)
        asked = len(fake_anthropic.script.model_requests())
        replay = await finished(client, (await start(client, replay_of=run["id"]))["id"])
        assert replay["status"] == "completed" and replay["text"] == "Hello from Claude."
        assert len(fake_anthropic.script.model_requests()) == asked, "a replay makes no model request"


async def test_quota_is_a_failed_run_with_reset_at(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH))
    async with dispatch_app(db_url, tmp_path, {"claude": claude(fake_anthropic.url, subscription=True)}) as client:
        run = await finished(client, (await start(client, agent="claude", prompt="Work", workspace="w"))["id"])
    assert run["status"] == "failed", run
    assert run["error"]["code"] == "quota"
    assert run["error"]["details"]["reset_at"].startswith("2030-01-01T00:00:00")


async def test_fallback_completes_through_the_second_candidate(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAI,
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH))
    fake_openai.script.plan(Reply(text="Codex finished the job."))
    agents = {
        "claude": claude(fake_anthropic.url, subscription=True),
        "codex": codex(fake_openai.url),
        "team": {"kind": "fallback", "agents": ["claude", "codex"]},
    }
    async with dispatch_app(db_url, tmp_path, agents) as client:
        run = await finished(client, (await start(client, agent="team", prompt="Do the job", workspace="w"))["id"])
        types = [e["event"] for e in (await read_sse(client, run["id"])).events]
    assert run["status"] == "completed" and run["text"] == "Codex finished the job."
    assert run["selected"] == "codex"
    assert [(a["agent"], a["status"]) for a in run["attempts"]] == [("claude", "failed"), ("codex", "completed")]
    assert run["attempts"][0]["error"]["code"] == "quota"
    assert "fallback" in types


def opencode(url: str) -> dict[str, Any]:
    variables = {
        "MUSTER_OPENCODE_BASE_URL": f"{url}/v1",
        "MUSTER_OPENCODE_MODEL": CODEX_MODEL,
        "MUSTER_OPENCODE_ENV_KEY": CODEX_KEY_VAR,
        CODEX_KEY_VAR: "sk-opencode-key",
    }
    return {"kind": "cli", "harness": "opencode", "variables": variables}


async def test_fallback_crosses_vendors_from_codex_to_opencode(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    opencode_cli: Path,
    fake_openai: FakeOpenAI,
) -> None:
    """Each candidate has its own model server: what Codex asks of its server cannot use up OpenCode's plan."""
    dispatch_env(monkeypatch, tmp_path)
    fake_openai.script.plan(openai.insufficient_quota(None))
    with FakeOpenAI().running() as other:
        other.script.plan(Reply(text="OpenCode finished the job."))
        agents = {
            "codex": codex(fake_openai.url),
            "opencode": opencode(other.url),
            "team": {"kind": "fallback", "agents": ["codex", "opencode"]},
        }
        async with dispatch_app(db_url, tmp_path, agents) as client:
            started = await start(client, agent="team", prompt="Do the job", workspace="w")
            run = await finished(client, started["id"])
            types = [e["event"] for e in (await read_sse(client, run["id"])).events]
        opencode_asked = other.script.model_requests()
    assert run["status"] == "completed" and run["text"] == "OpenCode finished the job.", run
    assert run["selected"] == "opencode"
    assert [(a["agent"], a["status"]) for a in run["attempts"]] == [("codex", "failed"), ("opencode", "completed")]
    assert run["attempts"][0]["error"]["code"] == "quota"
    assert "fallback" in types
    assert fake_openai.script.model_requests() and [r.answered for r in opencode_asked] == ["reply"]
    assert "Do the job" in " ".join(user_texts(opencode_asked[0]))


async def test_fallback_crosses_vendors_from_claude_to_copilot(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    copilot_cli: Path,
    fake_anthropic: FakeAnthropic,
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH))
    with FakeAnthropic().running() as other:
        other.script.plan(Reply(text="Copilot finished the job."))
        copilot = {
            "kind": "cli",
            "harness": "copilot",
            "variables": {
                "COPILOT_PROVIDER_TYPE": "anthropic",
                "COPILOT_PROVIDER_BASE_URL": other.url,
                "COPILOT_PROVIDER_API_KEY": "sk-copilot-key",
                "COPILOT_MODEL": "claude-sonnet-4-5",
            },
        }
        agents = {
            "claude": claude(fake_anthropic.url, subscription=True),
            "copilot": copilot,
            "team": {"kind": "fallback", "agents": ["claude", "copilot"]},
        }
        async with dispatch_app(db_url, tmp_path, agents) as client:
            run = await finished(client, (await start(client, agent="team", prompt="Do the job", workspace="w"))["id"])
        copilot_asked = other.script.model_requests()
    assert run["status"] == "completed" and run["text"] == "Copilot finished the job.", run
    assert [(a["agent"], a["status"]) for a in run["attempts"]] == [("claude", "failed"), ("copilot", "completed")]
    assert run["attempts"][0]["error"]["code"] == "quota"
    assert run["conversation"] and len(copilot_asked) == 1
    assert "Do the job" in " ".join(user_texts(copilot_asked[0]))


async def test_cancel_and_deadline_leave_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed_clis: InstalledClis, fake_anthropic: FakeAnthropic
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    marker = new_marker()
    gate = threading.Event()
    fake_anthropic.script.plan(Reply(text="late", gate=gate), Reply(text="late", gate=gate))
    agents = {"claude": claude(fake_anthropic.url, **marker)}
    try:
        async with dispatch_app(f"sqlite:///{tmp_path / 'm.db'}", tmp_path, agents) as client:
            run = await start(client, agent="claude", prompt="Take long", workspace="c")
            await _until(client, run["id"], "conversation")
            assert processes_with(marker), "the CLI runs"
            assert (await client.post(f"/dispatch/runs/{run['id']}/cancel")).status_code == 202
            cancelled = await finished(client, run["id"])
            assert cancelled["status"] == "cancelled" and cancelled["error"]["code"] == "aborted"
            assert processes_with(marker) == []
            run = await start(client, agent="claude", prompt="Take long", workspace="d", deadline_s=3)
            timed_out = await finished(client, run["id"])
            assert timed_out["status"] == "failed" and timed_out["error"]["code"] == "timeout"
            assert processes_with(marker) == []
    finally:
        gate.set()


async def _until(client: httpx.AsyncClient, run_id: str, kind: str) -> int:
    """Read the run's stream until an event of ``kind``; its id."""
    seen = 0
    while True:
        stream = await read_sse(client, run_id, last_event_id=seen, stop_after=1)
        event = stream.events[0]
        seen = event["id"]
        if event["event"] == kind:
            return seen


async def test_steer_a_running_claude_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed_clis: InstalledClis, fake_anthropic: FakeAnthropic
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    gate = threading.Event()
    fake_anthropic.script.plan(Reply(text="Hello.", gate=gate), Reply(text="Goodbye then."))
    try:
        agents = {"claude": claude(fake_anthropic.url)}
        async with dispatch_app(f"sqlite:///{tmp_path / 'm.db'}", tmp_path, agents) as client:
            run = await start(client, agent="claude", prompt="Say hello", workspace="s")
            seen = await _until(client, run["id"], "conversation")
            # Steered only once the CLI asked for the held answer: steered before that, the resumed turn would take
            # the first planned answer itself.
            with anyio.fail_after(60):
                while not fake_anthropic.script.model_requests():
                    await anyio.sleep(0.05)
            response = await client.post(f"/dispatch/runs/{run['id']}/steer", json={"text": "Actually, say goodbye"})
            assert response.status_code == 202
            stream = await read_sse(client, run["id"], last_event_id=seen, stop_after=1)
            while stream.events[-1]["event"] not in ("stopped", "turn.result"):
                stream = await read_sse(client, run["id"], last_event_id=stream.events[-1]["id"], stop_after=1)
            gate.set()
            done = await finished(client, run["id"])
    finally:
        gate.set()
    assert done["status"] == "completed" and done["text"] == "Goodbye then."
    assert any("Actually, say goodbye" in " ".join(user_texts(r)) for r in fake_anthropic.script.model_requests())


async def test_steer_a_running_codex_turn_through_live_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed_clis: InstalledClis, fake_openai: FakeOpenAI
) -> None:
    """With ``live_input`` codex runs as ``app-server``: the steering posted to the API joins the running turn through
    its stdin (nothing is stopped, the thread is the same), and the answer is to the steering."""
    dispatch_env(monkeypatch, tmp_path)
    gate = threading.Event()
    fake_openai.script.plan(Reply(text="Hello first.", gate=gate), Reply(text="Goodbye then."))
    try:
        async with dispatch_app(
            f"sqlite:///{tmp_path / 'm.db'}", tmp_path, {"codex": codex(fake_openai.url)}
        ) as client:
            run = await start(client, agent="codex", prompt="Say hello", workspace="s", live_input=True)
            await _until(client, run["id"], "conversation")
            with anyio.fail_after(60):  # the first answer is held by the fake: the turn is running
                while not fake_openai.script.model_requests():
                    await anyio.sleep(0.05)
            response = await client.post(f"/dispatch/runs/{run['id']}/steer", json={"text": "Actually, say goodbye"})
            assert response.status_code == 202
            await _until(client, run["id"], "turn.steer")  # the worker handed it to the running CLI
            gate.set()
            done = await finished(client, run["id"])
            types = [e["event"] for e in (await read_sse(client, run["id"])).events]
    finally:
        gate.set()
    requests = fake_openai.script.model_requests()
    assert done["status"] == "completed" and done["text"] == "Goodbye then.", (done, types)
    assert "stopped" not in types, types  # live: the CLI was not stopped and resumed
    texts = user_texts(requests[-1])
    assert "Say hello" in texts and "Actually, say goodbye" in texts


@pytest.mark.postgres
async def test_resume_and_fork_on_another_worker_process(
    postgres_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    """The first turn runs in this process; its continuation and fork run in a `muster worker` process with a home
    of its own: the conversation comes from the database."""
    db_url = postgres_server.create()
    agents = {"claude": claude(fake_anthropic.url)}
    fake_anthropic.script.plan(Reply(text="I will remember 42."), Reply(text="It was 42."), Reply(text="Forked: 42."))
    dispatch_env(monkeypatch, tmp_path, workers=1)
    async with dispatch_app(db_url, tmp_path, agents) as client:
        first = await finished(client, (await start(client, agent="claude", prompt="Remember 42", workspace="r"))["id"])
    assert first["status"] == "completed" and first["conversation"]
    env = process_env(db_url, write_config(tmp_path / "worker.json", agents), tmp_path, "other")
    dispatch_env(monkeypatch, tmp_path, workers=0)
    with worker(env, tmp_path / "worker.log") as other:
        async with dispatch_app(db_url, tmp_path, agents) as client:
            body = {"agent": "claude", "workspace": "r", "continuation": {"run_id": first["id"]}}
            resumed = await finished(client, (await start(client, **body, prompt="Which number?"))["id"])
            body["continuation"] = {"run_id": first["id"], "fork": True}
            forked = await finished(client, (await start(client, **body, prompt="And in a fork?"))["id"])
    assert resumed["status"] == "completed" and resumed["text"] == "It was 42.", resumed
    assert resumed["worker"].split(":")[1] == str(other.pid)
    assert resumed["conversation"] == first["conversation"]
    assert forked["status"] == "completed" and forked["conversation"] not in (None, first["conversation"])
    second, third = fake_anthropic.script.model_requests()[-2:]
    assert "I will remember 42." in assistant_texts(second), "the resumed turn carries the first turn's history"
    assert "I will remember 42." in assistant_texts(third)
