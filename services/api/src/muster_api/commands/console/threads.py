"""``muster threads`` and ``muster thread ID``: the conversations of the current agent (``--as``), or every one
(``--all``, the overseer's view: the service's API key in ``MUSTER_API_KEY``, or a keyless service on loopback),
shown as inert text."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime

from muster_api.commands.console import session
from muster_api.commands.console.output import Output
from muster_api.commands.console.text import duration, inert, lines
from muster_client import MusterClient
from muster_client.config import service_url

Wrap = Callable[[Callable[[argparse.Namespace, Output], int]], Callable[[argparse.Namespace], int]]


def _client(args: argparse.Namespace) -> MusterClient:
    url = service_url(args.url)
    if args.all:
        return MusterClient(url)
    me = session.load(args.as_agent, url)
    return MusterClient(me.url, token=me.token)


def _view(args: argparse.Namespace) -> str:
    return "all" if args.all else "mine"


def _ago(when: datetime) -> str:
    return duration((datetime.now(UTC) - when).total_seconds())


def list_threads(args: argparse.Namespace, out: Output) -> int:
    with _client(args) as client:
        page = client.threads(view=_view(args), agent=args.agent, limit=args.limit)
    if out.as_json:
        out.json(page)
        return 0
    rows = []
    for t in page.threads:
        last = t.last_message
        first_line = (lines(last.preview) or [""])[0]
        rows.append(
            [
                inert(t.thread_id),
                ", ".join(inert(p) for p in t.participants),
                str(t.messages),
                f"{inert(last.sender)} · {_ago(last.sent_at)} ago",
                first_line + ("…" if last.truncated or len(lines(last.preview)) > 1 else ""),
            ]
        )
    out.table(["thread", "participants", "messages", "last", "says"], rows)
    if page.next_cursor is not None and out.rich:
        out.line(f"more threads: --limit {min(args.limit * 2, 100)}", "dim")
    return 0


def show_thread(args: argparse.Namespace, out: Output) -> int:
    with _client(args) as client:
        page = client.thread(args.thread_id, view=_view(args), agent=args.agent, limit=args.limit)
    if out.as_json:
        out.json(page)
        return 0
    out.line(f"thread {inert(page.thread_id)}", "bold")
    for m in page.messages:
        to = ", ".join(inert(r) for r in m.to)
        out.line(f"{inert(m.sender)} → {to} · {_ago(m.sent_at)} ago", "bold")
        for text in lines(m.body):
            out.line(f"  {text}")
    if page.next_cursor is not None and out.rich:
        out.line(f"more messages: --limit {min(args.limit * 2, 100)}", "dim")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    acting: argparse.ArgumentParser,
    wrap: Wrap,
) -> None:
    """Add the commands; ``wrap`` is the commands' one error handling (``commands.guarded``)."""
    for name, fn, what in (
        ("threads", list_threads, "the threads you are in, the latest first (--all: every thread)"),
        ("thread", show_thread, "the messages of one thread you are in, oldest first (--all: as the overseer)"),
    ):
        p = sub.add_parser(name, parents=[common, acting], help=what)
        if name == "thread":
            p.add_argument("thread_id", metavar="ID")
        p.add_argument("--all", action="store_true", help="the overseer's view (needs the service's API key)")
        p.add_argument("--agent", metavar="AGENT_ID", help="with --all: that agent's messages only")
        p.add_argument("--limit", type=int, default=20, help="at most this many (1-100)")
        p.set_defaults(fn=wrap(fn))
