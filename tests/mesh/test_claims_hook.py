"""``muster hook claude`` and ``muster hook gemini`` as their CLIs run them (a process reading the hook's JSON on
stdin) against a real server: an edit of a path another agent holds exclusively is denied naming holder and reason;
the caller's own claim, an unclaimed path and non-editing tools pass; an unreachable service allows with a note on
stderr. ``muster hook install claude`` and ``install gemini`` merge into the project's settings and are
idempotent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from muster_api.commands.hooks import patch_paths
from tests.mesh.support import server_process
from tests.support.net import free_port

MUSTER = [sys.executable, "-m", "muster_api.commands.cli"]


def hook(
    url: str, event: dict[str, object], agent: str, cwd: Path, kind: str = "claude"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MUSTER_URL": url, "MUSTER_AGENT_ID": agent, "MUSTER_REPO": "muster"}
    return subprocess.run(
        [*MUSTER, "hook", kind],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "store.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("hi\n")
    return tmp_path


def claim_the_store(base_url: str) -> None:
    """Agent ``a`` holds ``src/**`` exclusively; agent ``b`` is checked in on the same repo."""
    with httpx.Client(base_url=base_url) as c:
        a = c.post("/mesh/checkin", json={"agent_id": "a", "repo": "muster", "confirm": True}).json()["token"]
        c.post("/mesh/checkin", json={"agent_id": "b", "repo": "muster", "confirm": True})
        r = c.post(
            "/mesh/claims",
            json={"paths": ["src/**"], "reason": "rewriting the store", "confirm": True},
            headers={"Authorization": f"Bearer {a}"},
        )
        assert r.status_code == 200


def store_edit(repo: Path, event: str, tool: str) -> dict[str, object]:
    """The hook's input for an edit of the claimed ``src/store.py``."""
    return {
        "hook_event_name": event,
        "tool_name": tool,
        "cwd": str(repo),
        "tool_input": {"file_path": str(repo / "src" / "store.py"), "old_string": "1", "new_string": "2"},
    }


def test_the_hook_denies_another_agents_claim_and_allows_the_rest(db_url: str, repo: Path) -> None:
    with server_process(db_url) as server:
        claim_the_store(server.base_url)
        edit = store_edit(repo, "PreToolUse", "Edit")
        denied = hook(server.base_url, edit, "b", repo)
        assert denied.returncode == 0, denied.stderr
        decision = json.loads(denied.stdout)["hookSpecificOutput"]
        assert decision["permissionDecision"] == "deny"
        assert (
            "'a'" in decision["permissionDecisionReason"]
            and "rewriting the store" in decision["permissionDecisionReason"]
        )
        # The holder itself, an unclaimed file, and a tool that does not edit pass with no decision.
        assert hook(server.base_url, edit, "a", repo).stdout == ""
        other = {**edit, "tool_input": {"file_path": str(repo / "README.md")}}
        assert hook(server.base_url, other, "b", repo).stdout == ""
        assert hook(server.base_url, {**edit, "tool_name": "Read"}, "b", repo).stdout == ""
        relative = {**edit, "tool_name": "Write", "tool_input": {"file_path": "src/new.py", "content": ""}}
        assert "deny" in hook(server.base_url, relative, "b", repo).stdout


def test_the_gemini_hook_answers_gemini_clis_deny_for_its_writing_tools(db_url: str, repo: Path) -> None:
    with server_process(db_url) as server:
        claim_the_store(server.base_url)
        edit = store_edit(repo, "BeforeTool", "replace")
        denied = hook(server.base_url, edit, "b", repo, "gemini")
        assert denied.returncode == 0, denied.stderr
        answer = json.loads(denied.stdout)
        assert answer["decision"] == "deny"
        assert "'a'" in answer["reason"] and "rewriting the store" in answer["reason"]
        # write_file with a path relative to the project root is checked the same way.
        new = {**edit, "tool_name": "write_file", "tool_input": {"file_path": "src/new.py", "content": ""}}
        assert json.loads(hook(server.base_url, new, "b", repo, "gemini").stdout)["decision"] == "deny"
        assert hook(server.base_url, edit, "a", repo, "gemini").stdout == ""
        free = {**edit, "tool_input": {"file_path": str(repo / "README.md")}}
        assert hook(server.base_url, free, "b", repo, "gemini").stdout == ""
        # Claude Code's tool names mean nothing to Gemini CLI's hook.
        assert hook(server.base_url, {**edit, "tool_name": "Edit"}, "b", repo, "gemini").stdout == ""


def test_an_unreachable_service_allows_and_says_so(repo: Path) -> None:
    edit = {"tool_name": "Edit", "cwd": str(repo), "tool_input": {"file_path": str(repo / "README.md")}}
    done = hook(f"http://127.0.0.1:{free_port()}", edit, "b", repo)
    assert done.returncode == 0 and done.stdout == ""
    assert "allowing the edit" in done.stderr
    gemini = {**edit, "tool_name": "write_file"}
    done = hook(f"http://127.0.0.1:{free_port()}", gemini, "b", repo, "gemini")
    assert done.returncode == 0 and done.stdout == ""
    assert "allowing the edit" in done.stderr


def test_install_merges_and_is_idempotent(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(
        json.dumps({"env": {"MUSTER_AGENT_ID": "b"}, "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": []}]}})
    )
    for _ in range(2):
        subprocess.run(
            [*MUSTER, "hook", "install", "claude", "--project", str(tmp_path)], check=True, capture_output=True
        )
    written = json.loads(settings.read_text())
    assert written["env"] == {"MUSTER_AGENT_ID": "b"}
    subprocess.run(
        [*MUSTER, "hook", "install", "claude", "--project", str(tmp_path), "--as", "c", "--repo", "r"],
        check=True,
        capture_output=True,
    )
    written = json.loads(settings.read_text())
    assert written["env"] == {"MUSTER_AGENT_ID": "c", "MUSTER_REPO": "r"}
    commands = [h["command"] for e in written["hooks"]["PreToolUse"] for h in e["hooks"]]
    assert commands == ["muster hook claude"]
    assert written["hooks"]["PreToolUse"][0]["matcher"] == "Bash"


def test_install_gemini_merges_into_the_project_settings_and_is_idempotent(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    theirs = {"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "./audit.sh"}]}
    settings.write_text(json.dumps({"general": {"vimMode": True}, "hooks": {"BeforeTool": [theirs]}}))
    install = [*MUSTER, "hook", "install", "gemini", "--project", str(tmp_path)]
    subprocess.run([*install, "--as", "b", "--url", "http://127.0.0.1:9"], check=True, capture_output=True)
    first = settings.read_text()
    again = subprocess.run([*install, "--as", "b"], check=True, capture_output=True, text=True)
    assert settings.read_text() == first and "already has" in again.stdout
    subprocess.run([*install, "--repo", "r"], check=True, capture_output=True)
    written = json.loads(settings.read_text())
    assert written["general"] == {"vimMode": True}
    theirs_kept, ours = written["hooks"]["BeforeTool"]
    assert theirs_kept == theirs
    assert ours["matcher"] == "^(write_file|replace)$"
    (hook_entry,) = ours["hooks"]
    assert hook_entry["command"] == "muster hook gemini"
    assert hook_entry["env"] == {"MUSTER_AGENT_ID": "b", "MUSTER_URL": "http://127.0.0.1:9", "MUSTER_REPO": "r"}


def test_the_files_an_apply_patch_writes() -> None:
    patch = (
        "*** Begin Patch\n*** Add File: docs/new.md\n+*** Update File: not/a/header\n"
        "*** Update File: src/a.py\n*** Move to: src/b.py\n@@\n-x\n+y\n*** Delete File: old.txt\n*** End Patch\n"
    )
    assert patch_paths(patch) == ["docs/new.md", "src/a.py", "src/b.py", "old.txt"]
