"""Runs over REST with a custom agent: queue, execute, read back, list, stream, download, cancel, steer, replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from muster_dispatch import container_provider
from tests.runs.agents import EVENTS
from tests.runs.support import dispatch_app, dispatch_env, finished, read_sse, start

pytestmark = pytest.mark.anyio


async def test_a_custom_agent_run_completes_with_its_events(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path) as client:
        queued = await start(client, agent="fast", prompt="hello", workspace="w1")
        assert queued["status"] == "queued" and queued["agent"] == "fast"
        run = await finished(client, queued["id"])
        assert run["status"] == "completed", run
        assert run["text"] == "done: hello"
        assert run["selected"] == "fast"
        assert [a["status"] for a in run["attempts"]] == ["completed"]
        assert run["usage"]["input"] == 3 and run["usage"]["output"] == EVENTS
        assert run["worker"] and run["started_at"] and run["finished_at"] and run["queued_at"]
        assert run["error"] is None
        assert (root / "w1").is_dir()
        stream = await read_sse(client, queued["id"])
        types = [e["event"] for e in stream.events]
        assert types[0] == "turn.input" and types[-1] == "turn.result", types
        assert types.count("text_delta") == EVENTS - 1
        assert [e["id"] for e in stream.events] == list(range(1, len(types) + 1))
        assert stream.result is not None and stream.result["status"] == "completed"


async def test_agents_are_listed_with_their_errors(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch_env(monkeypatch, tmp_path)
    monkeypatch.setenv("MUSTER_TEST_CLAUDE_KEY", "sk-test")
    agents = {
        "fast": {"kind": "custom", "entrypoint": "tests.runs.agents:fast"},
        "claude": {"kind": "cli", "harness": "claude", "variables": {"ANTHROPIC_API_KEY": "${MUSTER_TEST_CLAUDE_KEY}"}},
        "codex": {"kind": "cli", "harness": "codex", "model": "gpt-5.5"},
        "both": {"kind": "fallback", "agents": ["claude", "codex"]},
        "typo": {"kind": "cli", "harness": "claude", "modle": "x"},
        "amp": {"kind": "cli", "harness": "amp"},
        "unset": {"kind": "cli", "harness": "claude", "variables": {"K": "${MUSTER_TEST_NOT_SET_ANYWHERE}"}},
        "ghost": {"kind": "fallback", "agents": ["claude", "nobody"]},
        "loop": {"kind": "fallback", "agents": ["loop2"]},
        "loop2": {"kind": "fallback", "agents": ["loop"]},
        "missing": {"kind": "custom", "entrypoint": "tests.runs.no_such_module:fn"},
        "hosts": {"kind": "cli", "harness": "codex", "egress": ["pypi.org:443"], "sandbox": "bwrap"},
        "podded": {"kind": "cli", "harness": "codex", "sandbox": "podman", "egress": "none"},
        "naked": {"kind": "cli", "harness": "codex", "sandbox": "local", "egress": "none"},
        "badhost": {"kind": "cli", "harness": "codex", "egress": ["pypi.org"]},
        "jail": {"kind": "cli", "harness": "codex", "sandbox": "chroot"},
    }
    async with dispatch_app(db_url, tmp_path, agents) as client:
        response = await client.get("/dispatch/agents")
        assert response.status_code == 200
        listed = {a["name"]: a for a in response.json()["agents"]}
    assert set(listed) == set(agents)
    assert listed["fast"] == {
        "name": "fast", "kind": "custom", "harness": None, "model": None, "agents": None,
        "installed": True, "version": None, "credentials": None, "sandbox": None, "egress": None, "builtin": False,
        "error": None,
    }  # fmt: skip
    assert (listed["claude"]["sandbox"], listed["claude"]["egress"]) == ("bwrap", "model")  # the defaults on Linux
    assert (listed["both"]["sandbox"], listed["both"]["egress"]) == ("bwrap", "model")
    assert (listed["hosts"]["sandbox"], listed["hosts"]["egress"]) == ("bwrap", ["pypi.org:443"])
    assert (listed["podded"]["sandbox"], listed["podded"]["egress"]) == ("podman", "none")
    assert "needs a sandbox" in listed["naked"]["error"]
    assert "'pypi.org' is not host:port" in listed["badhost"]["error"]
    assert "sandbox" in listed["jail"]["error"]
    assert listed["claude"]["harness"] == "claude" and listed["claude"]["error"] is None
    assert listed["claude"]["credentials"] == "key variable ANTHROPIC_API_KEY"
    assert listed["codex"]["credentials"] == "host login ~/.codex/auth.json"  # the suite's fake host home
    assert listed["claude"]["installed"] is True and listed["claude"]["version"]
    assert listed["codex"]["model"] == "gpt-5.5"
    assert listed["both"]["agents"] == ["claude", "codex"] and listed["both"]["error"] is None
    assert "modle" in listed["typo"]["error"]
    assert "harness" in listed["amp"]["error"]
    assert "MUSTER_TEST_NOT_SET_ANYWHERE" in listed["unset"]["error"]
    assert "unknown fallback member 'nobody'" in listed["ghost"]["error"]
    assert "cyclic" in listed["loop"]["error"] and "cyclic" in listed["loop2"]["error"]
    assert "does not import" in listed["missing"]["error"]


async def test_a_podman_agent_without_its_image_fails_the_run_with_configuration(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never a fallback to the host: the run fails before anything starts, with one line naming the fix."""
    dispatch_env(monkeypatch, tmp_path)
    monkeypatch.setattr(container_provider, "image_tag", lambda: "localhost/muster-no-such-image:0")
    agents = {"podded": {"kind": "cli", "harness": "codex", "sandbox": "podman"}}
    async with dispatch_app(db_url, tmp_path, agents) as client:
        run = await finished(client, (await start(client, agent="podded", prompt="hi", workspace="w"))["id"])
    assert run["status"] == "failed" and run["error"]["code"] == "configuration"
    fix = "muster sandbox image" if shutil.which("podman") else "apt-get install podman"
    assert "\n" not in run["error"]["message"] and fix in run["error"]["message"]


async def test_reload_reads_the_block_again(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dispatch_env(monkeypatch, tmp_path)
    async with dispatch_app(db_url, tmp_path, {}) as client:
        assert (await client.get("/dispatch/agents")).json() == {"agents": []}
        config = tmp_path / "muster.json"
        config.write_text(
            json.dumps({"dispatch_agents": {"fast": {"kind": "custom", "entrypoint": "tests.runs.agents:fast"}}})
        )
        response = await client.post("/config/reload")
        assert response.status_code == 200, response.text
        assert [a["name"] for a in response.json()["dispatch"]["agents"]] == ["fast"]
        assert [a["name"] for a in (await client.get("/dispatch/agents")).json()["agents"]] == ["fast"]
