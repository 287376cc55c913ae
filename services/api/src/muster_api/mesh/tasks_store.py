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
TASK_COLUMNS = tuple(col.name for col in tasks.c)

# A whole claim in one round trip (``Tasks`` falls back to its transaction, which says why, when the caller's token
# or the TTL seen for it does not qualify). The same rules as ``SqlTasks.claim_task`` and the transaction around it:
# addressed to the caller directly or by its role, repo or one of its caps, narrowed by the claim's filters; a
# claimed task whose holder's lease lapsed is open while its attempts are below the cap and failed once they are not.

# On SQLite, as one function on the driver's thread inside BEGIN IMMEDIATE (``sqlite_trips.claim_task``): the
# database's write lock serialises the claims of every process. :p_caps is the caller's caps as stored (JSON text).
_LAPSED_SQLITE = (
    "mesh_tasks.state = 'claimed' AND NOT EXISTS (SELECT 1 FROM mesh_agents "
    "WHERE mesh_agents.agent_id = mesh_tasks.holder AND mesh_agents.expires_at > :p_now)"
)
_ADDRESSED_SQLITE = (
    "(to_agent = :p_me OR role = :p_role OR repo = :p_repo OR cap IN (SELECT value FROM json_each(:p_caps))) "
    "AND (:p_only_role IS NULL OR role = :p_only_role) AND (:p_only_repo IS NULL OR repo = :p_only_repo) "
    "AND (:p_only_cap IS NULL OR cap = :p_only_cap)"
)
FAIL_EXHAUSTED_SQLITE = (
    "UPDATE mesh_tasks SET state = 'failed', holder = NULL, reason = :p_reason, updated_at = :p_now "  # noqa: S608
    f"WHERE {_LAPSED_SQLITE} AND attempts >= :p_max AND {_ADDRESSED_SQLITE}"
)
CLAIM_SQLITE = (
    "UPDATE mesh_tasks SET state = 'claimed', holder = :p_me, fence = fence + 1, attempts = attempts + 1, "  # noqa: S608
    "updated_at = :p_now WHERE task_id = (SELECT task_id FROM mesh_tasks "
    f"WHERE (state = 'open' OR ({_LAPSED_SQLITE} AND attempts < :p_max)) AND {_ADDRESSED_SQLITE} "
    f"ORDER BY priority DESC, created_at, task_id LIMIT 1) RETURNING {', '.join(TASK_COLUMNS)}"
)
ADD_EVENT_SQLITE = (
    "INSERT INTO mesh_task_events (task_id, at, kind, agent, note) VALUES (:task_id, :at, :kind, :agent, :note)"
)

# On PostgreSQL, one statement of data-modifying CTEs, on ``DriverPool``. $1 the caller's token hash, $2 now, $3 its
# new expiry, $4 the TTL that expiry was computed for, $5 the attempts cap, $6 the reason a task fails at the cap,
# $7-$9 the claim's role, repo and cap filters, $10 the poster's message_id, $11 the message's text before the
# title, $12 the history note's before the token.
# - ``a`` reads the caller (token, lease, TTL); every later part reads it through scalar subqueries, so that the
#   candidate's pick is one InitPlan and SKIP LOCKED locks the one row it hands out: concurrent claimers skip each
#   other's candidates, so each task goes to exactly one of them.
# - ``u`` renews the caller: the only agent row the statement locks. The poster's message goes to
#   ``mesh_inbox_pending``, not to its inbox: bumping the poster's sequence here would hold its row until the commit,
#   and every claimer of that poster's tasks would queue on it. The caller then has the pending rows delivered
#   (``muster_api.mesh.inbox_pending``), which locks the recipients' rows in agent_id order as every writer of
#   several agent rows does, and checks there that the poster is live.
# - the history row with the claim.
# With no qualifying caller ``a`` is empty and so is everything else: no row comes back.
_LAPSED_PG = (
    "{t}.state = 'claimed' AND NOT EXISTS (SELECT 1 FROM mesh_agents AS h WHERE h.agent_id = {t}.holder "
    "AND h.expires_at > $2)"
)
_ADDRESSED_PG = (
    "({t}.to_agent = (SELECT agent_id FROM a) OR {t}.role = (SELECT role FROM a) OR {t}.repo = (SELECT repo FROM a) "
    "OR (SELECT caps FROM a) ? {t}.cap) AND ($7::text IS NULL OR {t}.role = $7::text) "
    "AND ($8::text IS NULL OR {t}.repo = $8::text) AND ($9::text IS NULL OR {t}.cap = $9::text)"
)
_CLAIMABLE_PG = "({t}.state = 'open' OR (" + _LAPSED_PG + " AND {t}.attempts < $5))"
# Built from the constant fragments above: no value is ever formatted into it.
CLAIM_PG = f"""
WITH a AS MATERIALIZED (
    SELECT agent_id, role, repo, caps FROM mesh_agents
    WHERE token_hash = $1 AND expires_at > $2 AND ttl_seconds = $4
), f AS (
    UPDATE mesh_tasks SET state = 'failed', holder = NULL, reason = $6::text, updated_at = $2
    WHERE {_LAPSED_PG.format(t="mesh_tasks")} AND mesh_tasks.attempts >= $5 AND {_ADDRESSED_PG.format(t="mesh_tasks")}
), t AS (
    UPDATE mesh_tasks SET state = 'claimed', holder = (SELECT agent_id FROM a), fence = mesh_tasks.fence + 1,
        attempts = mesh_tasks.attempts + 1, updated_at = $2
    WHERE mesh_tasks.task_id = (
        SELECT q.task_id FROM mesh_tasks AS q
        WHERE {_CLAIMABLE_PG.format(t="q")} AND {_ADDRESSED_PG.format(t="q")}
        ORDER BY q.priority DESC, q.created_at, q.task_id
        LIMIT 1
        FOR UPDATE OF q SKIP LOCKED
    ) AND {_CLAIMABLE_PG.format(t="mesh_tasks")}
    RETURNING mesh_tasks.*
), u AS (
    UPDATE mesh_agents SET last_seen_at = $2, expires_at = $3
    WHERE agent_id = (SELECT agent_id FROM a) AND token_hash = $1
), p AS (
    INSERT INTO mesh_inbox_pending (recipient, message_id, sender, body, thread_id, sent_at)
    SELECT t.poster, $10::text, t.holder, $11::text || t.title, 'task:' || t.task_id, $2 FROM t
), e AS (
    INSERT INTO mesh_task_events (task_id, at, kind, agent, note)
    SELECT t.task_id, $2, 'claimed', t.holder, $12::text || t.fence FROM t
)
SELECT a.agent_id AS caller, t.*
FROM a LEFT JOIN t ON true
"""  # noqa: S608


def task_record(row: Mapping[Any, Any]) -> TaskRecord:
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
        return task_record(row._mapping) if row is not None else None

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
        return task_record(row._mapping) if row is not None else None

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
        return task_record(row._mapping) if row is not None else None

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
        return [task_record(r._mapping) for r in (await self._conn.execute(stmt)).all()]

    async def live_agent_ids(self, agent_ids: Sequence[str], live_at: datetime) -> set[str]:
        if not agent_ids:
            return set()
        stmt = select(agents.c.agent_id).where(agents.c.agent_id.in_(list(agent_ids)), agents.c.expires_at > live_at)
        return {r.agent_id for r in (await self._conn.execute(stmt)).all()}


__all__ = [
    "ADD_EVENT_SQLITE",
    "CLAIM_PG",
    "CLAIM_SQLITE",
    "FAIL_EXHAUSTED_SQLITE",
    "TASK_COLUMNS",
    "SqlTasks",
    "task_record",
]
