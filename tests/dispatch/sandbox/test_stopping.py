"""A turn in bubblewrap stopped by its deadline or a cancel leaves no process of the run, tools in their own session
included (the pid namespace dies with its first process)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from muster_dispatch import AgentInput, BwrapProvider, claude_harness, cli_agent, dispatch
from tests.dispatch.cli.support import new_marker, processes_with

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)"
    ),
]

# Starts a tool in its own session and a child, says so, then waits for ever.
SCRIPT = """#!/bin/sh
setsid sleep 300 &
sleep 301 &
echo '{"type":"system","subtype":"init","session_id":"s-stop"}'
wait
"""


def _agent(tmp_path: Path, marker: dict[str, str]) -> object:
    cli = tmp_path / "bin" / "fake-claude"
    cli.parent.mkdir()
    cli.write_text(SCRIPT, encoding="utf-8")
    cli.chmod(0o755)
    return cli_agent(claude_harness(executable=cli), variables=marker)


async def _gone(marker: dict[str, str]) -> list[int]:
    """The run's processes still alive once the kill had time to land (signal delivery is asynchronous)."""
    for _ in range(250):
        left = processes_with(marker)
        if not left:
            return left
        await asyncio.sleep(0.02)
    return processes_with(marker)


@pytest.mark.parametrize("stop", ["deadline", "cancel"])
async def test_a_stopped_turn_leaves_no_process(stop: str, tmp_path: Path) -> None:
    marker = new_marker()
    (tmp_path / "ws").mkdir()
    running = dispatch(
        _agent(tmp_path, marker),  # type: ignore[arg-type]
        AgentInput("wait"),
        workspace=tmp_path / "ws",
        provider=BwrapProvider(tmp_path / "homes"),
        deadline=2 if stop == "deadline" else 60,
    )
    async for event in running:
        if event.type == "conversation":
            assert len(processes_with(marker)) >= 3  # the shell and both sleeps are running
            if stop == "cancel":
                await running.cancel()
            break
    result = await running.result()
    assert result.status == ("failed" if stop == "deadline" else "canceled")
    assert result.error is not None and result.error.code == ("timeout" if stop == "deadline" else "aborted")
    assert await _gone(marker) == []
