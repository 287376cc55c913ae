"""``SqlMeshStore``: the mesh's rows in the service's database, one SQL transaction per ``MeshTx``, one statement per
store call. This module is the portable core; ``store_sqlite`` and ``store_postgres`` override only what must differ
(their fast paths and how transactions are opened); ``component.make_store`` lets the dialect pick the one to use.

Locking: where the database has row locks (``Dialect.row_locks``), ``for_update``/``lock_agents`` take them and every
UPDATE locks what it writes; SQLite holds the database write lock from each transaction's start.

Hot statements are built once, at import, with explicitly named bind parameters: building a statement costs more
Python time than SQLite takes to run it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, ClassVar, Protocol

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    CursorResult,
    Select,
    String,
    Text,
    Update,
    bindparam,
    case,
    cast,
    delete,
    exists,
    func,
    literal_column,
    select,
    tuple_,
    type_coerce,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import BindParameter

from muster_api.db.dialect import Dialect
from muster_api.mesh.claims_store import SqlClaims
from muster_api.mesh.claims_tables import claims
from muster_api.mesh.tables import agents, idempotency, inbox, messages
from muster_api.mesh.tasks_store import SqlTasks
from muster_mesh import (
    AgentChanges,
    AgentFilter,
    AgentRecord,
    IdempotencyRecord,
    InboxEntry,
    MessageRecord,
    ReceiptRecord,
    SweepPolicy,
    SweepReport,
)
from muster_mesh.claims import ClaimRecord
from muster_mesh.directory import ShownRow, shown_row
from muster_mesh.records import ACKED, READ, WOKEN, Marks
from muster_mesh.tasks import ClaimedInOneStep, ClaimStep

# How many token → ttl hints to keep (see SqlMeshStore); past it the map starts over.
MAX_HINTS = 50_000


def _p(name: str, column: str) -> BindParameter[Any]:
    return bindparam(name, type_=agents.c[column].type)


BY_ID = select(agents).where(agents.c.agent_id == bindparam("p_id"))
BY_TOKEN = select(agents).where(agents.c.token_hash == bindparam("p_hash"))
ID_BY_TOKEN = select(agents.c.agent_id).where(agents.c.token_hash == bindparam("p_hash"))
# The agent's activity rides the renewal that every call makes: p_active is now for an acting call, NULL for a
# follower's read (the lease is renewed, the activity kept).
_ACTIVE = func.coalesce(_p("p_active", "active_at"), agents.c.active_at)
# The lease arithmetic stays in Python (expires_at is computed, never derived in SQL): the caller passes the expiry
# for the TTL it expects, and the row must still have that TTL.
RENEW_BY_TOKEN = (
    update(agents)
    .where(
        agents.c.token_hash == bindparam("p_hash"),
        agents.c.expires_at > _p("p_now", "expires_at"),
        agents.c.ttl_seconds == bindparam("p_ttl"),
    )
    .values(last_seen_at=_p("p_seen", "last_seen_at"), expires_at=_p("p_exp", "expires_at"), active_at=_ACTIVE)
    .returning(*agents.c)
)
TOUCH = (
    update(agents)
    .where(
        agents.c.agent_id == bindparam("p_id"),
        agents.c.token_hash == bindparam("p_hash"),
        agents.c.expires_at > bindparam("p_now"),
    )
    .values(last_seen_at=bindparam("p_seen"), expires_at=bindparam("p_exp"), active_at=_ACTIVE)
)
# ``+ 1`` as a literal: the statement's only parameters are the ones named here.
_NEXT_SEQ = agents.c.last_seq + literal_column("1", BigInteger)
FOLLOW = (
    update(agents).where(agents.c.agent_id == bindparam("p_id")).values(followed_until=_p("p_until", "followed_until"))
)
FOLLOWED = select(agents.c.agent_id).where(
    agents.c.agent_id.in_(bindparam("p_ids", expanding=True)), agents.c.followed_until > _p("p_now", "followed_until")
)
BUMP_ONE = (
    update(agents)
    .where(agents.c.agent_id == bindparam("p_id"), agents.c.expires_at > _p("p_now", "expires_at"))
    .values(last_seq=_NEXT_SEQ)
    .returning(agents.c.agent_id, agents.c.last_seq, agents.c.followed_until)
)
BUMP_MANY = (
    update(agents)
    .where(agents.c.agent_id.in_(bindparam("p_ids", expanding=True)), agents.c.expires_at > bindparam("p_now"))
    .values(last_seq=_NEXT_SEQ)
    .returning(agents.c.agent_id, agents.c.last_seq)
)
SET_CURSOR = update(agents).where(agents.c.agent_id == bindparam("p_id")).values(read_cursor=bindparam("p_cursor"))
END_LEASE = (
    update(agents)
    .where(agents.c.agent_id == bindparam("p_id"))
    .values(last_seen_at=bindparam("p_now"), expires_at=bindparam("p_now"))
)
LOCK_AGENTS = (
    select(agents).where(agents.c.agent_id.in_(bindparam("p_ids", expanding=True))).order_by(agents.c.agent_id)
)
INSERT_MESSAGE = messages.insert()
INSERT_INBOX = inbox.insert()
# The columns a new inbox entry is given: its receipts start empty.
INBOX_ENTRY = ("recipient", "seq", "message_id")
READ_INBOX = (
    select(
        inbox.c.seq, messages.c.message_id, messages.c.sender, messages.c.body, messages.c.thread_id, messages.c.sent_at
    )
    .join(messages, messages.c.message_id == inbox.c.message_id)
    .where(inbox.c.recipient == bindparam("p_id"), inbox.c.seq > bindparam("p_after"))
    .order_by(inbox.c.seq)
    .limit(bindparam("p_limit"))
)
# Receipts: each first time kept (COALESCE), over a run of one inbox's sequences.
_MARKED = {WOKEN: inbox.c.woken_at, READ: inbox.c.read_at, ACKED: inbox.c.acked_at}
RECEIPTS = (
    select(
        messages.c.message_id,
        messages.c.sender,
        messages.c.thread_id,
        messages.c.sent_at,
        inbox.c.recipient,
        inbox.c.seq,
        inbox.c.woken_at,
        inbox.c.read_at,
        inbox.c.acked_at,
    )
    .select_from(messages.outerjoin(inbox, inbox.c.message_id == messages.c.message_id))
    .where(messages.c.message_id == bindparam("p_id"))
    .order_by(inbox.c.recipient, inbox.c.seq)
)


@lru_cache(maxsize=8)
def mark_statement(marks: Marks) -> Update:
    """The UPDATE that sets these receipt marks on a run of one inbox's entries, where not set yet."""
    now = bindparam("p_now", type_=inbox.c.read_at.type)
    values = {_MARKED[m].name: func.coalesce(_MARKED[m], now) for m in sorted(marks)}
    return (
        update(inbox)
        .where(
            inbox.c.recipient == bindparam("p_id"),
            inbox.c.seq > bindparam("p_after"),
            inbox.c.seq <= bindparam("p_through"),
        )
        .values(values)
    )


GET_IDEMPOTENCY = select(idempotency).where(
    idempotency.c.scope == bindparam("p_scope"), idempotency.c.idem_key == bindparam("p_key")
)

# Columns a directory page reads as the driver hands them over, without SQLAlchemy's per-value result processing
# (a Python call per value, 400 per page): SQLite's stored text, asyncpg's decoded values; the row mapper takes both.
_RAW_COLUMNS = ("last_seen_at", "status_since", "expires_at", "followed_until", "active_at")


def stored_time(value: datetime | str) -> datetime:
    """A stored datetime, whether the driver decoded it or handed over its stored text (UTC either way)."""
    if isinstance(value, datetime):
        return value
    if value[-6] in "+-":
        return datetime.fromisoformat(value).astimezone(UTC)
    # Naive text is UTC (UTCDateTime stores it so): parsed with the zone appended, several times faster than
    # attaching it afterwards with ``replace``, three times per row of a directory page.
    return datetime.fromisoformat(value + "+00:00")


def _caps(value: list[str] | str) -> tuple[str, ...]:
    return _caps_text(value) if isinstance(value, str) else tuple(value)


@lru_cache(maxsize=1024)
def _caps_text(value: str) -> tuple[str, ...]:
    # Few distinct capability lists across a roster: a cached tuple costs a lookup where json.loads costs a parse.
    return tuple(json.loads(value))


def agent_from(m: Mapping[Any, Any]) -> AgentRecord:
    """The one row mapper of ``mesh_agents``, by column name, for rows from SQLAlchemy or from a driver."""
    return AgentRecord(
        agent_id=m["agent_id"],
        token_hash=m["token_hash"],
        role=m["role"],
        repo=m["repo"],
        caps=_caps(m["caps"]),
        status=m["status"],
        ttl_seconds=m["ttl_seconds"],
        last_seen_at=stored_time(m["last_seen_at"]),
        status_since=stored_time(m["status_since"]),
        expires_at=stored_time(m["expires_at"]),
        last_seq=m["last_seq"],
        read_cursor=m["read_cursor"],
        floor_seq=m["floor_seq"],
        followed_until=None if (followed := m.get("followed_until")) is None else stored_time(followed),
        active_at=None if (active := m.get("active_at")) is None else stored_time(active),
    )


def agent_values(record: AgentRecord) -> dict[str, Any]:
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
        "followed_until": record.followed_until,
        "active_at": record.active_at,
    }


def message_values(message: MessageRecord) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "sender": message.sender,
        "body": message.body,
        "thread_id": message.thread_id,
        "sent_at": message.sent_at,
    }


@lru_cache(maxsize=64)
def _renew_checkin(role: bool, repo: bool, caps: bool, status: bool, keep_ttl: bool, active: bool | None) -> Update:
    """UPDATE … RETURNING for a check-in renewal setting these fields (one statement per shape, built once);
    ``active`` as ``MeshTx.renew_checkin``'s."""
    values: dict[str, Any] = {
        "last_seen_at": _p("p_seen", "last_seen_at"),
        "expires_at": _p("p_exp", "expires_at"),
        "ttl_seconds": _p("p_ttl_new", "ttl_seconds"),
    }
    if active:
        values["active_at"] = _p("p_active", "active_at")
    for given, column in ((role, "role"), (repo, "repo"), (caps, "caps"), (status, "status")):
        if given:
            values[column] = _p(f"p_{column}", column)
    if status:
        # Right-hand sides see the row's old values: the status age restarts only when the text changes.
        values["status_since"] = case(
            (agents.c.status == _p("p_status_old", "status"), agents.c.status_since),
            else_=_p("p_since", "status_since"),
        )
        if active is None:
            # A renewal that changes the status text is the agent at work; one that repeats it is a heartbeat.
            values["active_at"] = case(
                (agents.c.status == _p("p_status_old", "status"), agents.c.active_at),
                else_=_p("p_active", "active_at"),
            )
    stmt = update(agents).where(
        agents.c.agent_id == bindparam("p_id"),
        agents.c.token_hash == bindparam("p_hash"),
        agents.c.expires_at > _p("p_now", "expires_at"),
    )
    if keep_ttl:
        stmt = stmt.where(agents.c.ttl_seconds == bindparam("p_ttl_old"))
    return stmt.values(values).returning(*agents.c)


def _renew_checkin_params(
    agent_id: str, token_hash: str, now: datetime, ttl: int, keep: int | None, changes: AgentChanges
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "p_id": agent_id,
        "p_hash": token_hash,
        "p_now": now,
        "p_seen": now,
        "p_exp": now + timedelta(seconds=ttl),
        "p_ttl_new": ttl,
        "p_active": now,
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
    return params


@dataclass(frozen=True, slots=True)
class _CheckinRenewal:
    """What one check-in renewal sets, whatever TTL it is tried with."""

    agent_id: str
    token_hash: str
    now: datetime
    changes: AgentChanges
    active: bool | None


def _page_column(column: Column[Any]) -> ColumnElement[Any]:
    if column.name == "caps":
        # JSON text on both databases: a roster holds few distinct lists, and the row mapper decodes each distinct
        # text once (``_caps_text``) where asyncpg's JSONB codec would parse every row's.
        return cast(column, Text).label("caps")
    return type_coerce(column, String) if column.name in _RAW_COLUMNS else column


@lru_cache(maxsize=64)
def _list_statement(
    dialect: Dialect, live: bool, role: bool, repo: bool, cap: bool, after: bool, shown: ShownColumns | None = None
) -> Select[Any]:
    """A directory page for this filter shape, built once: whole rows, the JSON and datetime columns as the driver
    decodes them (``_RAW_COLUMNS``), or the columns a page shows (``shown``: see ``directory_rows``)."""
    columns = list(shown) if shown is not None else [_page_column(c) for c in agents.c]
    # agent_id is unique, so the second key changes no order: it names ix_mesh_agents_roster as the one index that
    # gives this order without a sort. Ordered by agent_id alone, PostgreSQL's planner walks the primary key from
    # some cursors (its estimate within 1% of the roster's, and cheaper to start) and fetches each expired row to
    # test its lease: six times the buffers and ten times the time with five expired agents to one live.
    stmt = select(*columns).order_by(agents.c.agent_id, agents.c.expires_at).limit(bindparam("p_limit"))
    if live:
        stmt = stmt.where(agents.c.expires_at > _p("p_live", "expires_at"))
    if role:
        stmt = stmt.where(agents.c.role == bindparam("p_role"))
    if repo:
        stmt = stmt.where(agents.c.repo == bindparam("p_repo"))
    if cap:
        stmt = stmt.where(dialect.json_array_contains(agents.c.caps, bindparam("p_cap", type_=String)))
    if after:
        stmt = stmt.where(agents.c.agent_id > bindparam("p_after"))
    return stmt


@dataclass(frozen=True, eq=False)
class ShownColumns:
    """The columns of a ``ShownRow``, in its order, as one database renders them. Compared by identity: a statement
    cache key (SQL expressions overload ``==``)."""

    columns: tuple[ColumnElement[Any], ...]

    def __iter__(self) -> Iterator[ColumnElement[Any]]:
        return iter(self.columns)


def shown_columns(timestamp: Callable[[str], tuple[ColumnElement[Any], ColumnElement[Any]]]) -> ShownColumns:
    """The columns of a ``ShownRow``; ``timestamp`` renders a datetime column (by name) as its JSON value and its
    microseconds since the epoch."""
    c = agents.c
    return ShownColumns(
        (
            c.agent_id,
            c.role,
            c.repo,
            cast(c.caps, Text).label("caps"),
            c.status,
            *timestamp("status_since"),
            *timestamp("last_seen_at"),
            *timestamp("expires_at"),
            c.ttl_seconds,
            *timestamp("active_at"),
            *timestamp("followed_until"),
        )
    )


def _rowcount(result: Any) -> int:
    assert isinstance(result, CursorResult)
    return max(result.rowcount, 0)


class TransactionNotifier(Protocol):
    """Wakes other instances' readers from inside the sending transaction (delivered exactly at its commit)."""

    async def notify_in_transaction(self, conn: AsyncConnection, agent_ids: Sequence[str]) -> None: ...


class SqlMeshTx(SqlClaims, SqlTasks):
    """The portable statements of one mesh transaction. Subclasses replace a method only for a measured fast path."""

    _store: SqlMeshStore  # the mixins need only its dialect; everything here needs more of it

    def __init__(self, conn: AsyncConnection, store: SqlMeshStore) -> None:
        self._conn = conn
        self._store = store

    async def _first_agent(self, stmt: Any, params: Mapping[str, Any]) -> AgentRecord | None:
        row = (await self._conn.execute(stmt, params)).first()
        return agent_from(row._mapping) if row is not None else None

    async def get_agent(self, agent_id: str, *, for_update: bool = False) -> AgentRecord | None:
        return await self._first_agent(self._store.by_id_locked if for_update else BY_ID, {"p_id": agent_id})

    async def find_by_token(self, token_hash: str) -> AgentRecord | None:
        return await self._first_agent(BY_TOKEN, {"p_hash": token_hash})

    async def agent_id_for(self, token_hash: str) -> str | None:
        known = self._store.token_ids.get(token_hash)
        if known is not None:
            return known
        row = (await self._conn.execute(ID_BY_TOKEN, {"p_hash": token_hash})).first()
        if row is None:
            return None
        agent_id = str(row.agent_id)
        self._store.remember_token(token_hash, agent_id)
        return agent_id

    async def renew(self, token_hash: str, now: datetime, *, active: bool = True) -> AgentRecord | None:
        # One statement when the token's TTL is known from an earlier call (the WHERE re-checks it, so a stale hint
        # only costs the fallback): select, then update.
        ttl = self._store.ttl_hints.get(token_hash)
        if ttl is not None:
            renewed = await self._renew_with_ttl(token_hash, now, ttl, active)
            if renewed is not None:
                return renewed
        agent = await self._first_agent(self._store.by_token_locked, {"p_hash": token_hash})
        if agent is None or not agent.live_at(now):
            return agent
        self._store.hint(token_hash, agent.ttl_seconds)
        expires_at = now + timedelta(seconds=agent.ttl_seconds)
        await self._touch(agent.agent_id, token_hash, now, expires_at, active)
        return replace(agent, last_seen_at=now, expires_at=expires_at, active_at=now if active else agent.active_at)

    async def _renew_with_ttl(self, token_hash: str, now: datetime, ttl: int, active: bool) -> AgentRecord | None:
        params = {
            "p_hash": token_hash,
            "p_now": now,
            "p_ttl": ttl,
            "p_seen": now,
            "p_exp": now + timedelta(seconds=ttl),
            "p_active": now if active else None,
        }
        return await self._first_agent(RENEW_BY_TOKEN, params)

    async def touch(self, agent_id: str, token_hash: str, now: datetime, expires_at: datetime) -> bool:
        return await self._touch(agent_id, token_hash, now, expires_at, True)

    async def _touch(self, agent_id: str, token_hash: str, now: datetime, expires_at: datetime, active: bool) -> bool:
        params = {
            "p_id": agent_id,
            "p_hash": token_hash,
            "p_now": now,
            "p_seen": now,
            "p_exp": expires_at,
            "p_active": now if active else None,
        }
        return _rowcount(await self._conn.execute(TOUCH, params)) == 1

    async def renew_checkin(
        self,
        agent_id: str,
        token_hash: str,
        now: datetime,
        *,
        ttl_seconds: int | None,
        changes: AgentChanges,
        active: bool | None = None,
    ) -> AgentRecord | None:
        renew = _CheckinRenewal(agent_id, token_hash, now, changes, active)
        if ttl_seconds is not None:
            renewed = await self._renew_checkin(renew, ttl_seconds, None)
            if renewed is not None:
                self._store.hint(token_hash, ttl_seconds)
            return renewed
        # Keeping the row's TTL: known from a hint, re-checked by the WHERE (a stale one costs the fallback).
        ttl = self._store.ttl_hints.get(token_hash)
        if ttl is not None:
            renewed = await self._renew_checkin(renew, ttl, ttl)
            if renewed is not None:
                return renewed
        current = await self.get_agent(agent_id, for_update=True)
        if current is None or current.token_hash != token_hash or not current.live_at(now):
            return None
        ttl = current.ttl_seconds
        self._store.hint(token_hash, ttl)
        return await self._renew_checkin(renew, ttl, ttl)

    async def _renew_checkin(self, renew: _CheckinRenewal, ttl: int, keep: int | None) -> AgentRecord | None:
        changes = renew.changes
        stmt = _renew_checkin(
            changes.role is not None,
            changes.repo is not None,
            changes.caps is not None,
            changes.status is not None,
            keep is not None,
            renew.active,
        )
        params = _renew_checkin_params(renew.agent_id, renew.token_hash, renew.now, ttl, keep, changes)
        return await self._first_agent(stmt, params)

    async def create_agent(self, record: AgentRecord) -> bool:
        stmt = self._store.dialect.insert_ignore(agents, agent_values(record), conflict=["agent_id"])
        return _rowcount(await self._conn.execute(stmt)) == 1

    async def replace_agent(self, record: AgentRecord) -> None:
        values = agent_values(record)
        del values["agent_id"]
        await self._conn.execute(update(agents).where(agents.c.agent_id == record.agent_id).values(values))

    async def set_cursor(self, agent_id: str, read_cursor: int) -> None:
        await self._conn.execute(SET_CURSOR, {"p_id": agent_id, "p_cursor": read_cursor})

    async def end_lease(self, agent_id: str, now: datetime) -> None:
        await self._conn.execute(END_LEASE, {"p_id": agent_id, "p_now": now})

    def _list_query(
        self, where: AgentFilter, after: str | None, limit: int, shown: ShownColumns | None = None
    ) -> tuple[Select[Any], dict[str, Any]]:
        # Walks ix_mesh_agents_roster in agent_id order from the cursor and stops at the page's end.
        stmt = _list_statement(
            self._store.dialect,
            where.live_at is not None,
            where.role is not None,
            where.repo is not None,
            where.cap is not None,
            after is not None,
            shown,
        )
        params = {
            "p_live": where.live_at,
            "p_role": where.role,
            "p_repo": where.repo,
            "p_cap": where.cap,
            "p_after": after,
            "p_limit": limit,
        }
        return stmt, params

    async def list_agents(self, where: AgentFilter, *, after: str | None, limit: int) -> list[AgentRecord]:
        stmt, params = self._list_query(where, after, limit)
        return [agent_from(r._mapping) for r in (await self._conn.execute(stmt, params)).all()]

    async def directory_rows(self, where: AgentFilter, *, after: str | None, limit: int) -> list[ShownRow]:
        """Portable: from whole records. The SQLite and PostgreSQL stores read only the shown columns, rendered by
        the database."""
        return [shown_row(a) for a in await self.list_agents(where, after=after, limit=limit)]

    async def lock_agents(self, agent_ids: Sequence[str]) -> list[AgentRecord]:
        ids = sorted(set(agent_ids))
        if not ids:
            return []
        rows = (await self._conn.execute(self._store.lock_agents, {"p_ids": ids})).all()
        return [agent_from(r._mapping) for r in rows]

    async def bump(self, agent_ids: Sequence[str], live_at: datetime) -> dict[str, int]:
        ids = sorted(set(agent_ids))
        if len(ids) == 1:
            return await self._bump_one(ids[0], live_at)
        result = await self._conn.execute(BUMP_MANY, {"p_ids": ids, "p_now": live_at})
        return {row.agent_id: int(row.last_seq) for row in result.all()}

    async def _bump_one(self, agent_id: str, live_at: datetime) -> dict[str, int]:
        result = await self._conn.execute(BUMP_ONE, {"p_id": agent_id, "p_now": live_at})
        return {row.agent_id: int(row.last_seq) for row in result.all()}

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        await self._conn.execute(INSERT_MESSAGE, message_values(message))
        rows = [{"recipient": r, "seq": s, "message_id": message.message_id} for r, s in sorted(seqs.items())]
        await self._conn.execute(INSERT_INBOX, rows[0] if len(rows) == 1 else rows)
        await self._store.on_stored(self._conn, list(seqs))

    async def deliver(self, message: MessageRecord, to: str, live_at: datetime) -> dict[str, int]:
        seqs = await self.bump([to], live_at)
        if seqs:
            await self.add_message(message, seqs)
        return seqs

    async def read_inbox(self, agent_id: str, *, after: int, limit: int) -> list[InboxEntry]:
        result = await self._conn.execute(READ_INBOX, {"p_id": agent_id, "p_after": after, "p_limit": limit})
        return [
            InboxEntry(
                seq=int(m["seq"]),
                message=MessageRecord(
                    message_id=m["message_id"],
                    sender=m["sender"],
                    body=m["body"],
                    thread_id=m["thread_id"],
                    sent_at=m["sent_at"],
                ),
            )
            for m in result.mappings().all()
        ]

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        params = {"p_id": agent_id, "p_after": after, "p_through": through, "p_now": now}
        await self._conn.execute(mark_statement(marks), params)

    async def followed(self, agent_ids: Sequence[str], now: datetime) -> set[str]:
        ids = sorted(set(agent_ids))
        if not ids:
            return set()
        return {r.agent_id for r in (await self._conn.execute(FOLLOWED, {"p_ids": ids, "p_now": now})).all()}

    async def message_receipts(self, message_id: str) -> tuple[MessageRecord, list[ReceiptRecord]] | None:
        rows = (await self._conn.execute(RECEIPTS, {"p_id": message_id})).mappings().all()
        if not rows:
            return None
        first = rows[0]
        message = MessageRecord(first["message_id"], first["sender"], "", first["thread_id"], first["sent_at"])
        receipts = [
            ReceiptRecord(r["recipient"], int(r["seq"]), r["woken_at"], r["read_at"], r["acked_at"])
            for r in rows
            if r["recipient"] is not None
        ]
        return message, receipts

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        row = (await self._conn.execute(GET_IDEMPOTENCY, {"p_scope": scope, "p_key": key})).first()
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
        stmt = self._store.dialect.insert_ignore(idempotency, values, conflict=["scope", "idem_key"])
        return _rowcount(await self._conn.execute(stmt)) == 1

    async def sweep(self, policy: SweepPolicy) -> SweepReport:
        # Each kind of row in one bounded batch: DELETE … WHERE key IN (SELECT key … LIMIT n).
        report = SweepReport(idempotency_keys=await self._sweep_idempotency(policy))
        gone = select(agents.c.agent_id).where(agents.c.expires_at < policy.agents_expired_before).limit(policy.batch)
        gone_ids = [r.agent_id for r in (await self._conn.execute(gone)).all()]
        if gone_ids:
            report.inbox_entries = _rowcount(
                await self._conn.execute(delete(inbox).where(inbox.c.recipient.in_(gone_ids)))
            )
            await self._conn.execute(delete(claims).where(claims.c.holder.in_(gone_ids)))
            report.agents = _rowcount(await self._conn.execute(delete(agents).where(agents.c.agent_id.in_(gone_ids))))
        report.inbox_entries += await self._sweep_read(policy)
        report.messages = await self._sweep_orphans(policy)
        return report

    async def _sweep_idempotency(self, policy: SweepPolicy) -> int:
        stale = (
            select(idempotency.c.scope, idempotency.c.idem_key)
            .where(idempotency.c.expires_at <= policy.now)
            .limit(policy.batch)
        )
        key = tuple_(idempotency.c.scope, idempotency.c.idem_key)
        return _rowcount(await self._conn.execute(delete(idempotency).where(key.in_(stale))))

    async def _sweep_read(self, policy: SweepPolicy) -> int:
        read = (
            select(inbox.c.recipient, inbox.c.seq)
            .join(agents, agents.c.agent_id == inbox.c.recipient)
            .join(messages, messages.c.message_id == inbox.c.message_id)
            .where(inbox.c.seq <= agents.c.read_cursor, messages.c.sent_at < policy.read_before)
            .limit(policy.batch)
        )
        return _rowcount(
            await self._conn.execute(delete(inbox).where(tuple_(inbox.c.recipient, inbox.c.seq).in_(read)))
        )

    async def _sweep_orphans(self, policy: SweepPolicy) -> int:
        orphans = (
            select(messages.c.message_id)
            .where(
                messages.c.sent_at < policy.read_before, ~exists().where(inbox.c.message_id == messages.c.message_id)
            )
            .limit(policy.batch)
        )
        return _rowcount(await self._conn.execute(delete(messages).where(messages.c.message_id.in_(orphans))))


class SqlMeshStore:
    """The portable store: a pooled connection per transaction. ``on_stored`` runs inside the sending transaction
    (a notifier NOTIFYs there: delivered exactly when the message commits, with no transaction of its own)."""

    tx_class: ClassVar[type[SqlMeshTx]] = SqlMeshTx
    serial = False

    def __init__(self, engine: AsyncEngine, dialect: Dialect, notifier: TransactionNotifier | None = None) -> None:
        self.engine = engine
        self.dialect = dialect
        self.notifier = notifier
        # token hash → TTL seen for it: lets a renewal be one UPDATE … RETURNING (see SqlMeshTx.renew).
        self.ttl_hints: dict[str, int] = {}
        # token hash → agent_id: fixed for good once issued (a new session gets a new token), so it can be cached.
        self.token_ids: dict[str, str] = {}
        self.by_id_locked = dialect.lock_rows(BY_ID)
        self.by_token_locked = dialect.lock_rows(BY_TOKEN)
        self.lock_agents = dialect.lock_rows(LOCK_AGENTS)

    def remember_token(self, token_hash: str, agent_id: str) -> None:
        if len(self.token_ids) >= MAX_HINTS:
            self.token_ids.clear()
        self.token_ids[token_hash] = agent_id

    def hint(self, token_hash: str, ttl_seconds: int) -> None:
        if len(self.ttl_hints) >= MAX_HINTS:
            self.ttl_hints.clear()
        self.ttl_hints[token_hash] = ttl_seconds

    async def on_stored(self, conn: AsyncConnection, recipients: list[str]) -> None:
        if self.notifier is not None and recipients:
            await self.notifier.notify_in_transaction(conn, recipients)

    async def renew_and_read(
        self, token_hash: str, now: datetime, *, after: int | None, limit: int, shown: int = 0, active: bool = True
    ) -> tuple[AgentRecord, list[InboxEntry]] | None:
        """No one-step read in the portable core: the mesh reads in a transaction."""
        return None

    async def follow(self, agent_id: str, until: datetime) -> None:
        async with self.standalone() as tx:
            await tx._conn.execute(FOLLOW, {"p_id": agent_id, "p_until": until})

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        async with self.standalone() as tx:
            await tx.mark_inbox(agent_id, after=after, through=through, now=now, marks=marks)

    async def renew_and_deliver(
        self, token_hash: str, to: str, now: datetime, *, message_id: str, body: str, thread_id: str | None
    ) -> tuple[InboxEntry, bool] | None:
        """No one-step send in the portable core: the mesh sends in a transaction."""
        return None

    async def claim_in_one_step(self, step: ClaimStep) -> ClaimedInOneStep | None:
        """No one-step claim in the portable core: the tasks claim in a transaction."""
        return None

    async def renew_and_claims(self, token_hash: str, now: datetime, repo: str) -> list[ClaimRecord] | None:
        """No one-step check in the portable core: a check renews and reads statement by statement."""
        return None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlMeshTx]:
        async with self.engine.begin() as conn:
            yield self.tx_class(conn, self)

    def standalone(self) -> AbstractAsyncContextManager[SqlMeshTx]:
        return self._autocommit()

    @asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[SqlMeshTx]:
        # Each statement commits by itself, without the BEGIN and COMMIT round trips of a transaction (two of the
        # three round trips of a one-statement transaction).
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield self.tx_class(conn, self)

    async def aclose(self) -> None:
        """Give back whatever the store holds beyond the pool (before the engine is disposed)."""


__all__ = [
    "ShownColumns",
    "SqlMeshStore",
    "SqlMeshTx",
    "TransactionNotifier",
    "agent_from",
    "shown_columns",
    "stored_time",
]
