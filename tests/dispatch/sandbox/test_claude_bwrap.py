"""A real Claude Code turn in bubblewrap: it completes and its own tools (Write, Bash) work in the workspace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from muster_dispatch import BwrapProvider
from tests.dispatch.cli.support import claude_agent, run_turn
from tests.dispatch.conftest import InstalledClis
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)"
    ),
]


async def test_claude_completes_in_bwrap_with_its_own_tools(
    installed_clis: InstalledClis, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    target = workspace.resolve() / "hello.txt"
    fake_anthropic.script.plan(
        Reply(tool=ToolCall(name="Write", arguments={"file_path": str(target), "content": "hello\n"})),
        Reply(tool=ToolCall("touch made-by-bash.txt && echo made", call_id="call_2")),
        Reply(text="Finished."),
    )
    agent = claude_agent(installed_clis.claude, fake_anthropic.url)
    # The fake model listens on the host's loopback: this sandbox shares the host's network.
    provider = BwrapProvider(tmp_path / "homes", egress="open")

    turn = await run_turn(agent, "Create hello.txt", workspace, provider)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Finished."
    assert target.read_text() == "hello\n"
    assert (workspace / "made-by-bash.txt").exists()
    assert [r.code for r in turn.of("tool_result")] == [None, None]
