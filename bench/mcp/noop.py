"""An MCP server with one tool that does nothing, for the benchmark's floor: what any tool call costs through the
mcp SDK over stdio (the client SDK, the pipe, the server SDK) before the tool does any work.

It is served as ``muster mcp`` is (the SDK's low-level server, no per-message tracing middleware, the same stdio
transport, the same event loop), so the difference between a Muster tool and this one is Muster's own work: the
HTTP call to the service and the answer in words.

Run by bench/mcp/run.py: python bench/mcp/noop.py
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from muster_api.mcp.server import loop_options
from muster_api.mcp.stdio import stdio_streams

NOOP = types.Tool(name="noop", description="Does nothing.", input_schema={"type": "object", "properties": {}})


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[NOOP])


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text="ok")])


async def main() -> None:
    server: Server[Any] = Server("noop", on_list_tools=list_tools, on_call_tool=call_tool)
    server.middleware = []
    async with stdio_streams() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main, backend_options=loop_options())
