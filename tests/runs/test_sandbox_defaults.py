"""The service started the way a user starts it (``muster serve`` in a checkout, no path variable, the logins in
HOME) runs an agent that names no sandbox in bubblewrap, with egress to its model only: a real Codex run, scripted by
the fake model to read a secret of the user's home and to reach another server on the host's loopback, is stopped at
both (the refusal is a warning of the run's journal) and still completes. Without bubblewrap on PATH the run fails
with a one-line ``configuration`` error naming the package, and ``muster doctor`` says the same; nothing runs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.dispatch.cli.support import CODEX_MODEL
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.dispatch.sandbox.support import OTHER_BODY, fetch, other_port
from tests.runs.processes import MUSTER, api
from tests.runs.test_defaults import desk, run_to_end

pytestmark = [
    pytest.mark.cli,
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)"
    ),
]

__all__ = ["desk", "other_port"]  # fixtures, used by name


def _probes(secret: Path, other: int) -> str:
    def probe(name: str, command: str) -> str:
        return f"({command}) >/dev/null 2>&1 && echo {name}:ok >> probe.txt || echo {name}:fail >> probe.txt"

    reach = f"{fetch(f'http://127.0.0.1:{other}/', proxy=True)} {OTHER_BODY.decode()}"
    return "; ".join(
        [probe("home", "echo in > inside.txt"), probe("secret", f"grep -q s3cr3t {secret}"), probe("other", reach)]
    )


# Codex's own sandbox off, so that what stops its tools is Muster's; no sandbox or egress named: the defaults.
CONFIG = """
[dispatch_agents.codex]
kind = "cli"
harness = "codex"
model = "%s"
variables = { OPENAI_BASE_URL = "${OPENAI_BASE_URL}", MUSTER_CODEX_SANDBOX = "danger-full-access" }
"""


def test_the_default_run_is_in_bwrap_with_egress_to_its_model_only(
    desk: tuple[Path, dict[str, str]], tmp_path: Path, fake_openai: FakeOpenAI, other_port: int
) -> None:
    probe_through_the_service(CONFIG % CODEX_MODEL, "bwrap", desk, tmp_path, fake_openai, other_port)


def probe_through_the_service(
    config: str,
    sandbox: str,
    desk: tuple[Path, dict[str, str]],
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    other_port: int,
) -> None:
    """A real Codex run of the one agent ``config`` declares, through ``muster serve`` at the desk: it runs in
    ``sandbox`` with egress to its model only, reads no secret of the user's home, is refused another loopback port
    (a warning of its journal) and completes."""
    checkout, env = desk
    (checkout / "muster.toml").write_text(config, encoding="utf-8")
    secret = Path(env["HOME"]) / ".ssh" / "id_muster_test"
    secret.parent.mkdir()
    secret.write_text("s3cr3t\n", encoding="utf-8")
    env["OPENAI_BASE_URL"] = f"{fake_openai.url}/v1"
    with api(env, tmp_path / "serve.log", cwd=checkout) as url, httpx.Client(base_url=url, timeout=60) as client:
        [agent] = client.get("/dispatch/agents").json()["agents"]
        assert (agent["sandbox"], agent["egress"]) == (sandbox, "model")
        fake_openai.script.plan(Reply(tool=ToolCall(_probes(secret, other_port))), Reply(text="Confined."))
        run = run_to_end(client, agent="codex", prompt="probe", workspace="demo")
        assert (run["status"], run["text"]) == ("completed", "Confined."), run
        lines = client.get(f"/dispatch/runs/{run['id']}/events?format=jsonl").text.splitlines()
    events = [json.loads(line)["event"] for line in lines]
    refused = [e for e in events if e["type"] == "warning" and e.get("code") == "egress"]
    assert f"127.0.0.1:{other_port}" in {e["name"] for e in refused}
    probed = checkout / "var" / "workspaces" / "demo" / "probe.txt"
    seen = dict(line.split(":") for line in probed.read_text(encoding="utf-8").split())
    assert seen == {"home": "ok", "secret": "fail", "other": "fail"}


def _path_without_bwrap(tmp_path: Path) -> str:
    """PATH as the user's, with every program of the system directories but bubblewrap."""
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for program in Path(directory).iterdir():
            target = bin_dir / program.name
            if program.name != "bwrap" and not target.exists():
                target.symlink_to(program)
    return f"{Path(MUSTER).parent}:{bin_dir}"


def test_without_bwrap_the_run_fails_with_one_configuration_line(
    desk: tuple[Path, dict[str, str]], tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    checkout, env = desk
    env["OPENAI_BASE_URL"] = f"{fake_openai.url}/v1"
    env["PATH"] = _path_without_bwrap(tmp_path)
    with api(env, tmp_path / "serve.log", cwd=checkout) as url, httpx.Client(base_url=url, timeout=60) as client:
        run = run_to_end(client, agent="codex", prompt="anything", workspace="demo")
    assert run["status"] == "failed" and run["error"]["code"] == "configuration", run  # type: ignore[index]
    message = run["error"]["message"]  # type: ignore[index]
    assert "\n" not in message and "apt-get install bubblewrap" in message
    assert fake_openai.script.requests == []  # nothing ran, on the host or anywhere
    doctor = subprocess.run(
        [str(MUSTER), "doctor", "--json"], env=env, cwd=checkout, capture_output=True, text=True, timeout=120
    )
    rows = {row["check"]: row for row in json.loads(doctor.stdout)["rows"]}
    assert doctor.returncode == 1
    assert not rows["dispatch codex sandbox"]["ok"]
    assert "apt-get install bubblewrap" in rows["dispatch codex sandbox"]["fix"]
