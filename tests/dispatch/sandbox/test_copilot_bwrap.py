"""A real Copilot CLI turn in bubblewrap: the package unpacked beside the pinned install is read-only there, and the
turn still completes with its own tools."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from muster_dispatch import BwrapProvider, cli_agent, copilot_harness
from tests.dispatch.cli.support import run_turn
from tests.dispatch.fakes.anthropic import FakeAnthropic
from tests.dispatch.fakes.plans import Reply, ToolCall

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)"
    ),
]


async def test_copilot_completes_in_bwrap_with_its_own_tools(
    copilot_cli: Path, fake_anthropic: FakeAnthropic, workspace: Path, tmp_path: Path
) -> None:
    fake_anthropic.script.plan(
        Reply(tool=ToolCall(name="bash", arguments={"command": "touch made-by-bash.txt && echo made"})),
        Reply(text="Finished."),
    )
    variables = {
        "COPILOT_PROVIDER_TYPE": "anthropic",
        "COPILOT_PROVIDER_BASE_URL": fake_anthropic.url,
        "COPILOT_PROVIDER_API_KEY": "sk-ant-test-key",
        "COPILOT_MODEL": "claude-sonnet-4-5",
    }
    # The fake model listens on the host's loopback: the sandbox reaches it only through its egress proxy.
    provider = BwrapProvider(tmp_path / "homes")

    turn = await run_turn(cli_agent(copilot_harness(), variables=variables), "Touch", workspace, provider)

    assert turn.result.status == "completed", turn.result.error
    assert turn.result.text == "Finished."
    assert (workspace / "made-by-bash.txt").exists()
    assert [r.code for r in turn.of("tool_result")] == [None]
    assert not list((tmp_path / "homes").rglob(".cache/copilot"))  # nothing unpacked into the private home
