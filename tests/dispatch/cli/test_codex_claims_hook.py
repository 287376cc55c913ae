"""Path claims enforced inside the REAL Codex CLI: its PreToolUse hook (``muster hook codex``, merged into Codex's
hooks.json by ``muster hook install codex``) reads the files an ``apply_patch`` names and asks a real Muster server
whether another agent holds one exclusively. On a held file Codex refuses the patch, the file is unchanged and the
model's next request carries the reason naming the holder; the same patch on an unclaimed file lands.

Codex runs a hook only once a person trusted it (its TUI's ``/hooks``); a headless test cannot, so it passes Codex's
own ``--dangerously-bypass-hook-trust`` for this invocation."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.dispatch.cli.claims_support import MUSTER_BIN, REASON, claimed_server, project_repo
from tests.dispatch.cli.support import CODEX_KEY_VAR, user_texts
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.capture import codex_config
from tests.dispatch.fakes.openai import FakeOpenAI
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = [pytest.mark.cli]


def patch_of(name: str) -> str:
    return f"*** Begin Patch\n*** Update File: {name}\n@@\n-VERSION = 1\n+VERSION = 2\n*** End Patch\n"


def codex_turn(codex: Path, home: Path, project: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CODEX_HOME": str(home),
        CODEX_KEY_VAR: "sk-test-key",
        "PATH": f"{MUSTER_BIN}:{os.environ.get('PATH', os.defpath)}",
    }
    argv = [str(codex), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", prompt]
    return subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_the_hook_refuses_a_patch_of_a_held_file_and_allows_an_unclaimed_one(
    installed_clis: InstalledClis, fake_openai: FakeOpenAI, db_url: str, tmp_path: Path
) -> None:
    project = project_repo(tmp_path / "project")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(codex_config(fake_openai.url))
    with claimed_server(db_url) as server:
        for _ in range(2):  # idempotent: one hook, whatever the number of installs
            install = [
                "hook",
                "install",
                "codex",
                "--codex-home",
                str(home),
                "--as",
                "editor",
                "--url",
                server.base_url,
            ]
            subprocess.run([f"{MUSTER_BIN}/muster", *install], check=True, capture_output=True)
        hooks = json.loads((home / "hooks.json").read_text())["hooks"]["PreToolUse"]
        assert [h["command"] for e in hooks for h in e["hooks"]] == [
            f"muster hook codex --as=editor --url={server.base_url}"
        ]

        fake_openai.script.plan(Reply(tool=ToolCall(patch=patch_of("src/store.py"))), Reply(text="It is held."))
        done = codex_turn(installed_clis.codex, home, project, "Bump the store's version")
        assert done.returncode == 0, done.stderr[-2000:]
        assert (project / "src" / "store.py").read_text() == "VERSION = 1\n"
        _, after = fake_openai.script.model_requests()
        refused = "\n".join(user_texts(after))
        assert "'holder'" in refused and REASON in refused and "src/**" in refused, refused[-2000:]

        fake_openai.script.reset(Reply(tool=ToolCall(patch=patch_of("README.md"))), Reply(text="Bumped."))
        done = codex_turn(installed_clis.codex, home, project, "Bump the readme's version")
        assert done.returncode == 0, done.stderr[-2000:]
        assert (project / "README.md").read_text() == "VERSION = 2\n"
