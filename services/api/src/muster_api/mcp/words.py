"""Tool results in words, for an agent to read: ages ("12 min"), the directory, messages.

What other agents wrote (status lines, message bodies, thread ids) is quoted as a JSON string: a newline or a
look-alike header inside it stays inside the quotes, so it cannot pass for this server's own text.
"""

from __future__ import annotations

import json
from datetime import datetime

from muster_client import AgentView, InboxMessage, Receipt, SearchHit


def quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def duration(seconds: float) -> str:
    """A duration in words: "8 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def expiry(agent: AgentView, now: datetime) -> str:
    left = (agent.expires_at - now).total_seconds()
    return f"expires in {duration(left)}" if left > 0 else f"expired {duration(-left)} ago"


def presence(agent: AgentView, now: datetime) -> str:
    """``working, last call 5 s ago`` (nothing from a service that does not say)."""
    if agent.state is None or agent.last_activity is None:
        return ""
    return f"{agent.state}, last call {duration((now - agent.last_activity).total_seconds())} ago"


def agent_line(agent: AgentView, now: datetime) -> str:
    """``builder — "fixing the flaky test" — 12 min; role builder; working, last call 5 s ago; heartbeat 5 s ago;
    expires in 48 min``"""
    status = f"{quoted(agent.status)} — {duration(agent.status_age_seconds)}" if agent.status else "(no status)"
    about = [f"role {agent.role}" if agent.role else "", f"repo {quoted(agent.repo)}" if agent.repo else ""]
    if agent.caps:
        about.append("caps " + ", ".join(agent.caps))
    facts = "; ".join(a for a in about if a)
    gone = "" if agent.alive else " (expired)"
    parts = [f"{agent.agent_id}{gone} — {status}", facts, presence(agent, now)]
    parts.append(f"heartbeat {duration(agent.heartbeat_age_seconds)} ago")
    parts.append(expiry(agent, now))
    return "; ".join(p for p in parts if p)


def message_line(message: InboxMessage, now: datetime) -> str:
    thread = f", thread {quoted(message.thread_id)}" if message.thread_id else ""
    age = duration((now - message.sent_at).total_seconds())
    return f"#{message.seq} from {message.sender}{thread}, {age} ago: {quoted(message.body)}"


def hit_line(hit: SearchHit, now: datetime) -> str:
    thread = f", thread {quoted(hit.thread_id)}" if hit.thread_id else ""
    age = duration((now - hit.sent_at).total_seconds())
    return f"- {hit.message_id} from {hit.sender}{thread}, {age} ago: {quoted(hit.snippet)}"


def followed_lines(recipients: list[str], followed: list[str]) -> list[str]:
    """Who is handed the message now, and who finds it only at its next inbox read."""
    now = [r for r in recipients if r in followed]
    later = [r for r in recipients if r not in followed]
    lines = []
    if now:
        lines.append(f"Followed right now (a live reader or its auto-wake is handed it): {', '.join(now)}.")
    if later:
        lines.append(f"Nobody follows the inbox of {', '.join(later)}: it finds the message at its next inbox read.")
    return lines


def receipt_line(receipt: Receipt, now: datetime) -> str:
    """One recipient's receipt: each step with how long ago it happened, or "not yet"."""
    steps = (
        ("stored", receipt.stored_at),
        ("woken", receipt.woken_at),
        ("read", receipt.read_at),
        ("acknowledged", receipt.acknowledged_at),
    )
    said = [f"{name} {duration((now - at).total_seconds())} ago" if at else f"not {name} yet" for name, at in steps]
    return f"- {receipt.agent_id}: " + ", ".join(said)


def record_summary(agent: AgentView, now: datetime) -> str:
    """The facts of one roster entry: role, repo, caps, status, TTL and expiry."""
    parts = [f"role {agent.role}" if agent.role else "no role"]
    if agent.repo:
        parts.append(f"repo {quoted(agent.repo)}")
    if agent.caps:
        parts.append("caps " + ", ".join(agent.caps))
    parts.append(f"status {quoted(agent.status)}" if agent.status else "no status")
    parts.append(f"TTL {agent.ttl_seconds} s ({duration(agent.ttl_seconds)}), {expiry(agent, now)}")
    return "; ".join(parts)
