"""The user's own CLI login: copied fresh into the private home for each turn, filtered, private, and a refreshed
login written back only when the host file is unchanged since it was copied."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from muster_dispatch import (
    AgentInput,
    DispatchError,
    claude_harness,
    cli_agent,
    codex_harness,
    copy_login,
    credential_source,
    dispatch,
    local_provider,
    write_back,
)
from muster_dispatch.harnesses.claude import HOST_LOGIN as CLAUDE_LOGIN
from muster_dispatch.harnesses.codex import HOST_LOGIN as CODEX_LOGIN
from tests.dispatch.unit.support import make_cli
from tests.support.logins import CLAUDE_TOKEN, CODEX_TOKEN, PRIVATE_PROJECT, HostHome, make_host_home

pytestmark = pytest.mark.anyio


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_claude_login_is_copied_private_and_only_its_account_keys(tmp_path: Path) -> None:
    host = make_host_home(tmp_path / "host")
    home = tmp_path / "private" / "home"
    home.mkdir(parents=True)
    (home / ".claude.json").write_text(json.dumps({"theme": "dark"}))  # written by the harness's configuration
    copy_login(CLAUDE_LOGIN, home, host.path)
    credentials = home / ".claude" / ".credentials.json"
    assert json.loads(credentials.read_text())["claudeAiOauth"]["accessToken"] == CLAUDE_TOKEN
    assert mode(credentials) == 0o600 and mode(home / ".claude.json") == 0o600
    assert mode(home) == 0o700 and mode(home / ".claude") == 0o700
    account = json.loads((home / ".claude.json").read_text())
    assert account["oauthAccount"]["emailAddress"] == "user@example.com" and account["theme"] == "dark"
    assert "projects" not in account and "mcpServers" not in account
    assert PRIVATE_PROJECT not in (home / ".claude.json").read_text()


def test_a_missing_login_is_a_configuration_error_naming_the_fix(tmp_path: Path) -> None:
    for login, fix, path in [(CLAUDE_LOGIN, "/login", ".credentials.json"), (CODEX_LOGIN, "codex login", "auth.json")]:
        with pytest.raises(DispatchError) as caught:
            copy_login(login, tmp_path / "home", tmp_path / "nobody")
        assert caught.value.code == "configuration"
        assert fix in caught.value.message and path in caught.value.message
    assert not (tmp_path / "home" / ".claude").exists()


def _copied(tmp_path: Path) -> tuple[HostHome, Path, object]:
    host = make_host_home(tmp_path / "host")
    os.chmod(host.codex_auth, 0o640)  # whatever mode the user gave it is kept by a write-back
    home = tmp_path / "home"
    return host, home, copy_login(CODEX_LOGIN, home, host.path)


def test_a_refreshed_login_replaces_an_unchanged_host_file_atomically_with_its_mode(tmp_path: Path) -> None:
    host, home, copied = _copied(tmp_path)
    refreshed = json.dumps({"OPENAI_API_KEY": None, "tokens": {"refresh_token": "rotated"}})
    (home / ".codex" / "auth.json").write_text(refreshed)
    assert write_back(copied) == [host.codex_auth]  # type: ignore[arg-type]
    assert host.codex_auth.read_text() == refreshed and mode(host.codex_auth) == 0o640
    assert [p.name for p in host.codex_auth.parent.iterdir()] == ["auth.json"], "no temporary file left behind"


def test_a_host_file_changed_since_the_copy_is_kept(tmp_path: Path) -> None:
    host, home, copied = _copied(tmp_path)
    (home / ".codex" / "auth.json").write_text(json.dumps({"tokens": {"refresh_token": "rotated-here"}}))
    relogin = json.dumps({"tokens": {"refresh_token": "the user logged in again"}})
    host.codex_auth.write_text(relogin)
    assert write_back(copied) == []  # type: ignore[arg-type]
    assert host.codex_auth.read_text() == relogin


def test_an_unrefreshed_login_is_not_written_back(tmp_path: Path) -> None:
    host, _, copied = _copied(tmp_path)
    before = host.codex_auth.stat().st_mtime_ns
    assert write_back(copied) == []  # type: ignore[arg-type]
    assert host.codex_auth.stat().st_mtime_ns == before


def test_the_filtered_account_file_is_never_written_back(tmp_path: Path) -> None:
    host = make_host_home(tmp_path / "host")
    copied = copy_login(CLAUDE_LOGIN, tmp_path / "home", host.path)
    (tmp_path / "home" / ".claude.json").write_text("{}")
    before = host.claude_json.read_text()
    write_back(copied)
    assert host.claude_json.read_text() == before


def test_the_credential_source_names_the_variable_or_the_file_never_the_secret(tmp_path: Path) -> None:
    host = make_host_home(tmp_path / "host")
    harness = claude_harness()
    assert credential_source(harness.credentials({"ANTHROPIC_API_KEY": "sk-secret"}), host.path) == (
        "key variable ANTHROPIC_API_KEY"
    )
    assert credential_source(harness.credentials({}), host.path) == "host login ~/.claude/.credentials.json"
    assert credential_source(codex_harness().credentials({}), tmp_path / "nobody") is None


# A CLI that refreshes its login: reads the token in its private home, writes a rotated one, answers like Claude.
REFRESHING_CLI = """
path = os.path.join(os.environ["HOME"], ".claude", ".credentials.json")
login = json.load(open(path))
token = login["claudeAiOauth"]["accessToken"]
login["claudeAiOauth"]["accessToken"] = "rotated-" + str(len(token))
json.dump(login, open(path, "w"))
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s1"}))
result = {"type": "result", "subtype": "success", "is_error": False, "result": "refreshed", "session_id": "s1"}
print(json.dumps(result))
"""


async def test_a_turn_copies_the_login_fresh_and_writes_a_refresh_back(tmp_path: Path) -> None:
    host = make_host_home(tmp_path / "host")
    provider = local_provider(tmp_path / "homes", host_home=host.path)
    agent = cli_agent(claude_harness(executable=make_cli(tmp_path, REFRESHING_CLI)))
    workspace = tmp_path / "w"
    workspace.mkdir()
    result = await dispatch(agent, AgentInput("x"), workspace=workspace, provider=provider).result()
    assert result.status == "completed" and result.text == "refreshed"
    first = json.loads(host.claude_credentials.read_text())["claudeAiOauth"]["accessToken"]
    assert first == f"rotated-{len(CLAUDE_TOKEN)}"
    # The next turn starts from the host's (now refreshed) login, not from the private copy it left.
    host.claude_credentials.write_text(host.claude_credentials.read_text().replace(first, "the-user-logged-in"))
    await dispatch(agent, AgentInput("x"), workspace=workspace, provider=provider).result()
    second = json.loads(host.claude_credentials.read_text())["claudeAiOauth"]["accessToken"]
    assert second == f"rotated-{len('the-user-logged-in')}"


async def test_a_key_variable_copies_no_login(tmp_path: Path) -> None:
    host = make_host_home(tmp_path / "host")
    provider = local_provider(tmp_path / "homes", host_home=host.path)
    cli = make_cli(tmp_path, "print(json.dumps({'type': 'result', 'result': str(os.listdir(os.environ['HOME']))}))")
    agent = cli_agent(codex_harness(executable=cli), variables={"CODEX_API_KEY": "k"})
    workspace = tmp_path / "w"
    workspace.mkdir()
    await dispatch(agent, AgentInput("x"), workspace=workspace, provider=provider).result()
    assert not list((tmp_path / "homes").glob("*/home/.codex/auth.json"))
    assert CODEX_TOKEN not in "".join(p.read_text() for p in (tmp_path / "homes").rglob("*") if p.is_file())
