"""Path claims enforced inside the REAL Claude Code CLI: its PreToolUse hook (``muster hook claude``, written into the
project's .claude/settings.json by ``muster hook install claude``) asks a real Muster server whether another agent
holds the file exclusively. The fake model asks for an ``Edit``: on a held file Claude Code refuses it, the file is
unchanged and the model's next request carries the hook's reason naming the holder and their reason; on an unclaimed
file the same edit lands."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from muster_dispatch import local_provider
from tests.dispatch.cli.claims_support import MUSTER_BIN, REASON, claimed_server, project_repo
from tests.dispatch.cli.support import claude_agent, run_turn, user_texts
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.plans import Reply, ToolCall
from tests.mesh.support import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


@pytest.fixture
def project(workspace: Path) -> Path:
    return project_repo(workspace / "project")


@pytest.fixture
def server(db_url: str) -> Iterator[ServerProcess]:
    with claimed_server(db_url) as running:
        yield running


def install_hook(project: Path, url: str) -> None:
    subprocess.run(
        [
            f"{MUSTER_BIN}/muster",
            "hook",
            "install",
            "claude",
            "--project",
            str(project),
            "--as",
            "editor",
            "--url",
            url,
        ],
        check=True,
        capture_output=True,
    )


def edit(path: Path) -> Reply:
    arguments = {"file_path": str(path), "old_string": "VERSION = 1", "new_string": "VERSION = 2"}
    return Reply(tool=ToolCall(name="Edit", arguments=arguments))


async def test_the_hook_refuses_an_edit_of_a_held_file_and_allows_an_unclaimed_one(
    installed_clis: InstalledClis,
    fake_anthropic: FakeAnthropic,
    project: Path,
    server: ServerProcess,
    tmp_path: Path,
) -> None:
    install_hook(project, server.base_url)
    path_var = f"{MUSTER_BIN}:{os.environ.get('PATH', os.defpath)}"
    agent = claude_agent(installed_clis.claude, fake_anthropic.url, extra={"PATH": path_var})
    held, free = project / "src" / "store.py", project / "README.md"
    fake_anthropic.script.plan(edit(held), Reply(text="The store is held by holder."))

    turn = await run_turn(agent, "Bump the version in src/store.py", project, local_provider(tmp_path / "sb"))

    assert turn.result.status == "completed", turn.result.error
    assert held.read_text() == "VERSION = 1\n"
    _, after_edit = fake_anthropic.script.model_requests()
    refused = "\n".join(user_texts(after_edit))
    assert "'holder'" in refused and REASON in refused and "src/**" in refused
    assert turn.of("file_change") == []

    fake_anthropic.script.reset(edit(free), Reply(text="Bumped."))
    turn = await run_turn(agent, "Bump the version in README.md", project, local_provider(tmp_path / "sb2"))

    assert turn.result.status == "completed", turn.result.error
    assert free.read_text() == "VERSION = 2\n"
    _, after_edit = fake_anthropic.script.model_requests()
    assert "holder" not in "\n".join(user_texts(after_edit))
