"""A real Gemini CLI turn in bubblewrap: it completes and its own tools (write_file, the shell) work in the
workspace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from muster_dispatch import BwrapProvider
from tests.dispatch.cli.support import gemini_agent, run_turn
from tests.dispatch.fakes.gemini import FakeGemini
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)"
    ),
]


async def test_gemini_completes_in_bwrap_with_its_own_tools(
    gemini_cli: Path, fake_gemini: FakeGemini, workspace: Path, tmp_path: Path
) -> None:
    target = workspace.resolve() / "hello.txt"
    fake_gemini.script.plan(
        Reply(tool=ToolCall(name="write_file", arguments={"file_path": str(target), "content": "hello\n"})),
        Reply(tool=ToolCall("touch made-by-shell.txt && echo made")),
        Reply(text="Finished."),
    )
    # The fake model listens on the host's loopback: the sandbox reaches it only through its egress proxy.
    provider = BwrapProvider(tmp_path / "homes")

    turn = await run_turn(gemini_agent(gemini_cli, fake_gemini.url), "Create hello.txt", workspace, provider)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Finished."
    assert target.read_text() == "hello\n"
    assert (workspace / "made-by-shell.txt").exists()
    assert [r.code for r in turn.of("tool_result")] == [None, None]
