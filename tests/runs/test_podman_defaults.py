"""The service started the way a user starts it (``muster serve`` in a checkout, no path variable) runs an agent
with ``sandbox = "podman"`` in a container: a real Codex run, scripted by the fake model to read a secret of the
user's home and to reach another server on the host's loopback, is stopped at both (the refusal is a warning of the
run's journal), reaches its model through the egress proxy and completes; doctor says the sandbox can start."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.dispatch.cli.support import CODEX_MODEL
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.dispatch.sandbox.conftest import podman_image
from tests.dispatch.sandbox.support import other_port
from tests.runs.processes import MUSTER, api
from tests.runs.test_defaults import desk, run_to_end
from tests.runs.test_sandbox_defaults import _probes

pytestmark = [pytest.mark.cli, pytest.mark.container]

__all__ = ["desk", "other_port", "podman_image"]  # fixtures, used by name

CONFIG = """
[dispatch_agents.codex]
kind = "cli"
harness = "codex"
model = "%s"
sandbox = "podman"
variables = { OPENAI_BASE_URL = "${OPENAI_BASE_URL}", MUSTER_CODEX_SANDBOX = "danger-full-access" }
"""


def test_a_podman_agent_runs_in_a_container_with_egress_to_its_model_only(
    podman_image: str, desk: tuple[Path, dict[str, str]], tmp_path: Path, fake_openai: FakeOpenAI, other_port: int
) -> None:
    checkout, env = desk
    (checkout / "muster.toml").write_text(CONFIG % CODEX_MODEL, encoding="utf-8")
    secret = Path(env["HOME"]) / ".ssh" / "id_muster_test"
    secret.parent.mkdir()
    secret.write_text("s3cr3t\n", encoding="utf-8")
    env["OPENAI_BASE_URL"] = f"{fake_openai.url}/v1"
    with api(env, tmp_path / "serve.log", cwd=checkout) as url, httpx.Client(base_url=url, timeout=60) as client:
        [agent] = client.get("/dispatch/agents").json()["agents"]
        assert (agent["sandbox"], agent["egress"]) == ("podman", "model")
        fake_openai.script.plan(Reply(tool=ToolCall(_probes(secret, other_port))), Reply(text="Contained."))
        run = run_to_end(client, agent="codex", prompt="probe", workspace="demo")
        assert (run["status"], run["text"]) == ("completed", "Contained."), run
        lines = client.get(f"/dispatch/runs/{run['id']}/events?format=jsonl").text.splitlines()
    events = [json.loads(line)["event"] for line in lines]
    refused = [e for e in events if e["type"] == "warning" and e.get("code") == "egress"]
    assert f"127.0.0.1:{other_port}" in {e["name"] for e in refused}
    probed = checkout / "var" / "workspaces" / "demo" / "probe.txt"
    seen = dict(line.split(":") for line in probed.read_text(encoding="utf-8").split())
    assert seen == {"home": "ok", "secret": "fail", "other": "fail"}
    doctor = subprocess.run(
        [str(MUSTER), "doctor", "--json"], env=env, cwd=checkout, capture_output=True, text=True, timeout=120
    )
    rows = {row["check"]: row for row in json.loads(doctor.stdout)["rows"]}
    assert rows["dispatch codex sandbox"]["ok"], rows["dispatch codex sandbox"]
