"""``muster checkin | send | inbox | checkout``: a person acting as an agent of the mesh from a terminal."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from muster_api.commands.console import session
from muster_api.commands.console.output import Output
from muster_api.commands.console.session import Session
from muster_api.commands.console.text import duration, inert, lines
from muster_api.errors import CommandError
from muster_client import CheckinPreview, CheckoutPreview, InboxMessage, MusterClient, SendPreview
from muster_client.config import service_url


def checkin(args: argparse.Namespace, out: Output) -> int:
    url = service_url(args.url)
    known = session.find(args.agent_id)
    token = known.token if known is not None and known.url == url else None
    caps = [c for c in (args.caps or "").split(",") if c] if args.caps is not None else None
    with MusterClient(url, token=token) as client:
        result = client.checkin(
            args.agent_id,
            role=args.role,
            repo=args.repo,
            caps=caps,
            status=args.status,
            ttl_seconds=args.ttl,
            confirm=not args.preview,
        )
        kept = client.token
    if isinstance(result, CheckinPreview):
        if out.as_json:
            out.json(result)
        else:
            out.line(f"preview: would {result.action} {inert(args.agent_id)} (nothing changed; drop --preview to act)")
        return 0
    if kept:
        session.save(Session(url=url, agent_id=args.agent_id, token=kept))
    if out.as_json:
        out.json(result.model_dump(mode="json", exclude={"token"}))
        return 0
    left = (result.expires_at - result.last_seen_at).total_seconds()
    out.line(f"✓ checked in as {inert(result.agent_id)} · lease {duration(left)}", "bold green")
    out.line(f"  commands act as {inert(result.agent_id)} now (another: --as AGENT_ID)", "dim")
    return 0


def send(args: argparse.Namespace, out: Output) -> int:
    me = session.load(args.as_agent, service_url(args.url))
    body = sys.stdin.read() if args.body == "-" else args.body
    with MusterClient(me.url, token=me.token) as client:
        result = client.send(
            body, to=args.to, role=args.role, repo=args.repo, cap=args.cap, thread_id=args.thread, confirm=True
        )
    if isinstance(result, SendPreview):  # a confirmed send never answers one; kept total for the type
        raise CommandError("the service answered a preview to a confirmed send")
    if out.as_json:
        out.json(result)
    if result.stored == 0:
        raise CommandError("no live agent matched that address: nothing was stored")
    if not out.as_json:
        names = ", ".join(inert(r) for r in result.recipients)
        out.line(f"✓ sent as {inert(me.agent_id)} to {names} (stored in {result.stored} inbox(es))", "bold green")
    return 0


def _show_message(out: Output, message: InboxMessage) -> None:
    if out.as_json:
        out.json(message)
        return
    age = duration((datetime.now(UTC) - message.sent_at).total_seconds())
    thread = f" · thread {inert(message.thread_id)}" if message.thread_id else ""
    out.line(f"#{message.seq} from {inert(message.sender)} · {age} ago{thread}", "bold")
    for text in lines(message.body):
        out.line(f"  {text}")


def inbox(args: argparse.Namespace, out: Output) -> int:
    me = session.load(args.as_agent, service_url(args.url))
    with MusterClient(me.url, token=me.token) as client:
        if args.follow:
            if out.rich:
                out.line(f"following the inbox of {inert(me.agent_id)} · Ctrl-C to stop", "dim")
            for message in client.stream_inbox(after=args.after):
                _show_message(out, message)
            return 0
        with out.waiting(f"waiting up to {args.wait:g}s for a message to {inert(me.agent_id)}…", when=args.wait > 0):
            page = client.inbox(after=args.after, wait_seconds=args.wait)
        if out.as_json:
            out.json(page)
        else:
            for message in page.messages:
                _show_message(out, message)
            if not page.messages and out.rich:
                out.line(f"no new message for {inert(me.agent_id)}", "dim")
        if args.ack and page.messages:
            client.ack(page.next_cursor, confirm=True)
    return 0


def checkout(args: argparse.Namespace, out: Output) -> int:
    me = session.load(args.as_agent, service_url(args.url))
    with MusterClient(me.url, token=me.token) as client:
        result = client.checkout(confirm=True)
    if isinstance(result, CheckoutPreview):
        raise CommandError("the service answered a preview to a confirmed check-out")
    session.forget(me.agent_id)
    if out.as_json:
        out.json(result)
    else:
        out.line(f"✓ checked out {inert(me.agent_id)}: its lease has ended and its token is forgotten", "bold green")
    return 0
