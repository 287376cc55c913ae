"""The MCP wiring: a low-level ``mcp`` server (it publishes the tools' schemas exactly as written) on stdio.

tools/list: the five mesh tools and the two dispatch tools, then one tool per tool of the service's configured
remote A2A agents (asked of the service at each listing; a service that is down leaves our own tools only).
tools/call: the tool's handler; what it raises becomes a tool error (``isError``).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from muster_api import __version__
from muster_api.commands.eventloop import loop_options
from muster_api.mcp import handlers, tools
from muster_api.mcp.bound import BoundIdentity
from muster_api.mcp.session import AgentSession
from muster_api.mcp.settings import McpSettings
from muster_api.mcp.stdio import stdio_streams
from muster_client import A2ATool, AsyncMusterClient, MusterClientError

log = logging.getLogger("muster.mcp")

INSTRUCTIONS = (
    "Muster: a mesh of coding agents. Check in first (agent_checkin with your agent_id, then again with confirm: "
    "true), keep your status current, see the others with agents_list, talk with agent_send and read agent_inbox. "
    "Remote A2A agents appear as tools taking {task}."
)


def text(body: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=body)], is_error=error)


class MusterTools:
    """The tools of one MCP server process, over one agent session."""

    def __init__(self, session: AgentSession) -> None:
        self.session = session
        self.a2a: dict[str, A2ATool] = {}

    async def remote_tools(self) -> list[A2ATool]:
        try:
            listing = await self.session.client.a2a_agents()
        except MusterClientError as exc:
            log.warning("remote A2A tools not listed: %s", exc)
            return []
        found = [t for t in listing.tools() if t.name not in tools.OWN_TOOLS]
        self.a2a = {t.name: t for t in found}
        return found

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        mesh = [
            types.Tool(name=name, description=about, input_schema=schema)
            for name, (about, schema) in tools.OWN_SCHEMAS.items()
        ]
        remote = [
            types.Tool(
                name=t.name,
                description=f"{t.description} — a remote A2A agent, called through Muster. When it asks for more "
                "input, its answer says how to reply on the same task.",
                input_schema=tools.A2A_SCHEMA,
            )
            for t in await self.remote_tools()
        ]
        return types.ListToolsResult(tools=[*mesh, *remote])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, arguments = params.name, params.arguments or {}
        if name not in handlers.SEEN_AS_ACTIVITY:
            self.session.note_activity()
        try:
            if name in handlers.MESH_HANDLERS:
                return text(await handlers.MESH_HANDLERS[name](self.session, arguments))
            if name not in self.a2a:
                await self.remote_tools()
            if name in self.a2a:
                body, error = await handlers.call_a2a(self.session, name, arguments)
                return text(body, error=error)
        except Exception as exc:
            return text(handlers.failure(name, exc, self.session.client.url), error=True)
        return text(f"No tool named {name!r}: list the tools again to see the ones offered now.", error=True)


def build_server(muster: MusterTools) -> Server[Any]:
    server: Server[Any] = Server(
        "muster",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=muster.list_tools,
        on_call_tool=muster.call_tool,
    )
    # The SDK's default middleware opens an OpenTelemetry span per message; nothing here exports them.
    server.middleware = []
    return server


async def serve(settings: McpSettings) -> None:
    """Serve MCP on stdin/stdout until the host closes stdin; then acknowledge what was delivered and stop."""
    bound = BoundIdentity.load(settings.mcp_identity_file) if settings.mcp_identity_file else None
    url, api_key = (bound.url, bound.api_key) if bound else (settings.url, settings.api_key)
    async with (
        AsyncMusterClient(url, api_key=api_key) as client,
        anyio.create_task_group() as group,
    ):
        session = AgentSession(settings, client, group)
        if bound is not None:
            session.bind(bound.agent_id, bound.token)
        server = build_server(MusterTools(session))
        async with stdio_streams() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        session.stop_wake()
        with anyio.move_on_after(5, shield=True):
            try:
                await session.flush()
            except MusterClientError as exc:
                log.warning("messages returned last were not acknowledged: %s", exc)
        group.cancel_scope.cancel()


def main(settings: McpSettings | None = None) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="muster mcp: %(levelname)s %(message)s")
    anyio.run(serve, settings or McpSettings(), backend_options=loop_options())
    return 0
