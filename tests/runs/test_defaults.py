"""`muster serve` started the way `make run` starts it: in a directory laid out like the repository (a muster.toml
with no dispatch agents), with NO ``MUSTER_*`` path variable, so every path is a default relative to that directory;
the user's home holds their Claude Code and Codex logins; only the fake model servers' variables are set. The
built-in agents run the REAL pinned CLIs to their end, with the user's login, which never leaks."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from muster_dispatch.bootstrap import default_cache_dir
from tests.dispatch.cli.support import RESET_EPOCH
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes import anthropic, openai
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply
from tests.runs.processes import api
from tests.support.logins import CLAUDE_REFRESH, CLAUDE_TOKEN, CODEX_TOKEN, make_host_home

pytestmark = [pytest.mark.cli]


@pytest.fixture
def desk(db_url: str, tmp_path: Path, installed_clis: InstalledClis) -> tuple[Path, dict[str, str]]:
    """A checkout's directory and the environment of a user's shell: HOME with the logins (and the CLI cache the
    suite installed), no MUSTER_* variable but the database on the PostgreSQL leg."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "muster.toml").write_text("# no dispatch_agents block: the built-in agents\n")
    home = make_host_home(tmp_path / "user-home").path
    (home / ".cache" / "muster").mkdir(parents=True)
    (home / ".cache" / "muster" / "cli").symlink_to(default_cache_dir())
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    env["HOME"] = str(home)
    if not db_url.startswith("sqlite"):
        env["MUSTER_DATABASE_URL"] = db_url  # on SQLite: the default file under ./var/ of the checkout
    return checkout, env


def run_to_end(client: httpx.Client, **body: str) -> dict[str, object]:
    created = client.post("/dispatch/runs", json=body)
    assert created.status_code == 202, created.text
    run_id = created.json()["id"]
    deadline = time.monotonic() + 240  # a bound for a failure; a run that ends is read at once
    while True:
        run: dict[str, object] = client.get(f"/dispatch/runs/{run_id}").json()
        if run["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return run
        time.sleep(0.1)


def test_the_built_in_agents_run_at_a_users_desk_with_their_login(
    desk: tuple[Path, dict[str, str]], tmp_path: Path, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    checkout, env = desk
    env["ANTHROPIC_BASE_URL"] = fake_anthropic.url
    env["OPENAI_BASE_URL"] = f"{fake_openai.url}/v1"
    log = tmp_path / "serve.log"
    answers: list[str] = []
    with api(env, log, cwd=checkout) as url, httpx.Client(base_url=url, timeout=60) as client:
        listed = client.get("/dispatch/agents")
        answers.append(listed.text)
        agents = {a["name"]: a for a in listed.json()["agents"]}
        assert sorted(agents) == ["claude", "codex", "fallback"] and agents["fallback"]["agents"] == ["claude", "codex"]
        assert agents["claude"]["credentials"] == "host login ~/.claude/.credentials.json"
        assert agents["codex"]["credentials"] == "host login ~/.codex/auth.json"
        assert {a["sandbox"] for a in agents.values()} == {"bwrap"}  # so every run below is confined

        fake_anthropic.script.plan(Reply(text="Claude at the desk."))
        claude = run_to_end(client, agent="claude", prompt="explain this repo", workspace="demo")
        assert (claude["status"], claude["text"]) == ("completed", "Claude at the desk."), claude

        fake_openai.script.plan(Reply(text="Codex at the desk."))
        codex = run_to_end(client, agent="codex", prompt="explain this repo", workspace="demo")
        assert (codex["status"], codex["text"]) == ("completed", "Codex at the desk."), codex

        fake_openai.script.plan(openai.usage_limited(RESET_EPOCH))
        quota = run_to_end(client, agent="codex", prompt="more", workspace="demo")
        assert quota["status"] == "failed" and quota["error"]["code"] == "quota", quota  # type: ignore[index]

        fake_openai.script.reset(Reply(text="Codex took over."))
        fake_anthropic.script.plan(anthropic.usage_limited(RESET_EPOCH))
        fell = run_to_end(client, agent="fallback", prompt="do the job", workspace="demo")
        assert (fell["status"], fell["selected"], fell["text"]) == ("completed", "codex", "Codex took over."), fell

        for run in (claude, codex, quota, fell):
            answers.append(client.get(f"/dispatch/runs/{run['id']}").text)
            answers.append(client.get(f"/dispatch/runs/{run['id']}/events?format=jsonl").text)

    # Every path was the default, relative to the checkout, and the CLIs worked in it.
    assert list((checkout / "var" / "workspaces").iterdir()) == [checkout / "var" / "workspaces" / "demo"]
    assert list((checkout / "var" / "dispatch" / "homes").iterdir())
    if "MUSTER_DATABASE_URL" not in env:
        assert (checkout / "var" / "muster.db").is_file()
    # The model servers received the user's login…
    claude_seen = {r.credential for r in fake_anthropic.script.model_requests()}
    codex_seen = {r.credential for r in fake_openai.script.model_requests()}
    assert claude_seen == {f"Bearer {CLAUDE_TOKEN}"} and codex_seen == {f"Bearer {CODEX_TOKEN}"}
    # …and it appears in no journal row, answer or log line.
    told = "\n".join(answers) + log.read_text(errors="replace")
    for secret in (CLAUDE_TOKEN, CLAUDE_REFRESH, CODEX_TOKEN):
        assert secret not in told
    assert json.loads(answers[0])["agents"]
