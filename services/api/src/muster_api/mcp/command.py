"""``muster mcp``: registered by the CLI; imports the MCP server only when run (the other commands stay quick)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "mcp",
        help="serve the Muster tools to a coding agent over MCP (stdio)",
        description="The MCP server (stdio) of the mesh tools and the remote A2A agents. Environment: MUSTER_URL, "
        "MUSTER_API_KEY, MUSTER_AGENT_ID, MUSTER_MCP_WAKE_INTERVAL_SECONDS, MUSTER_MCP_STATE_DIR.",
    )
    parser.set_defaults(fn=run)


def run(_args: argparse.Namespace) -> int:
    from muster_api.mcp.server import main

    return main()
