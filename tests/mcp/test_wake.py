"""Herdr auto-wake by ``muster mcp``: a fake ``herdr`` on PATH records its argv. The exact fixed text with the
unread count, one wake for a burst, at most one wake per interval, none for an empty inbox, the pane id absent
from every request the service received (a recording proxy stands between the MCP server and the service)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from muster_client import AsyncMusterClient
from tests.client.support import API_KEY
from tests.mcp.proxy import recording_proxy
from tests.mcp.support import call, fail, mcp_agent
from tests.mesh.support import ServerProcess

# Slow: `muster mcp` processes.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PANE = "herdr-pane-5e1f"
INTERVAL = 5.0
SETTLE = 1.0
END = "--end-of-wake--"


def fake_herdr(directory: Path) -> Path:
    """A ``herdr`` (a shell script: it starts in milliseconds, so the time it records is the wake's) that appends
    the time and its arguments, one per line, to ``wakes.log``."""
    directory.mkdir()
    log = directory / "wakes.log"
    script = directory / "herdr"
    script.write_text(
        f"#!/bin/sh\n{{ date +%s.%N; for arg in \"$@\"; do printf '%s\\n' \"$arg\"; done; echo {END}; }} >> '{log}'\n"
    )
    script.chmod(0o755)
    return log


def wakes(log: Path) -> list[dict[str, Any]]:
    """Each complete record: ``{"at": seconds, "argv": [...]}``."""
    if not log.exists():
        return []
    records: list[dict[str, Any]] = []
    lines: list[str] = []
    for line in log.read_text(encoding="utf-8").splitlines():
        if line != END:
            lines.append(line)
            continue
        records.append({"at": float(lines[0]), "argv": lines[1:]})
        lines = []
    return records


async def wake_number(log: Path, n: int) -> dict[str, Any]:
    with anyio.fail_after(60):
        while len(seen := wakes(log)) < n:
            await anyio.sleep(0.05)
    return seen[n - 1]


def text(count: int) -> str:
    return f"[auto-wake #2540] Hay {count} mensajes de Agent Mesh; llamá agent_inbox"


async def test_herdr_wake(service: ServerProcess, tmp_path: Path, name: str) -> None:
    log = fake_herdr(tmp_path / "bin")
    reader, sender = f"{name}-reader", f"{name}-sender"
    herdr_env = {
        "HERDR_ENV": "1",
        "HERDR_PANE_ID": PANE,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "MUSTER_MCP_WAKE_INTERVAL_SECONDS": str(INTERVAL),
        "MUSTER_MCP_WAKE_SETTLE_SECONDS": str(SETTLE),
    }
    async with (
        recording_proxy(service.base_url) as proxy,
        mcp_agent(proxy.base, tmp_path / "state", **herdr_env) as agent,
        AsyncMusterClient(service.base_url, api_key=API_KEY) as peer,
    ):
        refused = await fail(agent, "agent_checkin", agent_id=reader, herdr_pane="someone-elses-pane", confirm=True)
        assert "must be your own pane id" in refused
        joined = await call(agent, "agent_checkin", agent_id=reader, herdr_pane=PANE, confirm=True)
        assert "Auto-wake is on" in joined
        await peer.checkin(sender, confirm=True)
        active_at = (await peer.agent(reader)).last_activity
        assert active_at is not None, "the check-in is the agent's activity"

        burst_ids: list[str | None] = []

        async def send_one(i: int) -> None:
            answer = await peer.send(f"burst {i}", to=reader, confirm=True)
            burst_ids.append(getattr(answer, "message_id", None))

        async with anyio.create_task_group() as burst:
            for i in range(3):
                burst.start_soon(send_one, i)
        first = await wake_number(log, 1)
        assert first["argv"] == ["agent", "prompt", PANE, text(3)], "one wake for the burst, with its count"
        for message_id in burst_ids:
            assert message_id is not None
            (receipt,) = (await peer.receipts(message_id)).receipts
            assert receipt.woken_at is not None and receipt.woken_at >= receipt.stored_at, "the pane was woken"
            assert receipt.read_at is None, "counted for the wake, not read: the agent has not seen it yet"
        assert (await peer.agent(reader)).last_activity == active_at, "neither the follower nor the wake is activity"
        backlog = await peer.backlog()
        assert [b.unread for b in backlog.agents if b.agent_id == reader] == [3]
        assert "burst" not in backlog.model_dump_json(), "a peer sees the count, never a body"

        await peer.send("one more", to=reader, confirm=True)
        second = await wake_number(log, 2)
        assert second["argv"][-1] == text(4), "unread, not fetched: counted again"
        # Without the limit it would come one settle after the message (about 1 s); the slack absorbs scheduling.
        assert second["at"] - first["at"] >= INTERVAL - 1.0, "at most one wake per interval"

        assert (await peer.agent(reader)).last_activity == active_at, "the second wake is not activity either"

        # Fetched while the next wake is held back: when the hold ends the inbox is empty, so no wake.
        await peer.send("read before the wake", to=reader, confirm=True)
        assert "5 new message(s)" in await call(agent, "agent_inbox")
        for message_id in burst_ids:
            assert message_id is not None
            (receipt,) = (await peer.receipts(message_id)).receipts
            assert receipt.read_at is not None, "agent_inbox returned it: now it is read"
        assert (await peer.agent(reader)).last_activity != active_at, "agent_inbox is the agent's activity"
        hold_ends = second["at"] + INTERVAL + SETTLE
        while time.time() < hold_ends:
            await anyio.sleep(0.1)
        await peer.send("after the hold", to=reader, confirm=True)
        third = await wake_number(log, 3)
        assert third["argv"][-1] == text(1)
        assert [w["argv"][-1] for w in wakes(log)] == [text(3), text(4), text(1)], "no wake for an empty inbox"

    assert any("/mesh/inbox/stream" in r for r in proxy.requests), "the MCP server followed its inbox via the proxy"
    assert PANE not in proxy.everything(), "the pane id never reaches the service"


async def test_herdr_missing_is_a_warning(service: ServerProcess, tmp_path: Path, name: str) -> None:
    env = {"HERDR_ENV": "1", "HERDR_PANE_ID": PANE, "PATH": str(tmp_path / "empty")}
    async with mcp_agent(service.base_url, tmp_path / "state", **env) as agent:
        joined = await call(agent, "agent_checkin", agent_id=name, herdr_pane=PANE, confirm=True)
        assert joined.startswith(f"Checked in as {name}")
        assert "Warning: auto-wake is off: the herdr command is not on this MCP server's PATH." in joined
        assert "No new messages" in await call(agent, "agent_inbox"), "the server goes on serving"
