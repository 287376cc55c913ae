"""``muster run AGENT PROMPT [--follow]`` and ``muster runs``: turns of work dispatched by the service.

A followed run is read from its SSE stream (``/dispatch/runs/{id}/events``) as it happens: on a terminal with a
spinner while the agent works, its text as it comes and its usage at the end; piped as plain lines; with ``--json``
one event per line and the run last.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from muster_api.commands.console.output import Cell, Output
from muster_api.commands.console.text import duration, inert, lines
from muster_api.errors import CommandError
from muster_client import MusterClient
from muster_client.calls import Call, given

FINISHED_BADLY = frozenset({"failed", "cancelled", "interrupted"})
STATUS_STYLE = {"completed": "green", "failed": "bold red", "interrupted": "red", "cancelled": "dim"}
DEFAULT_WORKSPACE = "default"


def _object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise CommandError("the service answered something other than a run")
    return data


def _seconds(run: dict[str, Any]) -> float | None:
    if not run.get("started_at") or not run.get("finished_at"):
        return None
    return (datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["started_at"])).total_seconds()


def usage_text(usage: dict[str, Any] | None) -> str:
    if not usage:
        return ""
    cost = f" · ${usage['cost_usd']}" if usage.get("cost_usd") else ""
    return f"{usage.get('input', 0)} in · {usage.get('output', 0)} out{cost}"


def _row(run: dict[str, Any]) -> list[Cell]:
    seconds = _seconds(run)
    error = run.get("error") or {}
    prompt = inert(str(run.get("prompt", "")).split("\n")[0])
    return [
        (inert(run["id"]), "bold"),
        (inert(run["status"]), STATUS_STYLE.get(run["status"], "yellow")),
        inert(run.get("selected") or run.get("agent")),
        "" if seconds is None else duration(seconds),
        usage_text(run.get("usage")),
        (inert(error.get("code", "")), "red"),
        prompt[:60] + ("…" if len(prompt) > 60 else ""),
    ]


def list_runs(args: argparse.Namespace, out: Output) -> int:
    params = given(agent=args.agent, status=args.status, limit=args.limit)
    with MusterClient(args.url) as client:
        page = client.call(Call("GET", "/dispatch/runs", _object, params=params))
    if out.as_json:
        out.json(page)
    elif page["runs"]:
        out.table(("run", "status", "agent", "duration", "usage", "error", "prompt"), [_row(r) for r in page["runs"]])
    else:
        out.line("no run yet", "dim")
    return 0


def _detail(event: dict[str, Any]) -> str:
    text = event.get("text") or event.get("message") or event.get("name") or ""
    return str(text)


def _show_event(out: Output, kind: str, observation: dict[str, Any]) -> None:
    if out.as_json:
        out.json(observation)
        return
    if kind in ("turn.input", "turn.result", "usage"):
        return  # the prompt was given here, the result is shown at the end
    detail = _detail(observation.get("event") or {})
    if out.rich:
        style = "red" if kind in ("failure", "error") else ("dim" if kind not in ("text", "text_delta") else "")
        prefix = "" if kind in ("text", "text_delta") else f"[{kind}] "
        for text in lines(detail) if detail else [f"{inert(kind)}"]:
            out.line(prefix + text, style)
    else:
        for text in lines(detail) or [""]:
            out.line(f"{observation.get('seq', '')} {inert(kind)} {text}".rstrip())


def _finish(out: Output, run: dict[str, Any]) -> int:
    if out.as_json:
        out.json(run)
    else:
        seconds = _seconds(run)
        facts = [inert(run["status"])]
        if seconds is not None:
            facts.append(duration(seconds))
        if run.get("usage"):
            facts.append(usage_text(run["usage"]))
        mark = "✓" if run["status"] == "completed" else "✗"
        out.line(f"{mark} run {inert(run['id'])} " + " · ".join(facts), STATUS_STYLE.get(run["status"], "bold"))
    error = run.get("error")
    if run["status"] in FINISHED_BADLY:
        reason = f"{inert(error.get('code'))}: {inert(error.get('message'))}" if error else run["status"]
        raise CommandError(f"run {run['id']} ended {run['status']} ({reason})")
    return 0


def follow(out: Output, client: MusterClient, run: dict[str, Any]) -> int:
    agent = inert(run.get("agent"))
    with out.waiting(f"{agent} is working on run {inert(run['id'])}…"):
        for event in client.run_events(run["id"]):
            if event.type == "result":
                return _finish(out, event.data)
            _show_event(out, event.type, event.data)
    raise CommandError(f"the event stream of run {run['id']} ended before its result: `muster runs` shows its state")


def start_run(args: argparse.Namespace, out: Output) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    body = {"agent": args.agent, "prompt": prompt, "workspace": args.workspace}
    with MusterClient(args.url) as client:
        run = client.call(Call("POST", "/dispatch/runs", _object, body=body))
        if args.follow:
            if not out.as_json:
                out.line(f"workspace {inert(run['workspace'])}: {inert(run.get('workspace_path'))}", "dim")
            return follow(out, client, run)
    if out.as_json:
        out.json(run)
    else:
        out.line(f"queued run {inert(run['id'])} on {inert(run['agent'])}", "bold")
        out.line(f"  workspace {inert(run['workspace'])}: {inert(run.get('workspace_path'))}", "dim")
        out.line(f"  follow it: muster run … --follow, or the dashboard at {client.url}/#/runs/{run['id']}", "dim")
    return 0
