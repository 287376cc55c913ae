"""`muster doctor` as a person runs it: each failure is one wrong row with the line that fixes it, and the exit code
says whether anything is wrong. The real command, the real pinned CLIs' cache, real databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from muster_dispatch.bootstrap import default_cache_dir
from tests.dispatch.conftest import (  # noqa: F401  (fixtures, by name)
    copilot_cli,
    gemini_cli,
    installed_clis,
    opencode_cli,
)
from tests.support.logins import CLAUDE_TOKEN, CODEX_TOKEN, GEMINI_TOKEN, make_host_home
from tests.support.net import free_port

MUSTER = Path(sys.executable).with_name("muster")


def doctor(tmp_path: Path, db_url: str, *, config: str = "", **env: str) -> tuple[int, dict[str, Any], str]:
    (tmp_path / "muster.toml").write_text(config)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    base.update(
        MUSTER_DATABASE_URL=db_url,
        MUSTER_CLI_CACHE=str(default_cache_dir()),
        MUSTER_HOST_HOME=str(make_host_home(tmp_path / "home").path),
    )
    base.update(env)
    done = subprocess.run(
        [str(MUSTER), "doctor", "--json"], cwd=tmp_path, env=base, capture_output=True, text=True, timeout=120
    )
    table = subprocess.run([str(MUSTER), "doctor"], cwd=tmp_path, env=base, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout), table.stdout + table.stderr


def rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["check"]: row for row in report["rows"]}


# All well needs the pinned CLIs in the cache: on a fresh clone nothing has put them there before this test.
# OpenCode, Gemini CLI and Copilot are built-in agents once installed: their keys come from the shell, as a user
# exports them (Gemini's login from the host home).
@pytest.mark.usefixtures("installed_clis", "opencode_cli", "gemini_cli", "copilot_cli")
def test_all_well_is_exit_0_and_names_every_source_but_no_secret(tmp_path: Path, db_url: str) -> None:
    keys = {
        "OPENROUTER_API_KEY": "sk-or-hidden",
        "COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:9/v1",
        "COPILOT_PROVIDER_API_KEY": "sk-copilot-hidden",
        "COPILOT_MODEL": "gpt-5.1",
    }
    code, report, table = doctor(tmp_path, db_url, **keys)
    assert code == 0 and report["ok"], report
    found = rows(report)
    assert found["database"]["ok"] and "migrated" in found["database"]["detail"]
    assert found["dispatch claude credentials"]["detail"] == "host login ~/.claude/.credentials.json"
    assert found["dispatch codex cli"]["ok"] and "0.169.0" in found["dispatch codex cli"]["detail"]
    assert found["dispatch opencode cli"]["ok"] and "1.18.33" in found["dispatch opencode cli"]["detail"]
    assert found["dispatch copilot cli"]["ok"] and "1.0.102" in found["dispatch copilot cli"]["detail"]
    assert found["dispatch copilot credentials"]["detail"] == "key variable COPILOT_PROVIDER_API_KEY"
    assert found["dispatch opencode credentials"]["detail"] == "key variable OPENROUTER_API_KEY"
    assert {"path config", "path workspaces root", "path dispatch homes", "path cli cache"} <= set(found)
    assert CLAUDE_TOKEN not in table + json.dumps(report) and CODEX_TOKEN not in table
    # Gemini CLI is installed, so it is one of the built-in agents, with the user's Google login.
    assert found["dispatch gemini cli"]["ok"] and "0.61.0" in found["dispatch gemini cli"]["detail"]
    assert found["dispatch gemini credentials"]["detail"] == "host login ~/.gemini/oauth_creds.json"
    assert GEMINI_TOKEN not in table + json.dumps(report)
    assert "hidden" not in table + json.dumps(report)


def test_a_missing_cli_and_a_missing_login_are_wrong_rows_with_their_fix(tmp_path: Path, db_url: str) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    code, report, table = doctor(tmp_path, db_url, MUSTER_CLI_CACHE=str(empty), MUSTER_HOST_HOME=str(empty))
    assert code == 1 and not report["ok"]
    found = rows(report)
    assert not found["dispatch claude cli"]["ok"] and found["dispatch claude cli"]["fix"] == "muster install claude"
    assert "/login" in found["dispatch claude credentials"]["fix"]
    assert "codex login" in found["dispatch codex credentials"]["fix"]
    assert "BAD" in table and "fix: muster install codex" in table
    assert not {"dispatch gemini cli", "dispatch copilot cli", "dispatch opencode cli"} & set(found)  # once installed


def test_a_configured_gemini_agent_without_cli_or_login(tmp_path: Path, db_url: str) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    config = '[dispatch_agents.g]\nkind = "cli"\nharness = "gemini"\n'
    code, report, _ = doctor(tmp_path, db_url, config=config, MUSTER_CLI_CACHE=str(empty), MUSTER_HOST_HOME=str(empty))
    found = rows(report)
    assert code == 1
    assert found["dispatch g cli"]["fix"] == "muster install gemini" and "0.61.0" in found["dispatch g cli"]["detail"]
    assert not found["dispatch g credentials"]["ok"] and "GEMINI_API_KEY" in found["dispatch g credentials"]["fix"]


def test_a_key_variable_is_named_as_the_credential_source(tmp_path: Path, db_url: str) -> None:
    config = '[dispatch_agents.k]\nkind = "cli"\nharness = "claude"\nvariables = { ANTHROPIC_API_KEY = "sk-hidden" }\n'
    _, report, table = doctor(tmp_path, db_url, config=config)
    assert rows(report)["dispatch k credentials"]["detail"] == "key variable ANTHROPIC_API_KEY"
    assert "sk-hidden" not in table + json.dumps(report)
    assert "dispatch claude cli" not in rows(report), "a declared agent replaces the built-ins"


def test_an_unreachable_database_is_one_wrong_row(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    code, report, _ = doctor(tmp_path, url)
    assert code == 1
    database = rows(report)["database"]
    assert not database["ok"] and database["fix"]


def test_a_bad_a2a_card_is_one_wrong_row(tmp_path: Path, db_url: str) -> None:
    config = f'[agents.research]\ncard = "http://127.0.0.1:{free_port()}"\n'
    code, report, _ = doctor(tmp_path, db_url, config=config)
    assert code == 1
    research = rows(report)["a2a research"]
    assert not research["ok"] and "agents.research" in research["fix"]
    assert rows(report)["database"]["ok"]
