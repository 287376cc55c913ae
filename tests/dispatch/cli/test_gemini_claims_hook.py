"""Path claims enforced inside the REAL Gemini CLI: its BeforeTool hook (``muster hook gemini``, merged into the
project's .gemini/settings.json by ``muster hook install gemini``) asks a real Muster server whether another agent
holds the file a ``write_file`` or ``replace`` names. The fake model asks for a ``replace``: on a held file Gemini CLI
refuses it, the file is unchanged and the model's next request carries the hook's reason naming the holder and their
reason; on an unclaimed file the same edit lands, and a ``write_file`` of a new unclaimed file creates it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from muster_dispatch import local_provider
from tests.dispatch.cli.claims_support import MUSTER_BIN, REASON, claimed_server, project_repo
from tests.dispatch.cli.support import gemini_agent, run_turn
from tests.dispatch.fakes.gemini import FakeGemini, user_texts
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


def install_hook(project: Path, url: str) -> None:
    argv = ["hook", "install", "gemini", "--project", str(project), "--as", "editor", "--url", url]
    subprocess.run([f"{MUSTER_BIN}/muster", *argv], check=True, capture_output=True)


def replace(path: Path) -> Reply:
    arguments = {
        "file_path": str(path),
        "instruction": "Bump the version.",
        "old_string": "VERSION = 1",
        "new_string": "VERSION = 2",
    }
    return Reply(tool=ToolCall(name="replace", arguments=arguments))


async def test_the_hook_refuses_an_edit_of_a_held_file_and_allows_an_unclaimed_one(
    gemini_cli: Path, fake_gemini: FakeGemini, db_url: str, tmp_path: Path
) -> None:
    project = project_repo(tmp_path / "project")
    path_var = f"{MUSTER_BIN}:{os.environ.get('PATH', os.defpath)}"
    agent = gemini_agent(gemini_cli, fake_gemini.url, extra={"PATH": path_var})
    held, free = project / "src" / "store.py", project / "README.md"
    with claimed_server(db_url) as server:
        for _ in range(2):  # idempotent: one hook, whatever the number of installs
            install_hook(project, server.base_url)
        settings = json.loads((project / ".gemini" / "settings.json").read_text())
        (entry,) = settings["hooks"]["BeforeTool"]
        (hook,) = entry["hooks"]
        assert hook["command"] == "muster hook gemini"
        assert hook["env"] == {"MUSTER_AGENT_ID": "editor", "MUSTER_URL": server.base_url}

        fake_gemini.script.plan(replace(held), Reply(text="The store is held by holder."))
        turn = await run_turn(agent, "Bump the version in src/store.py", project, local_provider(tmp_path / "sb"))

        assert turn.result.status == "completed", turn.result.error
        assert held.read_text() == "VERSION = 1\n"
        after_edit = fake_gemini.script.model_requests()[-1]
        refused = "\n".join(user_texts(after_edit))
        assert "'holder'" in refused and REASON in refused and "src/**" in refused, refused[-2000:]

        new_file = project / "docs" / "notes.md"
        write = Reply(tool=ToolCall(name="write_file", arguments={"file_path": "docs/notes.md", "content": "hi\n"}))
        fake_gemini.script.reset(replace(free), write, Reply(text="Bumped."))
        turn = await run_turn(agent, "Bump the version in README.md", project, local_provider(tmp_path / "sb2"))

        assert turn.result.status == "completed", turn.result.error
        assert free.read_text() == "VERSION = 2\n"
        assert new_file.read_text() == "hi\n"
        last = fake_gemini.script.model_requests()[-1]
        assert "holder" not in "\n".join(user_texts(last))
