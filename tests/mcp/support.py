"""``muster mcp`` driven by the official ``mcp`` client SDK over stdio, against a live service."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, TextContent

from tests.client.support import API_KEY

MUSTER = str(Path(sys.executable).with_name("muster"))


def mcp_env(url: str, state: Path, **extra: str) -> dict[str, str]:
    return {
        "MUSTER_URL": url,
        "MUSTER_API_KEY": API_KEY,
        "XDG_STATE_HOME": str(state),
        "MUSTER_MCP_WAKE_SETTLE_SECONDS": "0.3",
        **extra,
    }


@asynccontextmanager
async def mcp_agent(url: str, state: Path, **extra: str) -> AsyncIterator[Client]:
    """A ``muster mcp`` process (the installed console script), as an MCP host would start it."""
    params = StdioServerParameters(command=MUSTER, args=["mcp"], env=mcp_env(url, state, **extra))
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


def said(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> str:
    """The text of a successful call (fails the test on a tool error)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, said(result)
    return said(result)


async def fail(client: Client, tool: str, **arguments: Any) -> str:
    """The text of a call that must be a tool error."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, said(result)
    return said(result)
