"""The tasks' statements of a SQL mesh transaction (``muster_mesh.tasks.TaskTx``), mixed into ``SqlMeshTx``.

A claim is one ``UPDATE … WHERE task_id = (SELECT … LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING``: on PostgreSQL
concurrent claimers skip each other's candidate rows, so each task goes to exactly one of them; on SQLite every
transaction is ``BEGIN IMMEDIATE`` and the database's write lock serialises the claims of every process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, case, exists, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from muster_api.mesh.claims_store import HasDialect
from muster_api.mesh.tables import agents
from muster_api.mesh.tasks_tables import task_events, tasks
from muster_mesh.tasks import Claimant, TaskEvent, TaskRecord

c = tasks.c


def _task(row: Mapping[Any, Any]) -> TaskRecord:
    return TaskRecord(
        task_id=row["task_id"],
        title=row["title"],
        body=row["body"],
        poster=row["poster"],
        to_agent=row["to_agent"],
        role=row["role"],
        repo=row["repo"],
        cap=row["cap"],
        priority=row["priority"],
        state=row["state"],
        holder=row["holder"],
        fence=int(row["fence"]),
        attempts=row["attempts"],
        result=row["result"],
        reason=row["reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _addressed(who: Claimant) -> ColumnElement[bool]:
    ways: list[ColumnElement[bool]] = [c.to_agent == who.agent_id]
    if who.role is not None:
        ways.append(c.role == who.role)
    if who.repo is not None:
        ways.append(c.repo == who.repo)
    if who.caps:
        ways.append(c.cap.in_(list(who.caps)))
    where = or_(*ways)
    for column, only in ((c.role, who.only_role), (c.repo, who.only_repo), (c.cap, who.only_cap)):
        if only is not None:
            where = and_(where, column == only)
    return where


def _holder_lapsed(now: datetime) -> ColumnElement[bool]:
    live = exists().where(agents.c.agent_id == c.holder, agents.c.expires_at > now)
    return and_(c.state == "claimed", ~live)


class SqlTasks:
    _conn: AsyncConnection
    _store: HasDialect

    async def insert_task(self, record: TaskRecord) -> None:
        await self._conn.execute(
            tasks.insert().values(
                task_id=record.task_id,
                title=record.title,
                body=record.body,
                poster=record.poster,
                to_agent=record.to_agent,
                role=record.role,
                repo=record.repo,
                cap=record.cap,
                priority=record.priority,
                state=record.state,
                holder=record.holder,
                fence=record.fence,
                attempts=record.attempts,
                result=record.result,
                reason=record.reason,
                created_at=record.created_at,
                updated_at=record.updated_at,
            )
        )

    async def get_task(self, task_id: str, *, for_update: bool = False) -> TaskRecord | None:
        stmt = select(tasks).where(c.task_id == task_id)
        if for_update:
            stmt = self._store.dialect.lock_rows(stmt)
        row = (await self._conn.execute(stmt)).first()
        return _task(row._mapping) if row is not None else None

    async def claim_task(
        self, claimant: Claimant, now: datetime, *, max_attempts: int, fail_reason: str
    ) -> TaskRecord | None:
        lapsed = _holder_lapsed(now)
        # Exhausted lapsed tasks fail first (a rare UPDATE, found by the queue index): they are never handed out.
        await self._conn.execute(
            update(tasks)
            .where(lapsed, c.attempts >= max_attempts, _addressed(claimant))
            .values(state="failed", holder=None, reason=fail_reason, updated_at=now)
        )
        claimable = or_(c.state == "open", and_(lapsed, c.attempts < max_attempts))
        pick = self._store.dialect.lock_claimable(
            select(c.task_id)
            .where(claimable, _addressed(claimant))
            .order_by(c.priority.desc(), c.created_at, c.task_id)
            .limit(1)
        ).scalar_subquery()
        stmt = (
            update(tasks)
            .where(c.task_id == pick, claimable)
            .values(
                state="claimed",
                holder=claimant.agent_id,
                fence=c.fence + literal(1),
                attempts=c.attempts + literal(1),
                updated_at=now,
            )
            .returning(*tasks.c)
        )
        row = (await self._conn.execute(stmt)).first()
        return _task(row._mapping) if row is not None else None

    async def finish_task(
        self,
        task_id: str,
        holder: str,
        fence: int,
        now: datetime,
        *,
        state: str,
        result: str | None,
        reason: str | None,
    ) -> TaskRecord | None:
        released = state == "open"
        stmt = (
            update(tasks)
            .where(c.task_id == task_id, c.holder == holder, c.fence == fence, c.state == "claimed")
            .values(
                state=state,
                holder=None if released else c.holder,
                attempts=case((literal(released), c.attempts - literal(1)), else_=c.attempts),
                result=result,
                reason=reason,
                updated_at=now,
            )
            .returning(*tasks.c)
        )
        row = (await self._conn.execute(stmt)).first()
        return _task(row._mapping) if row is not None else None

    async def add_task_event(self, task_id: str, at: datetime, kind: str, agent: str | None, note: str | None) -> None:
        await self._conn.execute(task_events.insert().values(task_id=task_id, at=at, kind=kind, agent=agent, note=note))

    async def task_history(self, task_id: str) -> list[TaskEvent]:
        rows = await self._conn.execute(
            select(task_events).where(task_events.c.task_id == task_id).order_by(task_events.c.event_id)
        )
        return [TaskEvent(at=r.at, kind=r.kind, agent=r.agent, note=r.note) for r in rows.all()]

    async def list_tasks(self, *, state: str | None, role: str | None, limit: int) -> list[TaskRecord]:
        stmt = select(tasks).order_by(c.created_at, c.task_id).limit(limit)
        if state is not None:
            stmt = stmt.where(c.state == state)
        if role is not None:
            stmt = stmt.where(c.role == role)
        return [_task(r._mapping) for r in (await self._conn.execute(stmt)).all()]

    async def live_agent_ids(self, agent_ids: Sequence[str], live_at: datetime) -> set[str]:
        if not agent_ids:
            return set()
        stmt = select(agents.c.agent_id).where(agents.c.agent_id.in_(list(agent_ids)), agents.c.expires_at > live_at)
        return {r.agent_id for r in (await self._conn.execute(stmt)).all()}


__all__ = ["SqlTasks"]
