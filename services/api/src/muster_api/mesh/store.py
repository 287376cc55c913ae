"""``SqlMeshStore``: the mesh's rows in the service's database (SQLite or PostgreSQL), one SQL transaction per
``MeshTx``, one statement per store call.

Locking: on PostgreSQL ``for_update``/``lock_agents`` take row locks (``SELECT … FOR UPDATE``) and every UPDATE locks
what it writes; on SQLite every transaction holds the database write lock from its start (``BEGIN IMMEDIATE`` in
``db.engine``).

Hot statements are built once, at import, with bind parameters: building a statement costs more Python time than
SQLite takes to run it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import anyio
from sqlalchemy import (
    CursorResult,
    Select,
    String,
    Update,
    bindparam,
    case,
    delete,
    exists,
    select,
    text,
    tuple_,
    type_coerce,
    update,
)
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import BindParameter

from muster_api.db.dialect import insert_ignore, json_array_contains
from muster_api.mesh.tables import agents, idempotency, inbox, messages
from muster_mesh import (
    AgentChanges,
    AgentFilter,
    AgentRecord,
    IdempotencyRecord,
    InboxEntry,
    MessageRecord,
    SweepPolicy,
    SweepReport,
)

# How many token → ttl hints to keep (see SqlMeshStore); past it the map starts over.
MAX_HINTS = 50_000

_BY_ID = select(agents).where(agents.c.agent_id == bindparam("p_id"))
_BY_ID_LOCKED = _BY_ID.with_for_update()
_BY_TOKEN = select(agents).where(agents.c.token_hash == bindparam("p_hash"))
_BY_TOKEN_LOCKED = _BY_TOKEN.with_for_update()
_ID_BY_TOKEN = select(agents.c.agent_id).where(agents.c.token_hash == bindparam("p_hash"))
# The lease arithmetic stays in Python (expires_at is computed, never derived in SQL): the caller passes the expiry
# for the TTL it expects, and the row must still have that TTL.
_RENEW_BY_TOKEN = (
    update(agents)
    .where(
        agents.c.token_hash == bindparam("p_hash"),
        agents.c.expires_at > bindparam("p_now"),
        agents.c.ttl_seconds == bindparam("p_ttl"),
    )
    .values(last_seen_at=bindparam("p_seen"), expires_at=bindparam("p_exp"))
    .returning(*agents.c)
)
_TOUCH = (
    update(agents)
    .where(
        agents.c.agent_id == bindparam("p_id"),
        agents.c.token_hash == bindparam("p_hash"),
        agents.c.expires_at > bindparam("p_now"),
    )
    .values(last_seen_at=bindparam("p_seen"), expires_at=bindparam("p_exp"))
)
_BUMP_ONE = (
    update(agents)
    .where(agents.c.agent_id == bindparam("p_id"), agents.c.expires_at > bindparam("p_now"))
    .values(last_seq=agents.c.last_seq + 1)
    .returning(agents.c.agent_id, agents.c.last_seq)
)
_SET_CURSOR = update(agents).where(agents.c.agent_id == bindparam("p_id")).values(read_cursor=bindparam("p_cursor"))
_END_LEASE = (
    update(agents)
    .where(agents.c.agent_id == bindparam("p_id"))
    .values(last_seen_at=bindparam("p_now"), expires_at=bindparam("p_now"))
)
_INSERT_MESSAGE = messages.insert()
_INSERT_INBOX = inbox.insert()
_READ_INBOX = (
    select(
        inbox.c.seq, messages.c.message_id, messages.c.sender, messages.c.body, messages.c.thread_id, messages.c.sent_at
    )
    .join(messages, messages.c.message_id == inbox.c.message_id)
    .where(inbox.c.recipient == bindparam("p_id"), inbox.c.seq > bindparam("p_after"))
    .order_by(inbox.c.seq)
    .limit(bindparam("p_limit"))
)
_GET_IDEMPOTENCY = select(idempotency).where(
    idempotency.c.scope == bindparam("p_scope"), idempotency.c.idem_key == bindparam("p_key")
)


_PG_ADD_MESSAGE_SQL = """
WITH m AS (
    INSERT INTO mesh_messages (message_id, sender, body, thread_id, sent_at)
    VALUES (:message_id, :sender, :body, :thread_id, :sent_at)
    RETURNING message_id
), i AS (
    INSERT INTO mesh_inbox (recipient, seq, message_id)
    SELECT u.recipient, u.seq, m.message_id
    FROM m, unnest(CAST(:recipients AS text[]), CAST(:seqs AS bigint[])) AS u(recipient, seq)
    RETURNING 1
)
SELECT {notify} FROM (SELECT count(*) AS n FROM i) AS done
"""
_PG_ADD_MESSAGE = text(_PG_ADD_MESSAGE_SQL.format(notify="pg_notify(:channel, :payload)")).bindparams(
    bindparam("sent_at", type_=messages.c.sent_at.type)
)
_PG_ADD_MESSAGE_QUIET = text(_PG_ADD_MESSAGE_SQL.format(notify="done.n, :channel, :payload")).bindparams(
    bindparam("sent_at", type_=messages.c.sent_at.type)
)


# SQLite's hot send statements, run on the driver connection (aiosqlite) inside the same transaction: through
# SQLAlchemy's adapter each statement is three or four hops to aiosqlite's thread (cursor, execute, fetch, close),
# here one. The SQL is SQLAlchemy's own compilation of the statements above, so both paths run the same text.
_SQLITE_NAMED = sqlite_dialect.dialect(paramstyle="named")
_SQLITE_RENEW = str(_RENEW_BY_TOKEN.compile(dialect=_SQLITE_NAMED))
_SQLITE_BUMP_ONE = str(_BUMP_ONE.compile(dialect=_SQLITE_NAMED))
_SQLITE_INSERT_MESSAGE = str(_INSERT_MESSAGE.compile(dialect=_SQLITE_NAMED))
_SQLITE_INSERT_INBOX = str(_INSERT_INBOX.compile(dialect=_SQLITE_NAMED))
# UTCDateTime's bind processing for SQLite (UTC, naive, SQLAlchemy's stored text format): the stored text and the
# compared text must be the same on both paths.
_SQLITE_TIME = agents.c.expires_at.type.dialect_impl(_SQLITE_NAMED).bind_processor(_SQLITE_NAMED)


def _sqlite_time(value: datetime) -> str:
    assert _SQLITE_TIME is not None
    return str(_SQLITE_TIME(value))


def _agent_tuple(row: Sequence[Any]) -> AgentRecord:
    """An agent from a driver row in ``agents.c`` order (SQLite: datetimes and caps as their stored text)."""
    return AgentRecord(
        agent_id=row[0],
        token_hash=row[1],
        role=row[2],
        repo=row[3],
        caps=tuple(json.loads(row[4])),
        status=row[5],
        ttl_seconds=row[6],
        last_seen_at=_utc(row[7]),
        status_since=_utc(row[8]),
        expires_at=_utc(row[9]),
        last_seq=row[10],
        read_cursor=row[11],
        floor_seq=row[12],
    )


def _p(name: str, column: str) -> BindParameter[Any]:
    return bindparam(name, type_=agents.c[column].type)


@lru_cache(maxsize=64)
def _renew_checkin(role: bool, repo: bool, caps: bool, status: bool, keep_ttl: bool) -> Update:
    """UPDATE … RETURNING for a check-in renewal setting these fields (one statement per shape, built once)."""
    values: dict[str, Any] = {
        "last_seen_at": _p("p_seen", "last_seen_at"),
        "expires_at": _p("p_exp", "expires_at"),
        "ttl_seconds": _p("p_ttl_new", "ttl_seconds"),
    }
    for given, column in ((role, "role"), (repo, "repo"), (caps, "caps"), (status, "status")):
        if given:
            values[column] = _p(f"p_{column}", column)
    if status:
        # Right-hand sides see the row's old values: the status age restarts only when the text changes.
        values["status_since"] = case(
            (agents.c.status == _p("p_status_old", "status"), agents.c.status_since),
            else_=_p("p_since", "status_since"),
        )
    stmt = update(agents).where(
        agents.c.agent_id == bindparam("p_id"),
        agents.c.token_hash == bindparam("p_hash"),
        agents.c.expires_at > _p("p_now", "expires_at"),
    )
    if keep_ttl:
        stmt = stmt.where(agents.c.ttl_seconds == bindparam("p_ttl_old"))
    return stmt.values(values).returning(*agents.c)


def _agent(row: Row[Any]) -> AgentRecord:
    m = row._mapping
    return AgentRecord(
        agent_id=m["agent_id"],
        token_hash=m["token_hash"],
        role=m["role"],
        repo=m["repo"],
        caps=tuple(m["caps"]),
        status=m["status"],
        ttl_seconds=m["ttl_seconds"],
        last_seen_at=m["last_seen_at"],
        status_since=m["status_since"],
        expires_at=m["expires_at"],
        last_seq=m["last_seq"],
        read_cursor=m["read_cursor"],
        floor_seq=m["floor_seq"],
    )


_TEXT_COLUMNS = ("caps", "last_seen_at", "status_since", "expires_at")


@lru_cache(maxsize=64)
def _list_statement(dialect: str, live: bool, role: bool, repo: bool, cap: bool, after: bool) -> Select[Any]:
    """A directory page for this filter shape, built once. On SQLite the JSON and datetime columns come back as their
    stored text: parsing a page's worth with ``fromisoformat``/``json.loads`` costs a fraction of SQLAlchemy's
    per-value result processing."""
    columns = [type_coerce(c, String) if dialect == "sqlite" and c.name in _TEXT_COLUMNS else c for c in agents.c]
    stmt = select(*columns).order_by(agents.c.agent_id).limit(bindparam("p_limit"))
    if live:
        stmt = stmt.where(agents.c.expires_at > _p("p_live", "expires_at"))
    if role:
        stmt = stmt.where(agents.c.role == bindparam("p_role"))
    if repo:
        stmt = stmt.where(agents.c.repo == bindparam("p_repo"))
    if cap:
        stmt = stmt.where(json_array_contains(dialect, agents.c.caps, bindparam("p_cap", type_=String)))
    if after:
        stmt = stmt.where(agents.c.agent_id > bindparam("p_after"))
    return stmt


def _utc(text_value: str) -> datetime:
    value = datetime.fromisoformat(text_value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _agent_text(row: Row[Any]) -> AgentRecord:
    m = row._mapping
    return AgentRecord(
        agent_id=m["agent_id"],
        token_hash=m["token_hash"],
        role=m["role"],
        repo=m["repo"],
        caps=tuple(json.loads(m["caps"])),
        status=m["status"],
        ttl_seconds=m["ttl_seconds"],
        last_seen_at=_utc(m["last_seen_at"]),
        status_since=_utc(m["status_since"]),
        expires_at=_utc(m["expires_at"]),
        last_seq=m["last_seq"],
        read_cursor=m["read_cursor"],
        floor_seq=m["floor_seq"],
    )


def _agent_values(record: AgentRecord) -> dict[str, Any]:
    return {
        "agent_id": record.agent_id,
        "token_hash": record.token_hash,
        "role": record.role,
        "repo": record.repo,
        "caps": list(record.caps),
        "status": record.status,
        "ttl_seconds": record.ttl_seconds,
        "last_seen_at": record.last_seen_at,
        "status_since": record.status_since,
        "expires_at": record.expires_at,
        "last_seq": record.last_seq,
        "read_cursor": record.read_cursor,
        "floor_seq": record.floor_seq,
    }


def _rowcount(result: Any) -> int:
    assert isinstance(result, CursorResult)
    return max(result.rowcount, 0)


class SqlMeshTx:
    def __init__(self, conn: AsyncConnection, store: SqlMeshStore) -> None:
        self._conn = conn
        self._store = store
        self._dialect = conn.dialect.name
        self._row_locks = self._dialect == "postgresql"
        self._driver: Any = None

    async def _sqlite(self) -> Any:
        """The aiosqlite connection under this transaction's SQLAlchemy connection (SQLite only)."""
        if self._driver is None:
            self._driver = (await self._conn.get_raw_connection()).driver_connection
        return self._driver

    async def get_agent(self, agent_id: str, *, for_update: bool = False) -> AgentRecord | None:
        stmt = _BY_ID_LOCKED if for_update and self._row_locks else _BY_ID
        row = (await self._conn.execute(stmt, {"p_id": agent_id})).first()
        return _agent(row) if row else None

    async def find_by_token(self, token_hash: str) -> AgentRecord | None:
        row = (await self._conn.execute(_BY_TOKEN, {"p_hash": token_hash})).first()
        return _agent(row) if row else None

    async def agent_id_for(self, token_hash: str) -> str | None:
        known = self._store.token_ids.get(token_hash)
        if known is not None:
            return known
        row = (await self._conn.execute(_ID_BY_TOKEN, {"p_hash": token_hash})).first()
        if row is None:
            return None
        self._store.remember_token(token_hash, row[0])
        return str(row[0])

    async def renew(self, token_hash: str, now: datetime) -> AgentRecord | None:
        # One statement when the token's TTL is known from an earlier call (the WHERE re-checks it, so a stale hint
        # only costs the fallback): select, then update.
        ttl = self._store.ttl_hints.get(token_hash)
        if ttl is not None and self._dialect == "sqlite":
            exp = now + timedelta(seconds=ttl)
            now_text = _sqlite_time(now)
            sqlite_params = {
                "p_hash": token_hash,
                "p_now": now_text,
                "p_ttl": ttl,
                "p_seen": now_text,
                "p_exp": _sqlite_time(exp),
            }
            rows = await (await self._sqlite()).execute_fetchall(_SQLITE_RENEW, sqlite_params)
            if rows:
                return _agent_tuple(rows[0])
        elif ttl is not None:
            params = {
                "p_hash": token_hash,
                "p_now": now,
                "p_ttl": ttl,
                "p_seen": now,
                "p_exp": now + timedelta(seconds=ttl),
            }
            row = (await self._conn.execute(_RENEW_BY_TOKEN, params)).first()
            if row is not None:
                return _agent(row)
        stmt = _BY_TOKEN_LOCKED if self._row_locks else _BY_TOKEN
        row = (await self._conn.execute(stmt, {"p_hash": token_hash})).first()
        if row is None:
            return None
        agent = _agent(row)
        if not agent.live_at(now):
            return agent
        self._store.hint(token_hash, agent.ttl_seconds)
        expires_at = now + timedelta(seconds=agent.ttl_seconds)
        await self.touch(agent.agent_id, token_hash, now, expires_at)
        return replace(agent, last_seen_at=now, expires_at=expires_at)

    async def touch(self, agent_id: str, token_hash: str, now: datetime, expires_at: datetime) -> bool:
        params = {"p_id": agent_id, "p_hash": token_hash, "p_now": now, "p_seen": now, "p_exp": expires_at}
        return _rowcount(await self._conn.execute(_TOUCH, params)) == 1

    async def renew_checkin(
        self, agent_id: str, token_hash: str, now: datetime, *, ttl_seconds: int | None, changes: AgentChanges
    ) -> AgentRecord | None:
        ttl = ttl_seconds
        if ttl is None:
            # Keeping the row's TTL: known from a hint, re-checked by the WHERE (a stale one costs the fallback).
            ttl = self._store.ttl_hints.get(token_hash)
            if ttl is not None:
                renewed = await self._renew_checkin(agent_id, token_hash, now, ttl, ttl, changes)
                if renewed is not None:
                    return renewed
            current = await self.get_agent(agent_id, for_update=True)
            if current is None or current.token_hash != token_hash or not current.live_at(now):
                return None
            ttl = current.ttl_seconds
            self._store.hint(token_hash, ttl)
            return await self._renew_checkin(agent_id, token_hash, now, ttl, ttl, changes)
        renewed = await self._renew_checkin(agent_id, token_hash, now, ttl, None, changes)
        if renewed is not None:
            self._store.hint(token_hash, ttl)
        return renewed

    async def _renew_checkin(
        self, agent_id: str, token_hash: str, now: datetime, ttl: int, keep: int | None, changes: AgentChanges
    ) -> AgentRecord | None:
        stmt = _renew_checkin(
            changes.role is not None,
            changes.repo is not None,
            changes.caps is not None,
            changes.status is not None,
            keep is not None,
        )
        params: dict[str, Any] = {
            "p_id": agent_id,
            "p_hash": token_hash,
            "p_now": now,
            "p_seen": now,
            "p_exp": now + timedelta(seconds=ttl),
            "p_ttl_new": ttl,
        }
        if keep is not None:
            params["p_ttl_old"] = keep
        if changes.role is not None:
            params["p_role"] = changes.role
        if changes.repo is not None:
            params["p_repo"] = changes.repo
        if changes.caps is not None:
            params["p_caps"] = list(changes.caps)
        if changes.status is not None:
            params.update(p_status=changes.status, p_status_old=changes.status, p_since=now)
        row = (await self._conn.execute(stmt, params)).first()
        return _agent(row) if row else None

    async def create_agent(self, record: AgentRecord) -> bool:
        stmt = insert_ignore(self._dialect, agents, _agent_values(record), conflict=["agent_id"])
        return _rowcount(await self._conn.execute(stmt)) == 1

    async def replace_agent(self, record: AgentRecord) -> None:
        values = _agent_values(record)
        del values["agent_id"]
        await self._conn.execute(update(agents).where(agents.c.agent_id == record.agent_id).values(values))

    async def set_cursor(self, agent_id: str, read_cursor: int) -> None:
        await self._conn.execute(_SET_CURSOR, {"p_id": agent_id, "p_cursor": read_cursor})

    async def end_lease(self, agent_id: str, now: datetime) -> None:
        await self._conn.execute(_END_LEASE, {"p_id": agent_id, "p_now": now})

    async def list_agents(self, where: AgentFilter, *, after: str | None, limit: int) -> list[AgentRecord]:
        # Walks ix_mesh_agents_roster in agent_id order from the cursor and stops at the page's end.
        stmt = _list_statement(
            self._dialect,
            where.live_at is not None,
            where.role is not None,
            where.repo is not None,
            where.cap is not None,
            after is not None,
        )
        params = {
            "p_live": where.live_at,
            "p_role": where.role,
            "p_repo": where.repo,
            "p_cap": where.cap,
            "p_after": after,
            "p_limit": limit,
        }
        rows = (await self._conn.execute(stmt, params)).all()
        return [_agent_text(r) for r in rows] if self._dialect == "sqlite" else [_agent(r) for r in rows]

    async def lock_agents(self, agent_ids: Sequence[str]) -> list[AgentRecord]:
        ids = sorted(set(agent_ids))
        if not ids:
            return []
        stmt = select(agents).where(agents.c.agent_id.in_(ids)).order_by(agents.c.agent_id)
        if self._row_locks:
            stmt = stmt.with_for_update()
        return [_agent(r) for r in (await self._conn.execute(stmt)).all()]

    async def bump(self, agent_ids: Sequence[str], live_at: datetime) -> dict[str, int]:
        ids = sorted(set(agent_ids))
        if len(ids) == 1 and self._dialect == "sqlite":
            params = {"p_id": ids[0], "p_now": _sqlite_time(live_at), "last_seq_1": 1}
            rows = await (await self._sqlite()).execute_fetchall(_SQLITE_BUMP_ONE, params)
            return {agent_id: int(seq) for agent_id, seq in rows}
        if len(ids) == 1:
            result = await self._conn.execute(_BUMP_ONE, {"p_id": ids[0], "p_now": live_at})
        else:
            result = await self._conn.execute(
                update(agents)
                .where(agents.c.agent_id.in_(ids), agents.c.expires_at > live_at)
                .values(last_seq=agents.c.last_seq + 1)
                .returning(agents.c.agent_id, agents.c.last_seq)
            )
        return {agent_id: int(seq) for agent_id, seq in result.all()}

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        if self._dialect == "postgresql":
            # One round trip: the message, its inbox entries and the NOTIFY in one statement.
            recipients = sorted(seqs)
            channel, payload = self._store.notify_payload(recipients)
            await self._conn.execute(
                _PG_ADD_MESSAGE if channel is not None else _PG_ADD_MESSAGE_QUIET,
                {
                    "message_id": message.message_id,
                    "sender": message.sender,
                    "body": message.body,
                    "thread_id": message.thread_id,
                    "sent_at": message.sent_at,
                    "recipients": recipients,
                    "seqs": [seqs[r] for r in recipients],
                    "channel": channel,
                    "payload": payload,
                },
            )
            if channel is None:
                await self._store.on_stored(self._conn, recipients)
            return
        if len(seqs) == 1 and self._dialect == "sqlite":
            ((recipient, seq),) = seqs.items()
            driver = await self._sqlite()
            await driver.execute_fetchall(
                _SQLITE_INSERT_MESSAGE,
                {
                    "message_id": message.message_id,
                    "sender": message.sender,
                    "body": message.body,
                    "thread_id": message.thread_id,
                    "sent_at": _sqlite_time(message.sent_at),
                },
            )
            await driver.execute_fetchall(
                _SQLITE_INSERT_INBOX, {"recipient": recipient, "seq": seq, "message_id": message.message_id}
            )
            await self._store.on_stored(self._conn, [recipient])
            return
        await self._conn.execute(
            _INSERT_MESSAGE,
            {
                "message_id": message.message_id,
                "sender": message.sender,
                "body": message.body,
                "thread_id": message.thread_id,
                "sent_at": message.sent_at,
            },
        )
        rows = [{"recipient": r, "seq": s, "message_id": message.message_id} for r, s in sorted(seqs.items())]
        await self._conn.execute(_INSERT_INBOX, rows[0] if len(rows) == 1 else rows)
        await self._store.on_stored(self._conn, list(seqs))

    async def read_inbox(self, agent_id: str, *, after: int, limit: int) -> list[InboxEntry]:
        result = await self._conn.execute(_READ_INBOX, {"p_id": agent_id, "p_after": after, "p_limit": limit})
        return [
            InboxEntry(
                seq=int(r[0]),
                message=MessageRecord(message_id=r[1], sender=r[2], body=r[3], thread_id=r[4], sent_at=r[5]),
            )
            for r in result.all()
        ]

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        row = (await self._conn.execute(_GET_IDEMPOTENCY, {"p_scope": scope, "p_key": key})).first()
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
        # Each kind of row in one bounded batch: DELETE … WHERE key IN (SELECT key … LIMIT n).
        n = policy.batch
        report = SweepReport()
        stale_keys = (
            select(idempotency.c.scope, idempotency.c.idem_key).where(idempotency.c.expires_at <= policy.now).limit(n)
        )
        report.idempotency_keys = _rowcount(
            await self._conn.execute(
                delete(idempotency).where(tuple_(idempotency.c.scope, idempotency.c.idem_key).in_(stale_keys))
            )
        )
        gone = select(agents.c.agent_id).where(agents.c.expires_at < policy.agents_expired_before).limit(n)
        gone_ids = [r[0] for r in (await self._conn.execute(gone)).all()]
        if gone_ids:
            report.inbox_entries = _rowcount(
                await self._conn.execute(delete(inbox).where(inbox.c.recipient.in_(gone_ids)))
            )
            report.agents = _rowcount(await self._conn.execute(delete(agents).where(agents.c.agent_id.in_(gone_ids))))
        read = (
            select(inbox.c.recipient, inbox.c.seq)
            .join(agents, agents.c.agent_id == inbox.c.recipient)
            .join(messages, messages.c.message_id == inbox.c.message_id)
            .where(inbox.c.seq <= agents.c.read_cursor, messages.c.sent_at < policy.read_before)
            .limit(n)
        )
        report.inbox_entries += _rowcount(
            await self._conn.execute(delete(inbox).where(tuple_(inbox.c.recipient, inbox.c.seq).in_(read)))
        )
        orphans = (
            select(messages.c.message_id)
            .where(
                messages.c.sent_at < policy.read_before, ~exists().where(inbox.c.message_id == messages.c.message_id)
            )
            .limit(n)
        )
        report.messages = _rowcount(
            await self._conn.execute(delete(messages).where(messages.c.message_id.in_(orphans)))
        )
        return report


class SqlMeshStore:
    """``on_stored`` runs inside the sending transaction (the PostgreSQL notifier NOTIFYs there: delivered exactly
    when the message commits, with no transaction of its own)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # token hash → TTL seen for it: lets a renewal be one UPDATE … RETURNING (see SqlMeshTx.renew).
        self.ttl_hints: dict[str, int] = {}
        # token hash → agent_id: fixed for good once issued (a new session gets a new token), so it can be cached.
        self.token_ids: dict[str, str] = {}
        self.notify_in_transaction: Callable[[AsyncConnection, Sequence[str]], Awaitable[None]] | None = None
        self.notify_payloads: Callable[[Sequence[str]], tuple[str | None, str | None]] | None = None
        self._serial = anyio.Lock() if engine.dialect.name == "sqlite" else None
        self.serial = self._serial is not None
        # SQLite: one connection kept for the store's serial transactions (see transaction); closed by ``aclose``.
        self._held: AsyncConnection | None = None

    def remember_token(self, token_hash: str, agent_id: str) -> None:
        if len(self.token_ids) >= MAX_HINTS:
            self.token_ids.clear()
        self.token_ids[token_hash] = agent_id

    def hint(self, token_hash: str, ttl_seconds: int) -> None:
        if len(self.ttl_hints) >= MAX_HINTS:
            self.ttl_hints.clear()
        self.ttl_hints[token_hash] = ttl_seconds

    async def on_stored(self, conn: AsyncConnection, recipients: list[str]) -> None:
        if self.notify_in_transaction is not None and recipients:
            await self.notify_in_transaction(conn, recipients)

    def notify_payload(self, recipients: list[str]) -> tuple[str | None, str | None]:
        """(channel, payload) for a NOTIFY sent with the message, or (None, None) without a notifier or when the
        recipients do not fit one payload (``on_stored`` then sends them in chunks)."""
        if self.notify_payloads is None:
            return None, None
        return self.notify_payloads(recipients)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlMeshTx]:
        if self._serial is None:
            async with self.engine.begin() as conn:
                yield SqlMeshTx(conn, self)
            return
        # SQLite has one writer at a time and every transaction here is BEGIN IMMEDIATE: connections racing for the
        # lock would wait in SQLite's busy handler, which sleeps (1, 2, 5, 10 … ms) instead of waking when the lock
        # frees. Queueing in-process hands the lock over at once; the busy handler still covers other writers.
        # The transactions are serial anyway, so they share one connection kept out of the pool: returning it would
        # cost a rollback (a hop to aiosqlite's thread) between the commit and the wake-ups.
        async with self._serial:
            if self._held is None or self._held.closed or self._held.invalidated:
                self._held = await self.engine.connect()
            conn = self._held
            async with conn.begin():
                yield SqlMeshTx(conn, self)

    async def aclose(self) -> None:
        """Give back the connection kept for SQLite's serial transactions (before the engine is disposed)."""
        if self._serial is None:
            return
        async with self._serial:
            held, self._held = self._held, None
            if held is not None:
                await held.close()


__all__ = ["SqlMeshStore", "SqlMeshTx"]
