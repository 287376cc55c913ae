"""``muster a2a list | call``: the remote Agent2Agent agents the service offers as tools."""

from __future__ import annotations

import argparse
import sys

from muster_api.commands.console.output import Cell, Output
from muster_api.commands.console.text import inert, lines
from muster_api.errors import CommandError
from muster_client import MusterClient


def list_agents(args: argparse.Namespace, out: Output) -> int:
    with MusterClient(args.url) as client:
        agents = client.a2a_agents()
    if out.as_json:
        out.json(agents)
        return 0
    if not agents.agents:
        out.line("no remote agent is configured (the `agents` block of muster.toml)", "dim")
        return 0
    rows: list[list[Cell]] = [
        [
            (inert(a.name), "bold"),
            (inert(a.status), "green" if a.status == "ok" else "bold red"),
            inert(a.dialect),
            (inert(", ".join(t.name for t in a.tools)), "cyan"),
            (inert(a.error), "red"),
        ]
        for a in agents.agents
    ]
    out.table(("agent", "status", "dialect", "tools", "last error"), rows)
    return 0


def call(args: argparse.Namespace, out: Output) -> int:
    task = sys.stdin.read() if args.task == "-" else args.task
    with MusterClient(args.url) as client, out.waiting(f"calling {inert(args.tool)}…"):
        result = client.a2a_call(args.tool, task)
    if out.as_json:
        out.json(result)
    else:
        for text in lines(result.text):
            out.line(text, "red" if result.is_error else "")
    if result.is_error:
        raise CommandError(f"{inert(args.tool)} answered an error (call {result.call_id}, state {result.state})")
    return 0
