"""Dispatched agents are members of the mesh: a REAL Codex or Claude Code run of an agent with ``mesh = {…}`` is on the
roster while it runs, talks and claims through ``muster mcp`` (bound to its identity by the worker, the token in a
0600 file of the private home), cannot act as another agent, and leaves the roster and its claims when the run
ends. The fake model servers drive the CLIs' tool calls."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from muster_api.app import create_app
from muster_api.settings import Settings
from muster_client import MusterClient
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, Script, ToolCall
from tests.mcp.proxy import Recording, recording_proxy
from tests.runs.processes import api
from tests.runs.support import dispatch_env, finished, start, write_config
from tests.runs.test_cli_runs import claude, codex
from tests.runs.test_defaults import run_to_end
from tests.support.live import live_server
from tests.support.net import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

IDENTITY = ".config/muster/identity.json"
STRANGER = "someone-else"


@asynccontextmanager
async def member_service(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agents: dict[str, Any], *, key: str | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, str, Recording]]:
    """The service with its workers; the MCP servers of runs reach it through a recording proxy (so that a test can
    see when an MCP server has listed its tools). ``key``: the service's one API key (the client presents it)."""
    dispatch_env(monkeypatch, tmp_path)
    port = free_port()
    async with recording_proxy(f"http://127.0.0.1:{port}") as proxy:
        monkeypatch.setenv("MUSTER_DISPATCH_SERVICE_URL", proxy.base)
        config = write_config(tmp_path / "muster.json", agents)
        keys = [key] if key else []
        app = create_app(Settings(database_url=db_url, config=config, port=port, api_keys=keys))
        headers = {"X-API-Key": key} if key else {}
        with live_server(app, port=port) as url:
            async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
                yield client, url, proxy


async def until(condition: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    with anyio.fail_after(timeout):
        while not (found := await anyio.to_thread.run_sync(condition)):
            await anyio.sleep(0.1)
    assert found, what
    return found


def roster_entry(url: str, agent_id: str) -> Any:
    with MusterClient(url) as rest:
        return next((a for a in rest.agents().agents if a.agent_id == agent_id), None)


def claims_of(url: str, agent_id: str) -> list[Any]:
    with MusterClient(url) as rest:
        return list(rest.claims(agent=agent_id).claims)


def mcp_call(tool: str, call_id: str, arguments: dict[str, Any], *, namespace: str | None) -> ToolCall:
    if namespace is None:  # Claude names an MCP tool mcp__<server>__<tool>
        return ToolCall(name=f"mcp__muster__{tool}", call_id=call_id, arguments=arguments)
    return ToolCall(name=tool, namespace=namespace, call_id=call_id, arguments=arguments)


async def when_listed(proxy: Recording, listed: threading.Event) -> None:
    """Open ``listed`` once the run's MCP server has listed its tools (it asks the service for the A2A tools)."""
    while not any(" /a2a/agents?" in r for r in proxy.requests):
        await anyio.sleep(0.05)
    listed.set()


def plan_member_turn(
    script: Script, person: str, gate: threading.Event, *, namespace: str | None, listed: threading.Event | None = None
) -> None:
    """Send to the person, claim src/**, try to check in as another agent, then end (held until ``gate``). With
    ``listed``, the first answer waits for it: Claude asks the model while its MCP servers still start, and a tool
    called before its server is up is "no such tool" (a loaded machine takes tens of seconds to start one)."""
    send = {"to": person, "body": "hello from the dispatched agent", "confirm": True}
    claim = {"paths": ["src/**"], "reason": "reworking the store", "confirm": True}
    script.plan(
        Reply(text="Greeting.", tool=mcp_call("agent_send", "call_send", send, namespace=namespace), gate=listed),
        Reply(text="Claiming.", tool=mcp_call("claim_paths", "call_claim", claim, namespace=namespace)),
        Reply(
            text="Trying another name.",
            tool=mcp_call("agent_checkin", "call_other", {"agent_id": STRANGER, "confirm": True}, namespace=namespace),
        ),
        Reply(text="Done as a member.", gate=gate),
    )


async def assert_member_run(
    client: httpx.AsyncClient, url: str, tmp_path: Path, script: Script, gate: threading.Event, agent: str
) -> None:
    """While the run lives: on the roster with its status, the message delivered from its agent id, the claim
    listed; the token only in a 0600 file. Once it ends: off the roster, the claim gone."""
    listed = {a["name"]: a for a in (await client.get("/dispatch/agents")).json()["agents"]}
    assert listed[agent]["sandbox"] == "bwrap", "the MCP server reaches the service from inside the sandbox"
    with MusterClient(url) as person:
        person.checkin("person", confirm=True)
        run = await start(client, agent=agent, prompt="Greet the person and claim the store", workspace="shop")
        page = await until(lambda: person.inbox(wait_seconds=1).messages, "the message from the agent")
        assert [(m.sender, m.body) for m in page] == [(agent, "hello from the dispatched agent")]
        [claim] = await until(lambda: claims_of(url, agent), "the agent's claim")
        assert (claim.repo, claim.holder, claim.pattern, claim.exclusive) == ("shop", agent, "src/**", True)
        await until(lambda: len(script.model_requests()) >= 4, "the gated final request")
        # The status follows the run's progress (renewed at most once a second): the CLI now waits for the model.
        entry = await until(
            lambda: (
                (found := roster_entry(url, agent)) is not None and found.status == "waiting for the model" and found
            ),
            "the running status on the roster",
        )
        assert entry.alive and (entry.role, entry.repo) == ("builder", "shop")
        [identity] = list((tmp_path / "homes").glob(f"*/home/{IDENTITY}"))
        assert stat.S_IMODE(identity.stat().st_mode) == 0o600
        token = json.loads(identity.read_text())["token"]
        assert_token_unseen(token)
        gate.set()
        done = await finished(client, run["id"])
        assert done["status"] == "completed" and done["text"] == "Done as a member.", done
    journal = (await client.get(f"/dispatch/runs/{run['id']}/events?format=jsonl")).text
    assert token not in journal and token not in json.dumps(done)
    outputs = json.dumps([r.body for r in script.model_requests()])
    assert f"bound to agent {agent!r}" in outputs and f"cannot act as {STRANGER!r}" in outputs
    assert roster_entry(url, STRANGER) is None
    assert roster_entry(url, agent) is None, "checked out at the run's end"
    assert claims_of(url, agent) == [], "its claims ended with its presence"


def assert_token_unseen(token: str) -> None:
    """No process of this machine shows the token in its command line or its environment."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            seen = Path(f"/proc/{entry}/cmdline").read_bytes() + Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        assert token.encode() not in seen, f"process {entry} shows the token"


async def test_a_codex_run_is_a_member_of_the_mesh(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_openai: FakeOpenAI,
) -> None:
    agents = {"coder": {**codex(fake_openai.url), "mesh": {"repo": "shop"}}}
    async with member_service(db_url, tmp_path, monkeypatch, agents) as (client, url, proxy):
        ready = tmp_path / "mcp-server-listed-its-tools"
        gate, listed = threading.Event(), threading.Event()
        # Codex starts its MCP servers beside the turn and defers their tools behind its tool search: the first step
        # waits (in codex's shell) until our server has listed its tools (it asks the service for the A2A tools).
        fake_openai.script.plan(
            Reply(tool=ToolCall(command=f"while [ ! -e {ready} ]; do sleep 0.1; done", call_id="call_wait")),
            Reply(tool=ToolCall(name="tool_search", call_id="call_search", arguments={"query": "muster mesh"})),
        )
        plan_member_turn(fake_openai.script, "person", gate, namespace="mcp__muster")

        async def signal_when_listed() -> None:
            await when_listed(proxy, listed)
            ready.touch()

        async with anyio.create_task_group() as group:
            group.start_soon(signal_when_listed)
            await assert_member_run(client, url, tmp_path, fake_openai.script, gate, "coder")
            group.cancel_scope.cancel()


async def test_a_claude_run_is_a_member_of_the_mesh(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    agents = {"writer": {**claude(fake_anthropic.url, MCP_TIMEOUT="120000"), "mesh": {"repo": "shop"}}}
    async with member_service(db_url, tmp_path, monkeypatch, agents) as (client, url, proxy):
        gate, listed = threading.Event(), threading.Event()
        plan_member_turn(fake_anthropic.script, "person", gate, namespace=None, listed=listed)
        async with anyio.create_task_group() as group:
            group.start_soon(when_listed, proxy, listed)
            await assert_member_run(client, url, tmp_path, fake_anthropic.script, gate, "writer")
            group.cancel_scope.cancel()


def test_a_member_reaches_the_service_started_as_a_user_starts_it(
    tmp_path: Path, installed_clis: InstalledClis, fake_anthropic: FakeAnthropic
) -> None:
    """`muster serve --port N` in a checkout, no MUSTER_* variable: the run's MCP server finds the service by itself."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "muster.toml").write_text(
        "[dispatch_agents.member]\n"
        'kind = "cli"\nharness = "claude"\nmesh = { repo = "demo" }\n'
        f'variables = {{ ANTHROPIC_BASE_URL = "{fake_anthropic.url}", ANTHROPIC_API_KEY = "sk-ant-test-key" }}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    send = {"to": "person", "body": "hello from a default service", "confirm": True}
    fake_anthropic.script.plan(
        Reply(text="Greeting.", tool=mcp_call("agent_send", "call_send", send, namespace=None)), Reply(text="Sent.")
    )
    with (
        api(env, tmp_path / "serve.log", cwd=checkout) as url,
        MusterClient(url) as person,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        person.checkin("person", confirm=True)
        run = run_to_end(client, agent="member", prompt="greet", workspace="demo")
        assert (run["status"], run["text"]) == ("completed", "Sent."), run
        assert [(m.sender, m.body) for m in person.inbox().messages] == [("member", "hello from a default service")]
