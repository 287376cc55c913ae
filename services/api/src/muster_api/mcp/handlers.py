"""One handler per tool: arguments checked, the service called through the client, the answer put in words.

A handler answers text or raises; ``outcome`` turns what it raised into an MCP tool error (``isError``) that says
what went wrong and what to do — never a stack trace, never a token.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from muster_api.errors import ToolRefused
from muster_api.mcp import claim_handlers, tools, words
from muster_api.mcp.session import AgentSession
from muster_client import (
    A2ACallResult,
    ApiError,
    CheckinPreview,
    CheckoutPreview,
    Run,
    SendPreview,
    ServiceUnreachable,
    UnexpectedAnswer,
)
from muster_client import claims as cl
from muster_mesh.models import MAX_PAGE

log = logging.getLogger("muster.mcp")

Handler = Callable[[AgentSession, dict[str, Any]], Awaitable[str]]

HINTS: dict[str, str] = {
    "token_required": "call agent_checkin with your agent_id and confirm: true first",
    "agent_id_in_use": "another live session holds this agent_id: choose another agent_id, or wait for its lease "
    "to end",
    "not_the_holder": "another live session holds this agent_id: choose another agent_id",
    "invalid_token": "check in again with agent_checkin (confirm: true)",
    "lease_expired": "your lease ended: check in again with agent_checkin (confirm: true)",
    "unauthorized": "check in again with agent_checkin (confirm: true); if this persists, MUSTER_API_KEY may be "
    "missing or wrong in this MCP server's environment",
    "forbidden": "MUSTER_API_KEY of this MCP server is not accepted by the service",
    "recipient_not_found": "no such agent: see agents_list for the live agent ids",
    "recipient_expired": "that agent is gone: see agents_list for the live ones",
    "message_too_large": "shorten the body",
    "invalid_request": "fix the named field(s) and call again",
    "invalid_address": "give exactly one of to, role, repo, cap",
    "idempotency_conflict": "use a new idempotency key",
    "superseded": "another session took this agent_id over; this server's token no longer works: check in with "
    "another agent_id",
    "rate_limited": "too many role/repo/cap sends: wait before sending again, or address one agent with to",
    "not_found": "see the tool list for the tools that exist now",
}


def now() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------- mesh tools


async def checkin(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.CheckinArgs.model_validate(arguments)
    answer, warnings = await session.checkin(args)
    if isinstance(answer, CheckinPreview):
        lines = [
            f"Preview, nothing changed: this would {answer.action} agent {answer.agent.agent_id} — "
            f"{words.record_summary(answer.agent, now())}.",
            "Call agent_checkin again with confirm: true to act.",
        ]
    else:
        verb = "Checked in" if answer.token else "Renewed"
        lines = [
            f"{verb} as {answer.agent_id} — {words.record_summary(answer, now())}.",
            "Your session token is kept by this MCP server; every mesh call you make renews your presence.",
        ]
        if session.pane is not None and not warnings:
            lines.append("Auto-wake is on: new messages prompt your Herdr pane to call agent_inbox.")
    return "\n".join([*lines, *(f"Warning: {w}." for w in warnings)])


async def agents_list(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.ListArgs.model_validate(arguments)
    page = await session.acknowledging(lambda: session.client.agents(args.query().but(limit=MAX_PAGE)))
    at = now()
    if not page.agents:
        return "No live agents match." if not args.include_expired else "No agents match."
    held = Counter(c.holder for c in (await session.client.call(cl.claims(repo=args.repo, agent=None))).claims)
    lines = [
        f"{len(page.agents)} agent(s):",
        *(f"- {words.agent_line(a, at)}; holds {held[a.agent_id]} path claim(s)" for a in page.agents),
    ]
    if page.next_cursor:
        lines.append("More agents exist than shown: narrow with repo, role or cap.")
    return "\n".join(lines)


async def agent_send(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.SendArgs.model_validate(arguments)
    session.require()
    answer = await session.acknowledging(
        lambda: session.client.send(
            args.body,
            to=args.to,
            role=args.role,
            repo=args.repo,
            cap=args.cap,
            thread_id=args.thread_id,
            confirm=args.confirm,
        )
    )
    if isinstance(answer, SendPreview):
        who = ", ".join(answer.recipients) or "nobody (no live agent matches)"
        return f"Preview, nothing stored: the message would go to {who}. Call agent_send again with confirm: true."
    if answer.stored == 0:
        return "Nothing stored: no live agent matches that address (see agents_list)."
    return "\n".join(
        [
            f"Stored in {answer.stored} inbox(es): {', '.join(answer.recipients)} (stored, not yet read).",
            *words.followed_lines(answer.recipients, answer.followed),
            f"Message {answer.message_id}: message_receipts shows when each recipient is woken, reads and "
            "acknowledges it.",
        ]
    )


async def agent_inbox(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.InboxArgs.model_validate(arguments)
    session.require()
    page = await session.read(wait_seconds=args.wait_seconds, limit=args.limit)
    if not page.messages:
        waited = f" (waited {words.duration(args.wait_seconds)})" if args.wait_seconds else ""
        return f"No new messages{waited}."
    at = now()
    lines = [f"{len(page.messages)} new message(s):", *(words.message_line(m, at) for m in page.messages)]
    if page.has_more:
        lines.append("More are waiting: call agent_inbox again.")
    return "\n".join(lines)


async def agent_checkout(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.CheckoutArgs.model_validate(arguments)
    agent_id = session.require()
    if session.bound is not None:
        raise ToolRefused(
            f"{agent_id} is checked in by the service for the run you are in, which checks it out when the run ends: "
            "there is nothing to check out"
        )
    await session.flush()
    answer = await session.client.checkout(confirm=args.confirm)
    if isinstance(answer, CheckoutPreview):
        return f"Preview, nothing changed: {agent_id} would leave the mesh. Call agent_checkout with confirm: true."
    session.ended()
    return f"Checked out: {agent_id} left the mesh. Check in again to come back (a new session)."


# ---------------------------------------------------------------- dispatch


def run_words(run: Run) -> str:
    """A run in words: its state, and once finished its final text, usage and error code."""
    chosen = f", done by {run.selected}" if run.selected and run.selected != run.agent else ""
    lines = [f"Run {run.id} of agent {run.agent}{chosen}: {run.status}."]
    if not run.finished:
        lines.append(f"Not finished yet: call dispatch_status with run_id {run.id} later.")
        return "\n".join(lines)
    if run.error_code:
        message = (run.error or {}).get("message") or ""
        lines.append(f"Error code {run.error_code}: {message}".rstrip(": "))
    if run.usage:
        counted = ", ".join(f"{k} {v}" for k, v in run.usage.items() if isinstance(v, int) and not isinstance(v, bool))
        if counted:
            lines.append(f"Usage (tokens): {counted}.")
    if run.conversation:
        lines.append(f"Conversation {run.conversation} (continue it with continuation.run_id {run.id}).")
    lines.append("Final text:" if run.text else "No final text.")
    if run.text:
        lines.append(run.text)
    return "\n".join(lines)


async def dispatch_run(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.DispatchRunArgs.model_validate(arguments)
    continuation = args.continuation.model_dump(exclude_defaults=True) if args.continuation else None
    run = await session.client.start_run(args.agent, args.prompt, args.workspace, continuation=continuation)
    if args.wait:
        run = await session.client.wait_run(run.id)
    return run_words(run)


async def dispatch_status(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.DispatchStatusArgs.model_validate(arguments)
    return run_words(await session.client.run(args.run_id))


async def mesh_search(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.SearchArgs.model_validate(arguments)
    session.require()
    page = await session.client.search(args.q, limit=args.limit)
    if not page.hits:
        return f"No message you sent or received holds every word of {words.quoted(args.q)}."
    at = now()
    lines = [f"{len(page.hits)} message(s), best first:", *(words.hit_line(h, at) for h in page.hits)]
    if page.next_cursor:
        lines.append("More match: add words to narrow the search.")
    return "\n".join(lines)


async def message_receipts(session: AgentSession, arguments: dict[str, Any]) -> str:
    args = tools.ReceiptsArgs.model_validate(arguments)
    session.require()
    found = await session.client.receipts(args.message_id)
    at = now()
    age = words.duration((at - found.sent_at).total_seconds())
    head = f"Message {found.message_id} from {found.sender}, sent {age} ago:"
    return "\n".join([head, *(words.receipt_line(r, at) for r in found.receipts)])


MESH_HANDLERS: dict[str, Handler] = {
    tools.CHECKIN: checkin,
    tools.LIST: agents_list,
    tools.SEND: agent_send,
    tools.INBOX: agent_inbox,
    tools.CHECKOUT: agent_checkout,
    tools.SEARCH: mesh_search,
    tools.RECEIPTS: message_receipts,
    tools.DISPATCH_RUN: dispatch_run,
    tools.DISPATCH_STATUS: dispatch_status,
    **claim_handlers.HANDLERS,
}
# The tools whose own mesh call the roster counts as the agent's activity (muster_mesh.presence); any other tool call
# is told to the mesh beside it (``AgentSession.note_activity``). agent_inbox is not told: a wait is not activity.
SEEN_AS_ACTIVITY = frozenset(MESH_HANDLERS) - {tools.CHECKIN, tools.DISPATCH_RUN, tools.DISPATCH_STATUS}


# ---------------------------------------------------------------- A2A tools


CONTINUE = re.compile(r"\A\s*\[continue ([A-Za-z0-9_-]{1,128})\]\s*(.*)\Z", re.DOTALL)
"""A task that answers an input-required call: ``[continue <call id>] <the answer>``. The tool's input schema is
the A2A contract's ``{task}`` verbatim, so the call to continue travels in the task text, named by the service's
call id (one short id the agent copies from the question, which the service maps to the remote task and context)."""


def a2a_words(tool: str, result: A2ACallResult) -> tuple[str, bool]:
    """The remote agent's answer, and whether it is an error. An interrupted task says how to go on."""
    task = result.metadata.get("task_id")
    if result.state == "input-required":
        return (
            f"The remote agent needs more input before it can finish (task {task} is input-required). It asks:\n"
            f"{result.text}\nTo answer it on the same task, call {tool} again with a task that starts with "
            f'[continue {result.call_id}] followed by your answer (for example: "[continue {result.call_id}] '
            'yes"). A task without that prefix starts a new task instead.',
            False,
        )
    if result.state == "auth-required":
        agent = result.metadata.get("agent")
        return (
            f"The remote agent requires authentication (task {task} is auth-required): {result.text}\nIts "
            f"credentials are configured in the service's agents block (agent {agent!r}); this tool cannot supply "
            "them.",
            True,
        )
    return result.text, result.is_error


async def call_a2a(session: AgentSession, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    args = tools.A2AArgs.model_validate(arguments)
    continuing = CONTINUE.match(args.task)
    if continuing is None:
        return a2a_words(tool, await session.client.a2a_call(tool, args.task))
    call_id, answer = continuing.groups()
    if not answer.strip():
        raise ToolRefused(f"the answer after [continue {call_id}] is empty: write it after the prefix")
    try:
        result = await session.client.a2a_call(tool, answer, continues=call_id)
    except ApiError as exc:
        if exc.code == "not_continuable":
            raise ToolRefused(f"{exc.detail.rstrip('.')}: drop the prefix to start a new task") from None
        if exc.status == 404 and exc.code != "unknown_tool":
            raise ToolRefused(
                f"no call {call_id} is stored: copy the id from the question, or drop the prefix"
            ) from None
        raise
    return a2a_words(tool, result)


# ---------------------------------------------------------------- errors


def failure(tool: str, exc: Exception, url: str) -> str:
    """What went wrong and what to do, in words."""
    if isinstance(exc, ValidationError):
        named = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
        return f"Invalid arguments for {tool}: {named}. Fix them and call {tool} again."
    if isinstance(exc, ToolRefused):
        return f"{tool} refused: {exc}."
    if isinstance(exc, ServiceUnreachable):
        return (
            f"The Muster service at {url} is not reachable ({exc.reason}): start it with `muster serve`, or point "
            f"MUSTER_URL at it, then call {tool} again."
        )
    if isinstance(exc, ApiError):
        hint = HINTS.get(exc.code) or ("try again shortly" if exc.status >= 500 else "")
        if exc.retry_after is not None:
            wait = f"retry after {words.duration(exc.retry_after)}"
            hint = f"{hint}; {wait}" if hint else wait
        return f"{tool} failed: {exc.detail} (HTTP {exc.status}, code {exc.code}).{f' {hint}.' if hint else ''}"
    if isinstance(exc, UnexpectedAnswer):
        return f"{tool} failed: the service answered something unexpected ({exc}); check that MUSTER_URL is Muster."
    # A fault of this server itself: the agent gets one line, the log gets the traceback.
    log.error("%s failed", tool, exc_info=exc)
    return f"{tool} failed inside the muster mcp server ({type(exc).__name__}); its log (stderr) has the details."
