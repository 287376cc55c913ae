"""``muster agents [--watch]``: the directory as a table, with the unread backlog of each agent."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.live import Live

from muster_api.commands.console.output import Cell, Output
from muster_api.commands.console.text import STALE_HEARTBEAT_SECONDS, STALE_STATUS_SECONDS, duration, inert
from muster_client import AgentView, DirectoryQuery, MusterClient

PAGE = 500
WATCH_SECONDS = 2.0
HEADERS = ("agent", "role", "repo", "caps", "status", "state", "status age", "heartbeat", "expires in", "unread")
# How the state reads (muster_mesh.presence); a state a newer service names reads plain.
STATE_STYLES = {"working": "green", "waiting": "blue", "idle": "", "stale": "yellow"}


def fetch(client: MusterClient, args: argparse.Namespace) -> tuple[list[AgentView], dict[str, int]]:
    query = DirectoryQuery(repo=args.repo, role=args.role, cap=args.cap, include_expired=args.all, limit=PAGE)
    page, backlog = client.agents(query), client.backlog(query)
    return page.agents, {entry.agent_id: entry.unread for entry in backlog.agents}


def _row(agent: AgentView, unread: int) -> list[Cell]:
    stale = agent.status_age_seconds > STALE_STATUS_SECONDS or agent.heartbeat_age_seconds > STALE_HEARTBEAT_SECONDS
    dim = "" if agent.alive else "dim"
    left = (agent.expires_at - agent.last_seen_at).total_seconds() - agent.heartbeat_age_seconds
    return [
        (inert(agent.agent_id), dim or "bold"),
        (inert(agent.role), dim),
        (inert(agent.repo), dim),
        (inert(",".join(agent.caps)), dim or "cyan"),
        (inert(agent.status) + (" [stale]" if stale and agent.alive else ""), dim or ("yellow" if stale else "")),
        _state(agent, dim),
        (duration(agent.status_age_seconds), dim),
        (duration(agent.heartbeat_age_seconds) + " ago", dim),
        ("expired" if not agent.alive else duration(left), dim or ("red" if left < 60 else "")),
        (str(unread), dim or ("bold blue" if unread else "")),
    ]


def _state(agent: AgentView, dim: str) -> Cell:
    if agent.state is None or agent.last_activity is None:
        return ("", dim)
    quiet = agent.heartbeat_age_seconds + (agent.last_seen_at - agent.last_activity).total_seconds()
    return (f"{inert(agent.state)} · {duration(quiet)} ago", dim or STATE_STYLES.get(agent.state, ""))


def rows(agents: list[AgentView], unread: dict[str, int]) -> list[list[Cell]]:
    return [_row(agent, unread.get(agent.agent_id, 0)) for agent in agents]


def as_json(agents: list[AgentView], unread: dict[str, int]) -> dict[str, Any]:
    return {"agents": [a.model_dump(mode="json") | {"unread": unread.get(a.agent_id, 0)} for a in agents]}


def _fingerprint(agents: list[AgentView], unread: dict[str, int]) -> tuple[Any, ...]:
    # What a piped --watch reprints on: a change in the directory, not the ages ticking.
    seen = tuple((a.agent_id, a.status, a.role, a.repo, tuple(a.caps), a.alive, a.expires_at, a.state) for a in agents)
    return (seen, tuple(sorted(unread.items())))


def show(out: Output, agents: list[AgentView], unread: dict[str, int]) -> None:
    if out.as_json:
        out.json(as_json(agents, unread))
    elif agents:
        out.table(HEADERS, rows(agents, unread))
    else:
        out.line("no agent is checked in", "dim")


def watch(out: Output, client: MusterClient, args: argparse.Namespace) -> None:
    """Until interrupted: on a terminal, one table redrawn in place; piped, a new snapshot whenever it changes."""
    if out.rich:
        with Live(console=out.console, auto_refresh=False) as live:
            while True:
                agents, unread = fetch(client, args)
                title = f"{len(agents)} agent(s) · every {WATCH_SECONDS:g}s · Ctrl-C to stop"
                live.update(out.rich_table(HEADERS, rows(agents, unread), title=title), refresh=True)
                time.sleep(WATCH_SECONDS)
    last: tuple[Any, ...] | None = None
    while True:
        agents, unread = fetch(client, args)
        if _fingerprint(agents, unread) != last:
            last = _fingerprint(agents, unread)
            if not out.as_json:
                out.line(f"-- {time.strftime('%H:%M:%S')}")
            show(out, agents, unread)
        time.sleep(WATCH_SECONDS)


def run(args: argparse.Namespace, out: Output, client: MusterClient) -> int:
    if args.watch:
        watch(out, client, args)
    show(out, *fetch(client, args))
    return 0
