"""Real MCP hosts: the pinned Claude Code and Codex CLIs, configured with ``muster mcp`` as an MCP server, driven by
the fake model servers scripted to call agent_checkin and then agent_send. The service shows the check-in and the
message: the CLI really called our tools over stdio."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from muster_client import MusterClient
from tests.client.support import API_KEY
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import MODEL as CODEX_MODEL
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.mcp.proxy import recording_proxy
from tests.mcp.support import MUSTER, mcp_env
from tests.mesh.support import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

CLAUDE_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "MCP_TIMEOUT": "120000",
}


def checkin_args(agent_id: str) -> dict[str, object]:
    return {"agent_id": agent_id, "role": "builder", "status": "driven by a fake model", "confirm": True}


def assert_seen(service: ServerProcess, agent_id: str, reviewer: MusterClient, body: str) -> None:
    with MusterClient(service.base_url, api_key=API_KEY) as rest:
        [entry] = [a for a in rest.agents().agents if a.agent_id == agent_id]
        assert (entry.role, entry.status) == ("builder", "driven by a fake model")
    [message] = reviewer.inbox().messages
    assert (message.sender, message.body) == (agent_id, body)


async def test_claude_code_calls_the_tools(
    service: ServerProcess,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    tmp_path: Path,
    name: str,
) -> None:
    me, reviewer_id = f"{name}-claude", f"{name}-reviewer"
    with MusterClient(service.base_url, api_key=API_KEY) as reviewer:
        reviewer.checkin(reviewer_id, confirm=True)
        fake_anthropic.script.plan(
            Reply(text="Checking in.", tool=ToolCall(name="mcp__muster__agent_checkin", arguments=checkin_args(me))),
            Reply(
                text="Telling the reviewer.",
                tool=ToolCall(
                    name="mcp__muster__agent_send",
                    call_id="call_2",
                    arguments={"to": reviewer_id, "body": "hello from Claude Code", "confirm": True},
                ),
            ),
            Reply(text="Done."),
        )
        config = tmp_path / "mcp.json"
        server = {"type": "stdio", "command": MUSTER, "args": ["mcp"], "env": mcp_env(service.base_url, tmp_path)}
        config.write_text(json.dumps({"mcpServers": {"muster": server}}))
        home, workspace = tmp_path / "home", tmp_path / "workspace"
        home.mkdir()
        workspace.mkdir()
        env = {
            "HOME": str(home),
            "PATH": os.environ["PATH"],
            "ANTHROPIC_BASE_URL": fake_anthropic.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-key",
            **CLAUDE_ENV,
        }
        argv = [str(installed_clis.claude), "-p", "Join the mesh, then greet the reviewer"]
        argv += ["--output-format", "stream-json", "--verbose", "--mcp-config", str(config), "--strict-mcp-config"]
        argv += ["--allowedTools", "mcp__muster__agent_checkin,mcp__muster__agent_send"]
        with anyio.fail_after(240):
            done = await anyio.run_process(argv, cwd=workspace, env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        results = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
        assert results[-1]["result"] == "Done." and not results[-1]["is_error"]
        assert_seen(service, me, reviewer, "hello from Claude Code")
        tool_results = json.dumps([r for r in results if r.get("type") == "user"])
        assert f"Checked in as {me}" in tool_results and "Stored in 1 inbox(es)" in tool_results


def codex_config(fake: FakeOpenAI, muster_url: str, state: Path) -> str:
    env = "\n".join(f"{k} = {json.dumps(v)}" for k, v in mcp_env(muster_url, state).items())
    return f"""model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.fake]
name = "fake"
base_url = "{fake.url}/v1"
wire_api = "responses"
env_key = "FAKE_OPENAI_KEY"
request_max_retries = 1
stream_max_retries = 1
supports_websockets = false

[mcp_servers.muster]
command = {json.dumps(MUSTER)}
args = ["mcp"]
startup_timeout_sec = 120
tool_timeout_sec = 120

[mcp_servers.muster.env]
{env}
"""


async def test_codex_calls_the_tools(
    service: ServerProcess,
    installed_clis: InstalledClis,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    name: str,
) -> None:
    me, reviewer_id = f"{name}-codex", f"{name}-reviewer"
    ready = tmp_path / "mcp-server-listed-its-tools"
    with MusterClient(service.base_url, api_key=API_KEY) as reviewer:
        reviewer.checkin(reviewer_id, confirm=True)
        async with recording_proxy(service.base_url) as proxy:
            # Codex starts its MCP servers beside the turn and defers their tools behind its tool search: the first
            # step waits (in codex's shell) until our server has listed its tools, which it does by asking the
            # service for the remote A2A tools (seen by the proxy).
            fake_openai.script.plan(
                Reply(tool=ToolCall(command=f"while [ ! -e {ready} ]; do sleep 0.1; done", call_id="call_wait")),
                Reply(tool=ToolCall(name="tool_search", call_id="call_search", arguments={"query": "muster mesh"})),
                Reply(
                    tool=ToolCall(
                        name="agent_checkin", namespace="mcp__muster", call_id="call_1", arguments=checkin_args(me)
                    )
                ),
                Reply(
                    tool=ToolCall(
                        name="agent_send",
                        namespace="mcp__muster",
                        call_id="call_2",
                        arguments={"to": reviewer_id, "body": "hello from Codex", "confirm": True},
                    )
                ),
                Reply(text="Done."),
            )
            home, workspace = tmp_path / "home", tmp_path / "workspace"
            (home / ".codex").mkdir(parents=True)
            workspace.mkdir()
            (home / ".codex" / "config.toml").write_text(codex_config(fake_openai, proxy.base, tmp_path))
            env = {
                "HOME": str(home),
                "CODEX_HOME": str(home / ".codex"),
                "PATH": os.environ["PATH"],
                "FAKE_OPENAI_KEY": "sk-test-key",
                "NO_COLOR": "1",
            }
            argv = [str(installed_clis.codex), "exec", "--json", "--skip-git-repo-check", "--model", CODEX_MODEL]
            argv.append("Join the mesh, then greet the reviewer")

            async def signal_when_listed() -> None:
                while not any(" /a2a/agents?" in r for r in proxy.requests):
                    await anyio.sleep(0.05)
                ready.touch()

            with anyio.fail_after(240):
                async with anyio.create_task_group() as group:
                    group.start_soon(signal_when_listed)
                    done = await anyio.run_process(argv, cwd=workspace, env=env, check=False)
                    group.cancel_scope.cancel()
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        events = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
        assert "turn.completed" in {e["type"] for e in events}
        assert_seen(service, me, reviewer, "hello from Codex")
        outputs = json.dumps([r.body for r in fake_openai.script.model_requests()])
        assert f"Checked in as {me}" in outputs and "Stored in 1 inbox(es)" in outputs
