"""After a dispatched turn, the workspace's changed paths are checked against the path claims of its repo: a REAL
Claude Code turn, run through the service against the fake model, writes a file another agent holds exclusively
beside a rename away from a held path staged in its work tree; the run's journal gets a ``warning`` naming each
held path and its holder, and none for the paths nobody holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from muster_api.dispatch.claims_watch import changed_paths, in_work_tree, parse_status
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.runs.support import dispatch_app, dispatch_env, finished, read_sse, start
from tests.runs.test_cli_runs import claude

REASON = "migrating the store"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def repository(root: Path) -> Path:
    """A clone-like work tree whose origin names the repo ``muster``, with a committed store and a doc."""
    project = root / "proj"
    (project / "src").mkdir(parents=True)
    (project / "docs").mkdir()
    (project / "src" / "store.py").write_text("VERSION = 1\n")
    (project / "docs" / "old.md").write_text("old\n")
    git(project, "init", "-q")
    git(project, "remote", "add", "origin", "https://example.com/acme/muster.git")
    git(project, "add", ".")
    git(project, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "start")
    return project.resolve()


@pytest.mark.anyio
@pytest.mark.cli
async def test_a_turn_that_changes_held_paths_warns_naming_path_and_holder(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    project = repository(dispatch_env(monkeypatch, tmp_path))
    # A rename staged in the work tree (Claude Code asks approval for a `git mv`, which a headless turn cannot give).
    git(project, "mv", "docs/old.md", "docs/new.md")
    fake_anthropic.script.plan(
        Reply(tool=ToolCall(name="Write", arguments={"file_path": str(project / "src/store.py"), "content": "2\n"})),
        Reply(
            tool=ToolCall(
                name="Write", arguments={"file_path": str(project / "notes.md"), "content": "n\n"}, call_id="call_2"
            )
        ),
        Reply(text="Done."),
    )
    async with dispatch_app(db_url, tmp_path, {"claude": claude(fake_anthropic.url)}) as client:
        holder = await client.post("/mesh/checkin", json={"agent_id": "keeper", "repo": "muster", "confirm": True})
        token = holder.json()["token"]
        granted = await client.post(
            "/mesh/claims",
            json={"paths": ["src/**", "docs/old.md"], "reason": REASON, "confirm": True},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert len(granted.json()["granted"]) == 2, granted.text

        run = await start(client, agent="claude", prompt="Change things", workspace="proj")
        done = await finished(client, run["id"])
        stream = await read_sse(client, run["id"])

    assert done["status"] == "completed", done["error"]
    results = [e["data"]["event"] for e in stream.events if e["event"] in ("tool_result", "warning")]
    assert (project / "src/store.py").read_text() == "2\n" and (project / "docs/new.md").exists(), results
    warnings = [e["data"]["event"] for e in stream.events if e["event"] == "warning"]
    claimed = [w for w in warnings if w.get("code") == "claimed_path"]
    assert sorted(w["data"]["path"] for w in claimed) == ["docs/old.md", "src/store.py"], warnings
    assert {w["data"]["holder"] for w in claimed} == {"keeper"}
    assert all("'keeper'" in w["text"] and REASON in w["text"] for w in claimed)


@pytest.mark.anyio
@pytest.mark.cli
async def test_a_workspace_whose_repo_nobody_claims_in_gets_no_warning(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
) -> None:
    project = repository(dispatch_env(monkeypatch, tmp_path))
    git(project, "config", "muster.repo", "elsewhere")  # the configured name wins over the origin's
    fake_anthropic.script.plan(
        Reply(tool=ToolCall(name="Write", arguments={"file_path": str(project / "src/store.py"), "content": "2\n"})),
        Reply(text="Done."),
    )
    async with dispatch_app(db_url, tmp_path, {"claude": claude(fake_anthropic.url)}) as client:
        holder = await client.post("/mesh/checkin", json={"agent_id": "keeper", "repo": "muster", "confirm": True})
        await client.post(
            "/mesh/claims",
            json={"paths": ["src/**"], "reason": REASON, "confirm": True},
            headers={"Authorization": f"Bearer {holder.json()['token']}"},
        )
        run = await start(client, agent="claude", prompt="Change things", workspace="proj")
        done = await finished(client, run["id"])
        stream = await read_sse(client, run["id"])

    assert done["status"] == "completed", done["error"]
    assert (project / "src/store.py").read_text() == "2\n"
    assert [e for e in stream.events if e["event"] == "warning"] == []


def test_git_status_paths_include_both_sides_of_a_rename_and_untracked_files(tmp_path: Path) -> None:
    project = repository(tmp_path)
    git(project, "mv", "docs/old.md", "docs/renamed.md")
    (project / "src" / "store.py").write_text("changed\n")
    (project / "new dir").mkdir()
    (project / "new dir" / "a b.txt").write_text("x\n")
    out = subprocess.run(
        ["git", "-C", str(project), "status", "--porcelain=v1", "-z", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert parse_status(out) == ["docs/old.md", "docs/renamed.md", "new dir/a b.txt", "src/store.py"]


@pytest.mark.anyio
async def test_a_workspace_is_in_a_work_tree_exactly_when_git_finds_one(tmp_path: Path) -> None:
    """The check before asking git (it spares a short run a process) agrees with git itself: a repository's top, a
    directory inside it, a linked work tree (its ``.git`` is a file), and a directory in no repository."""
    project = repository(tmp_path)
    (project / "src" / "deep").mkdir()
    git(project, "worktree", "add", "-q", str(tmp_path / "linked"))
    outside = tmp_path / "plain" / "dir"
    outside.mkdir(parents=True)
    for place, expected in [
        (project, True),
        (project / "src" / "deep", True),
        (tmp_path / "linked", True),
        (outside, False),
    ]:
        asked = subprocess.run(["git", "-C", str(place), "rev-parse", "--show-toplevel"], capture_output=True)
        assert (asked.returncode == 0) is expected, place
        assert in_work_tree(place) is expected, place
        assert (await changed_paths(place) is not None) is expected, place
