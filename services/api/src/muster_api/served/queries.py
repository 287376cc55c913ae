"""The served agents' reads of the runs table: the tasks of an agent (by context, state, time; newest first, by id
cursor) and the conversation a new message in a context continues."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import and_, bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Select

from muster_api.dispatch.models import Run
from muster_api.dispatch.store import run_of
from muster_api.dispatch.tables import runs
from muster_api.served.tasks import WORKSPACE_PREFIX, workspace_of

_T = TypeVar("_T", bound=Any)


@dataclass(frozen=True)
class TaskFilter:
    agent: str
    context_id: str | None = None
    statuses: tuple[str, ...] | None = None
    changed_since: datetime | None = None


def _where(query: Select[_T], wanted: TaskFilter) -> Select[_T]:
    if wanted.context_id is not None:
        query = query.where(runs.c.workspace == workspace_of(wanted.agent, wanted.context_id))
    else:
        query = query.where(runs.c.workspace.startswith(f"{WORKSPACE_PREFIX}/{wanted.agent}/", autoescape=True))
    query = query.where(runs.c.agent == wanted.agent)
    if wanted.statuses is not None:
        query = query.where(runs.c.status.in_(wanted.statuses))
    if wanted.changed_since is not None:
        since = wanted.changed_since
        query = query.where(
            or_(
                runs.c.finished_at >= since,
                and_(runs.c.finished_at.is_(None), runs.c.started_at >= since),
                and_(runs.c.finished_at.is_(None), runs.c.started_at.is_(None), runs.c.queued_at >= since),
            )
        )
    return query


async def task_page(engine: AsyncEngine, wanted: TaskFilter, before: str | None, limit: int) -> tuple[list[Run], int]:
    """A page of runs, newest first, and how many match in all."""
    query = _where(select(runs), wanted).order_by(runs.c.id.desc()).limit(limit)
    if before is not None:
        query = query.where(runs.c.id < before)
    count = _where(select(func.count()).select_from(runs), wanted)
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
        total = (await conn.execute(count)).scalar() or 0
    return [run_of(row) for row in rows], total


# Built once: the newest run of a context's workspace that has a conversation.
_LATEST_CONVERSATION = (
    select(runs.c.id)
    .where(runs.c.workspace == bindparam("workspace"), runs.c.conversation.is_not(None))
    .order_by(runs.c.id.desc())
    .limit(1)
)


async def latest_conversation(engine: AsyncEngine, agent: str, context_id: str) -> str | None:
    """The run whose conversation the next message of the context continues: the newest one that has one."""
    async with engine.connect() as conn:
        found: str | None = (
            await conn.execute(_LATEST_CONVERSATION, {"workspace": workspace_of(agent, context_id)})
        ).scalar()
    return found
