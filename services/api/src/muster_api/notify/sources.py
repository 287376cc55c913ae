"""Where events come from: what the stores have already committed, read by a scan (one per instance, every
``scan_seconds``). A scan writes an event once (its ``dedup`` key is unique), so instances scanning the same rows and
a scan after a restart add nothing twice; the event that caused it was answered long before, whatever the URLs do.

- ``message_to_human``: entries of the inboxes of agents whose role is ``human``, after the last one already taken
  (a person seen for the first time: the messages of the lookback).
- ``task_failed``: mesh tasks in state ``failed`` (once per claim that failed: the fence names it).
- ``run_failed`` / ``quota_without_fallback``: dispatch runs that ended ``failed``; one that ended on ``quota`` (no
  fallback candidate left) is the second kind when it is on.
- ``agent_stale``: agents whose lease lapsed without a check-out (a check-out ends the lease at the last call, a
  lapse after it), once per lapse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from muster_api.dispatch.tables import runs
from muster_api.mesh.tables import agents, inbox, messages
from muster_api.mesh.tasks_tables import tasks
from muster_api.notify import render
from muster_api.notify.config import NotifyConfig
from muster_api.notify.tables import events

SCAN_LIMIT = 200
HUMAN_ROLE = "human"


@dataclass(frozen=True)
class Scan:
    conn: AsyncConnection
    config: NotifyConfig
    now: datetime
    since: datetime


def event(
    scan: Scan, dedup: str, kind: str, subject: str, title: str, body: str = "", seq: int | None = None
) -> dict[str, Any]:
    return {
        "dedup": dedup,
        "kind": kind,
        "subject": subject,
        "seq": seq,
        "title": render.clip(title, render.MAX_TITLE),
        "body": body,
        "created_at": scan.now,
        "delivery_id": None,
        "packed": 0,
    }


async def messages_to_humans(scan: Scan) -> list[dict[str, Any]]:
    humans = (
        await scan.conn.execute(select(agents.c.agent_id, agents.c.last_seq).where(agents.c.role == HUMAN_ROLE))
    ).all()
    found: list[dict[str, Any]] = []
    for agent_id, last_seq in humans:
        taken = (
            await scan.conn.execute(
                select(func.max(events.c.seq)).where(events.c.kind == "message_to_human", events.c.subject == agent_id)
            )
        ).scalar()
        if taken is not None and taken >= last_seq:
            continue
        query = (
            select(inbox.c.seq, messages.c.sender, messages.c.body)
            .join(messages, messages.c.message_id == inbox.c.message_id)
            .where(inbox.c.recipient == agent_id, inbox.c.seq > (taken or 0))
            .order_by(inbox.c.seq)
            .limit(SCAN_LIMIT)
        )
        if taken is None:
            query = query.where(messages.c.sent_at >= scan.since)
        for seq, sender, body in (await scan.conn.execute(query)).all():
            text = render.excerpt(body, scan.config.body)
            found.append(event(scan, f"message:{agent_id}:{seq}", "message_to_human", agent_id, sender, text, seq=seq))
    return found


async def failed_tasks(scan: Scan) -> list[dict[str, Any]]:
    query = (
        select(tasks.c.task_id, tasks.c.title, tasks.c.reason, tasks.c.fence)
        .where(tasks.c.state == "failed", tasks.c.updated_at >= scan.since)
        .limit(SCAN_LIMIT)
    )
    return [
        event(
            scan,
            f"task:{task_id}:{fence}",
            "task_failed",
            task_id,
            f"task failed: {title}",
            render.excerpt(reason or "", scan.config.body),
        )
        for task_id, title, reason, fence in (await scan.conn.execute(query)).all()
    ]


def _run_kind(config: NotifyConfig, error: Any) -> str | None:
    on_quota = isinstance(error, dict) and error.get("code") == "quota"
    if on_quota and "quota_without_fallback" in config.on:
        return "quota_without_fallback"
    return "run_failed" if "run_failed" in config.on else None


async def failed_runs(scan: Scan) -> list[dict[str, Any]]:
    query = (
        select(runs.c.id, runs.c.agent, runs.c.error)
        .where(runs.c.status == "failed", runs.c.finished_at >= scan.since)
        .limit(SCAN_LIMIT)
    )
    found = []
    for run_id, agent, error in (await scan.conn.execute(query)).all():
        kind = _run_kind(scan.config, error)
        if kind is None:
            continue
        code = error.get("code", "failed") if isinstance(error, dict) else "failed"
        message = str(error.get("message", "")) if isinstance(error, dict) else ""
        title = (
            f"{agent} hit its usage limit, no fallback left"
            if kind == "quota_without_fallback"
            else f"run of {agent} failed ({code})"
        )
        found.append(event(scan, f"run:{run_id}", kind, run_id, title, render.excerpt(message, scan.config.body)))
    return found


async def stale_agents(scan: Scan) -> list[dict[str, Any]]:
    query = (
        select(agents.c.agent_id, agents.c.role, agents.c.expires_at)
        .where(
            agents.c.expires_at < scan.now,
            agents.c.expires_at >= scan.since,
            agents.c.expires_at > agents.c.last_seen_at,
        )
        .limit(SCAN_LIMIT)
    )
    found = []
    for agent_id, role, expires_at in (await scan.conn.execute(query)).all():
        who = f"{agent_id} ({role})" if role else agent_id
        dedup = f"stale:{agent_id}:{expires_at.isoformat()}"
        found.append(
            event(scan, dedup, "agent_stale", agent_id, f"{who} went stale: its lease lapsed without a check-out")
        )
    return found


SOURCES = {
    "message_to_human": messages_to_humans,
    "task_failed": failed_tasks,
    "run_failed": failed_runs,
    "quota_without_fallback": failed_runs,
    "agent_stale": stale_agents,
}


def sources_of(config: NotifyConfig) -> Iterator[Any]:
    """Each scan function the block's ``on`` needs, once."""
    seen = []
    for kind in sorted(config.on):
        source = SOURCES[kind]
        if source not in seen:
            seen.append(source)
            yield source


def window(now: datetime, lookback_seconds: float) -> datetime:
    return now - timedelta(seconds=lookback_seconds)
