"""All configured agents, resolved concurrently with failures isolated; collision-free tool names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import httpx

from muster_a2a.agent import RemoteAgent, Tool, make_http_client, remote_agent
from muster_a2a.cards import CardCache
from muster_a2a.config import parse_agents_config
from muster_a2a.errors import UnknownToolError
from muster_a2a.models import AgentDescriptor, AgentStatus, Collision, ToolInfo
from muster_a2a.naming import unique


class AgentSet:
    """The agents (ordered by configured name), their tools, per-agent status and the name collisions.

    It owns one HTTP client shared by all its agents: close it with ``aclose()`` (or ``async with``).
    """

    def __init__(
        self,
        agents: list[RemoteAgent],
        *,
        http: httpx.AsyncClient | None = None,
        skipped: Mapping[str, str] | None = None,
    ) -> None:
        self.agents = agents
        self.skipped = dict(skipped or {})
        self._http = http
        self.tools: list[Tool] = []
        self.collisions: list[Collision] = []
        owners: dict[str, str] = {}
        for agent in agents:
            for tool in agent.tools:
                if tool.name in owners:
                    new_name = unique(tool.name, owners)
                    self.collisions.append(
                        Collision(name=tool.name, agent=agent.name, kept_by=owners[tool.name], renamed_to=new_name)
                    )
                    tool = tool.renamed(new_name)
                owners[tool.name] = agent.name
                self.tools.append(tool)
        self._by_name = {tool.name: tool for tool in self.tools}

    @property
    def status(self) -> dict[str, AgentStatus]:
        out: dict[str, AgentStatus] = {}
        for agent in self.agents:
            tools = [
                ToolInfo(name=t.name, description=t.description, input_schema=t.input_schema, skill=t.skill)
                for t in self.tools
                if t.agent is agent
            ]
            out[agent.name] = AgentStatus(
                name=agent.name,
                status="ok" if agent.ok else "error",
                error=agent.error,
                dialect=agent.dialect,
                endpoint=agent.endpoint,
                card_name=agent.card.name if agent.card is not None else None,
                tools=tools,
            )
        return out

    def tool(self, name: str) -> Tool:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownToolError(name, sorted(self._by_name)) from None

    def agent(self, name: str) -> RemoteAgent | None:
        return next((a for a in self.agents if a.name == name), None)

    @property
    def closed(self) -> bool:
        """Its HTTP client is closed (a set that owns none is never closed)."""
        return self._http is not None and self._http.is_closed

    async def aclose(self) -> None:
        if self._http is not None and not self._http.is_closed:
            await self._http.aclose()

    async def __aenter__(self) -> AgentSet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def load_agents(
    config: Mapping[str, Any] | Sequence[AgentDescriptor],
    *,
    card_cache: CardCache | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> AgentSet:
    """Resolve every descriptor (the ``agents`` block of ``config``, or descriptors) concurrently; a failing agent
    is reported in ``status`` and never affects the others."""
    if isinstance(config, Mapping):
        parsed = parse_agents_config(config)
        descriptors: list[AgentDescriptor] = list(parsed)
        skipped = parsed.skipped
    else:
        descriptors = sorted(config, key=lambda d: d.name)
        skipped = {}
    longest = max((d.timeout for d in descriptors), default=0)
    http = http_client or make_http_client(longest or 300_000)
    results: list[RemoteAgent | None] = [None] * len(descriptors)

    async def resolve(index: int, descriptor: AgentDescriptor) -> None:
        results[index] = await remote_agent(
            descriptor.card,
            name=descriptor.name,
            headers=descriptor.headers,
            timeout=descriptor.timeout,
            poll_every=descriptor.poll_every,
            allow_hosts=descriptor.allow_hosts,
            allow_http=descriptor.allow_http,
            http_client=http,
            card_cache=card_cache,
        )

    async with anyio.create_task_group() as group:
        for index, descriptor in enumerate(descriptors):
            group.start_soon(resolve, index, descriptor)
    agents = [agent for agent in results if agent is not None]
    return AgentSet(agents, http=http if http_client is None else None, skipped=skipped)
