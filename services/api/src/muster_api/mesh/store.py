"""``SqlMeshStore``: the mesh's rows in the service's database (SQLite or PostgreSQL), one SQL transaction per
``MeshTx``.

Locking: on PostgreSQL ``for_update``/``lock_agents`` take row locks (``SELECT … FOR UPDATE``); on SQLite every
transaction already holds the database write lock from its start (``BEGIN IMMEDIATE`` in ``db.engine``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, and_, delete, exists, func, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.dialect import insert_ignore
from muster_api.mesh.tables import agents, idempotency, inbox, messages
from muster_mesh import (
    AgentRecord,
    IdempotencyRecord,
    InboxEntry,
    MessageRecord,
    SweepPolicy,
    SweepReport,
)


def _agent(row: Row[Any]) -> AgentRecord:
    m = row._mapping
    return AgentRecord(
        agent_id=m["agent_id"],
        session_id=m["session_id"],
        token_hash=m["token_hash"],
        role=m["role"],
        repo=m["repo"],
        caps=tuple(m["caps"]),
        status=m["status"],
        ttl_seconds=m["ttl_seconds"],
        checked_in_at=m["checked_in_at"],
        last_seen_at=m["last_seen_at"],
        status_changed_at=m["status_changed_at"],
        expires_at=m["expires_at"],
        last_seq=m["last_seq"],
        read_cursor=m["read_cursor"],
        floor_seq=m["floor_seq"],
    )


def _agent_values(record: AgentRecord) -> dict[str, Any]:
    return {
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "token_hash": record.token_hash,
        "role": record.role,
        "repo": record.repo,
        "caps": list(record.caps),
        "status": record.status,
        "ttl_seconds": record.ttl_seconds,
        "checked_in_at": record.checked_in_at,
        "last_seen_at": record.last_seen_at,
        "status_changed_at": record.status_changed_at,
        "expires_at": record.expires_at,
        "last_seq": record.last_seq,
        "read_cursor": record.read_cursor,
        "floor_seq": record.floor_seq,
    }


def _rowcount(result: Any) -> int:
    assert isinstance(result, CursorResult)
    return max(result.rowcount, 0)


class SqlMeshTx:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn
        self._dialect = conn.dialect.name
        self._row_locks = self._dialect == "postgresql"

    async def get_agent(self, agent_id: str, *, for_update: bool = False) -> AgentRecord | None:
        stmt = select(agents).where(agents.c.agent_id == agent_id)
        if for_update and self._row_locks:
            stmt = stmt.with_for_update()
        row = (await self._conn.execute(stmt)).first()
        return _agent(row) if row else None

    async def find_by_token(self, token_hash: str) -> AgentRecord | None:
        row = (await self._conn.execute(select(agents).where(agents.c.token_hash == token_hash))).first()
        return _agent(row) if row else None

    async def create_agent(self, record: AgentRecord) -> bool:
        stmt = insert_ignore(self._dialect, agents, _agent_values(record), conflict=["agent_id"])
        return _rowcount(await self._conn.execute(stmt)) == 1

    async def replace_agent(self, record: AgentRecord) -> None:
        values = _agent_values(record)
        del values["agent_id"]
        await self._conn.execute(update(agents).where(agents.c.agent_id == record.agent_id).values(values))

    async def touch_agent(self, agent_id: str, last_seen_at: datetime, expires_at: datetime) -> None:
        await self._conn.execute(
            update(agents).where(agents.c.agent_id == agent_id).values(last_seen_at=last_seen_at, expires_at=expires_at)
        )

    async def set_cursor(self, agent_id: str, read_cursor: int) -> None:
        await self._conn.execute(update(agents).where(agents.c.agent_id == agent_id).values(read_cursor=read_cursor))

    async def list_agents(self, *, live_at: datetime | None) -> list[AgentRecord]:
        stmt = select(agents).order_by(agents.c.agent_id)
        if live_at is not None:
            stmt = stmt.where(agents.c.expires_at > live_at)
        return [_agent(r) for r in (await self._conn.execute(stmt)).all()]

    async def lock_agents(self, agent_ids: Sequence[str]) -> list[AgentRecord]:
        ids = sorted(set(agent_ids))
        if not ids:
            return []
        stmt = select(agents).where(agents.c.agent_id.in_(ids)).order_by(agents.c.agent_id)
        if self._row_locks:
            stmt = stmt.with_for_update()
        return [_agent(r) for r in (await self._conn.execute(stmt)).all()]

    async def add_message(self, message: MessageRecord, recipients: Sequence[str]) -> dict[str, int]:
        await self._conn.execute(
            messages.insert().values(
                message_id=message.message_id,
                sender=message.sender,
                address=message.address,
                subject=message.subject,
                body=message.body,
                sent_at=message.sent_at,
            )
        )
        ids = sorted(set(recipients))
        if not ids:
            return {}
        bumped = await self._conn.execute(
            update(agents)
            .where(agents.c.agent_id.in_(ids))
            .values(last_seq=agents.c.last_seq + 1)
            .returning(agents.c.agent_id, agents.c.last_seq)
        )
        seqs = {agent_id: int(seq) for agent_id, seq in bumped.all()}
        await self._conn.execute(
            inbox.insert(),
            [{"recipient": r, "seq": s, "message_id": message.message_id} for r, s in sorted(seqs.items())],
        )
        return seqs

    async def read_inbox(self, agent_id: str, *, after: int, limit: int) -> list[InboxEntry]:
        stmt = (
            select(inbox.c.seq, messages)
            .join(messages, messages.c.message_id == inbox.c.message_id)
            .where(inbox.c.recipient == agent_id, inbox.c.seq > after)
            .order_by(inbox.c.seq)
            .limit(limit)
        )
        return [
            InboxEntry(
                seq=int(r.seq),
                message=MessageRecord(
                    message_id=r.message_id,
                    sender=r.sender,
                    address=dict(r.address),
                    subject=r.subject,
                    body=r.body,
                    sent_at=r.sent_at,
                ),
            )
            for r in (await self._conn.execute(stmt)).all()
        ]

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        row = (
            await self._conn.execute(
                select(idempotency).where(idempotency.c.scope == scope, idempotency.c.idem_key == key)
            )
        ).first()
        if row is None:
            return None
        m = row._mapping
        return IdempotencyRecord(
            scope=m["scope"],
            key=m["idem_key"],
            operation=m["operation"],
            fingerprint=m["fingerprint"],
            result=dict(m["result"]),
            created_at=m["created_at"],
            expires_at=m["expires_at"],
        )

    async def put_idempotency(self, record: IdempotencyRecord) -> bool:
        values = {
            "scope": record.scope,
            "idem_key": record.key,
            "operation": record.operation,
            "fingerprint": record.fingerprint,
            "result": record.result,
            "created_at": record.created_at,
            "expires_at": record.expires_at,
        }
        stmt = insert_ignore(self._dialect, idempotency, values, conflict=["scope", "idem_key"])
        return _rowcount(await self._conn.execute(stmt)) == 1

    async def sweep(self, policy: SweepPolicy) -> SweepReport:
        report = SweepReport()
        report.idempotency_keys = _rowcount(
            await self._conn.execute(delete(idempotency).where(idempotency.c.expires_at <= policy.now))
        )
        gone = agents.c.expires_at < policy.agents_expired_before
        # Counted before the cascade removes them, so the report says what went.
        report.inbox_entries = int(
            (
                await self._conn.execute(
                    select(func.count())
                    .select_from(inbox.join(agents, agents.c.agent_id == inbox.c.recipient))
                    .where(gone)
                )
            ).scalar_one()
        )
        await self._conn.execute(delete(inbox).where(inbox.c.recipient.in_(select(agents.c.agent_id).where(gone))))
        report.agents = _rowcount(await self._conn.execute(delete(agents).where(gone)))
        read = exists().where(agents.c.agent_id == inbox.c.recipient, inbox.c.seq <= agents.c.read_cursor)
        old = inbox.c.message_id.in_(select(messages.c.message_id).where(messages.c.sent_at < policy.read_before))
        report.inbox_entries += _rowcount(await self._conn.execute(delete(inbox).where(and_(read, old))))
        orphan = ~exists().where(inbox.c.message_id == messages.c.message_id)
        report.messages = _rowcount(
            await self._conn.execute(delete(messages).where(messages.c.sent_at < policy.read_before, orphan))
        )
        return report


class SqlMeshStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlMeshTx]:
        async with self.engine.begin() as conn:
            yield SqlMeshTx(conn)
