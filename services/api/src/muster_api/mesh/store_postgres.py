"""What the mesh's SQL store does differently on PostgreSQL: storing a message is one round trip (the message and its
inbox entries in one statement; for a direct send, the sender's renewal and the recipient's sequence too), and so is
an inbox read (the lease renewal and the page in one statement, outside any transaction: one statement is atomic on
its own, and BEGIN and COMMIT would be two more round trips). No wake-up rides these statements: the mesh publishes
them after the commit (see muster_api.db.notify). A task claim is one statement too, whose message to the poster waits
in ``mesh_inbox_pending`` for a delivery the claims of the moment share (``muster_api.mesh.inbox_pending``).

The one-statement send and read run on asyncpg connections of the store's own (``DriverPool``), a directory page on
the asyncpg connection under the pooled one: through SQLAlchemy, checking the connection out, compiling the statement
and processing its rows cost more CPU than PostgreSQL spends running it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import anyio
from sqlalchemy import BigInteger, ColumnElement, Select, String, Update, bindparam, literal_column, text, type_coerce
from sqlalchemy.engine import Dialect as SaDialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.dialect import Dialect
from muster_api.db.driver_pool import DriverPool, asyncpg_dsn
from muster_api.mesh.claims_store import RENEW_AND_CLAIMS_PG
from muster_api.mesh.inbox_pending import Deliverer, Wake, deliver_pending, reached
from muster_api.mesh.store import (
    FOLLOW,
    SqlMeshStore,
    SqlMeshTx,
    TransactionNotifier,
    agent_from,
    mark_statement,
    message_values,
    shown_columns,
)
from muster_api.mesh.tables import agents, messages
from muster_api.mesh.tasks_store import CLAIM_PG, task_record
from muster_mesh import AgentFilter, AgentRecord, InboxEntry, MessageRecord
from muster_mesh.claims import ClaimRecord
from muster_mesh.directory import ShownRow
from muster_mesh.records import Marks, SweepPolicy, SweepReport
from muster_mesh.tasks import CLAIMED_NOTE, TOKEN_NOTE, ClaimedInOneStep, ClaimStep

log = logging.getLogger("muster.mesh")

# The message and its inbox entries in one round trip. No NOTIFY here: wake-ups leave after the commit (see
# muster_api.db.notify), since PostgreSQL commits the transactions that notify one at a time.
_ADD_MESSAGE = text("""
WITH m AS (
    INSERT INTO mesh_messages (message_id, sender, body, thread_id, sent_at)
    VALUES (:message_id, :sender, :body, :thread_id, :sent_at)
    RETURNING message_id
)
INSERT INTO mesh_inbox (recipient, seq, message_id)
SELECT u.recipient, u.seq, m.message_id
FROM m, unnest(CAST(:recipients AS text[]), CAST(:seqs AS bigint[])) AS u(recipient, seq)
""").bindparams(bindparam("sent_at", type_=messages.c.sent_at.type))


# A direct send's recipient bump, message and inbox entry in one round trip. Data-modifying CTEs run to completion
# whether or not the final SELECT reads them; with no live recipient, ``b`` is empty and so is the rest.
_DELIVER = text("""
WITH b AS (
    UPDATE mesh_agents SET last_seq = last_seq + 1
    WHERE agent_id = :to AND expires_at > :live_at
    RETURNING agent_id, last_seq
), m AS (
    INSERT INTO mesh_messages (message_id, sender, body, thread_id, sent_at)
    SELECT :message_id, :sender, :body, :thread_id, :sent_at FROM b
    RETURNING message_id
), i AS (
    INSERT INTO mesh_inbox (recipient, seq, message_id)
    SELECT b.agent_id, b.last_seq, m.message_id FROM b, m
    RETURNING 1
)
SELECT b.last_seq FROM b
""").bindparams(
    bindparam("sent_at", type_=messages.c.sent_at.type), bindparam("live_at", type_=agents.c.expires_at.type)
)


@lru_cache(maxsize=64)
def _driver_select(stmt: Select[Any] | Update, dialect: SaDialect) -> tuple[str, tuple[str, ...]]:
    """A select compiled once for asyncpg: its SQL and the names of its positional parameters, in order."""
    compiled = stmt.compile(dialect=dialect)
    return str(compiled), tuple(compiled.positiontup or ())


async def _fetch_on_driver(conn: AsyncConnection, sql: str, *args: Any) -> list[Any]:
    """Rows of one statement run on the asyncpg connection under ``conn`` (no SQLAlchemy statement or result
    processing)."""
    driver = (await conn.get_raw_connection()).driver_connection
    assert driver is not None
    try:
        return list(await driver.fetch(sql, *args))
    except BaseException:
        # Past SQLAlchemy's error handling: a connection in an unknown state must not go back to the pool.
        with anyio.CancelScope(shield=True):
            await conn.invalidate()
        raise


def _timestamp(name: str) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    # The datetime as asyncpg decodes it (UTC-aware: pydantic-core encodes it), and its microseconds since the epoch
    # (extract gives exact numeric seconds).
    column = getattr(agents.c, name)
    epoch_us = literal_column(f"CAST(extract(epoch FROM mesh_agents.{name}) * 1000000 AS bigint)", BigInteger)
    return type_coerce(column, String).label(name), epoch_us.label(f"{name}_us")


# A directory page's rows come out of asyncpg ready to encode.
_SHOWN = shown_columns(_timestamp)


class PostgresMeshTx(SqlMeshTx):
    async def list_agents(self, where: AgentFilter, *, after: str | None, limit: int) -> list[AgentRecord]:
        # On the asyncpg connection: SQLAlchemy's execution and row machinery cost more than the statement (the
        # parameters need no processing: asyncpg takes the aware datetimes as they are).
        stmt, params = self._list_query(where, after, limit)
        sql, names = _driver_select(stmt, self._conn.dialect)
        return [agent_from(r) for r in await _fetch_on_driver(self._conn, sql, *(params[n] for n in names))]

    async def directory_rows(self, where: AgentFilter, *, after: str | None, limit: int) -> list[ShownRow]:
        stmt, params = self._list_query(where, after, limit, _SHOWN)
        sql, names = _driver_select(stmt, self._conn.dialect)
        return [tuple(r) for r in await _fetch_on_driver(self._conn, sql, *(params[n] for n in names))]

    async def deliver(self, message: MessageRecord, to: str, live_at: datetime) -> dict[str, int]:
        row = (await self._conn.execute(_DELIVER, {**message_values(message), "to": to, "live_at": live_at})).first()
        return {to: int(row.last_seq)} if row is not None else {}

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        recipients = sorted(seqs)
        params = {**message_values(message), "recipients": recipients, "seqs": [seqs[r] for r in recipients]}
        await self._conn.execute(_ADD_MESSAGE, params)

    async def sweep(self, policy: SweepPolicy) -> SweepReport:
        # Pending messages a killed process left (its claims committed, their delivery never ran) reach their
        # recipients before the expired ones go; the recipients are woken once this commits.
        delivered = await deliver_pending(lambda sql, *args: _fetch_on_driver(self._conn, sql, *args), policy.now)
        report = await super().sweep(policy)
        report.woken |= reached(delivered)
        return report


# $1 now, $2 the new expiry, $3 the token hash, $4 the TTL the expiry was computed for, $5 after (NULL: from the
# read cursor), $6 the page size, $7 how many of the page to record as read (receipts), $8 whether the read is the
# agent's activity (a follower's is not: it renews the lease only). The UPDATE's WHERE holds every
# condition of a plain read: a row that fails one is left alone and the caller takes the transaction that says why.
# One row per entry, or one with NULL entry columns.
_RENEW_AND_READ = """
WITH a AS (
    UPDATE mesh_agents SET last_seen_at = $1, expires_at = $2,
        active_at = CASE WHEN $8::boolean THEN $1 ELSE active_at END
    WHERE token_hash = $3 AND expires_at > $1 AND ttl_seconds = $4
      AND ($5::bigint IS NULL OR $5::bigint <= last_seq)
    RETURNING *
), e AS (
    SELECT a.*, x.seq, x.message_id, x.sender, x.body, x.thread_id, x.sent_at
    FROM a LEFT JOIN LATERAL (
        SELECT i.seq, m.message_id, m.sender, m.body, m.thread_id, m.sent_at
        FROM mesh_inbox AS i JOIN mesh_messages AS m ON m.message_id = i.message_id
        WHERE i.recipient = a.agent_id
          AND i.seq > CASE WHEN $5::bigint IS NULL THEN a.read_cursor ELSE GREATEST($5::bigint, a.floor_seq) END
        ORDER BY i.seq
        LIMIT $6
    ) AS x ON true
), r AS (
    UPDATE mesh_inbox SET read_at = COALESCE(mesh_inbox.read_at, $1)
    FROM (SELECT agent_id, seq FROM e WHERE seq IS NOT NULL ORDER BY seq LIMIT $7) AS s
    WHERE mesh_inbox.recipient = s.agent_id AND mesh_inbox.seq = s.seq
)
SELECT * FROM e ORDER BY seq
"""


# $1 the sender, $2 its token hash, $3 now (sent_at), $4 its new expiry, $5 the TTL that expiry was computed for, $6
# the recipient, $7 message_id, $8 body, $9 thread_id. Both rows are locked first, in agent_id order (as every writer
# of two agent rows locks them), and the conditions are checked on the locked rows: when one fails, nothing is
# written and the caller takes the transaction that says why. The sender's renewal and the recipient's sequence then
# update rows this statement already holds.
_RENEW_AND_DELIVER = """
WITH l AS MATERIALIZED (
    SELECT agent_id, token_hash, ttl_seconds, expires_at FROM mesh_agents
    WHERE agent_id = $1 OR agent_id = $6
    ORDER BY agent_id
    FOR UPDATE
), ok AS MATERIALIZED (
    SELECT count(*) = 2 AS go FROM l
    WHERE (agent_id = $1 AND token_hash = $2 AND ttl_seconds = $5 AND expires_at > $3)
       OR (agent_id = $6 AND expires_at > $3)
), s AS (
    UPDATE mesh_agents SET last_seen_at = $3, expires_at = $4, active_at = $3
    WHERE agent_id = $1 AND (SELECT go FROM ok)
    RETURNING agent_id
), b AS (
    UPDATE mesh_agents SET last_seq = last_seq + 1
    WHERE agent_id = $6 AND (SELECT go FROM ok)
    RETURNING agent_id, last_seq, followed_until
), m AS (
    INSERT INTO mesh_messages (message_id, sender, body, thread_id, sent_at)
    SELECT $7::text, $1, $8::text, $9::text, $3 FROM b
    RETURNING message_id
), i AS (
    INSERT INTO mesh_inbox (recipient, seq, message_id)
    SELECT b.agent_id, b.last_seq, m.message_id FROM b, m
    RETURNING 1
)
SELECT b.last_seq, COALESCE(b.followed_until > $3, false) AS followed FROM b, s
"""


class PostgresMeshStore(SqlMeshStore):
    tx_class = PostgresMeshTx

    def __init__(
        self,
        engine: AsyncEngine,
        dialect: Dialect,
        notifier: TransactionNotifier | None = None,
        *,
        wake: Wake | None = None,
    ) -> None:
        """``wake`` wakes the agents that a delivery of held-back messages (``inbox_pending``) reached: the
        instance's notifier's ``publish``. Without it, they see those messages at their next read."""
        super().__init__(engine, dialect, notifier)
        self.driver = DriverPool(asyncpg_dsn(engine))
        self.deliverer = Deliverer(self.driver.fetch, wake)

    async def deliver_leftovers(self, now: datetime) -> None:
        """Pending messages a killed process left, delivered (at start: the sweeper's first round comes later), and
        their recipients woken."""
        await self.deliverer.deliver_leftovers(now)

    async def renew_and_deliver(
        self, token_hash: str, to: str, now: datetime, *, message_id: str, body: str, thread_id: str | None
    ) -> tuple[InboxEntry, bool] | None:
        # The sender from the token's agent_id and TTL seen before (the statement re-checks both); a message to
        # oneself takes the transaction.
        sender, ttl = self.token_ids.get(token_hash), self.ttl_hints.get(token_hash)
        if sender is None or ttl is None or sender == to:
            return None
        expires_at = now + timedelta(seconds=ttl)
        args = (sender, token_hash, now, expires_at, ttl, to, message_id, body, thread_id)
        rows = await self.driver.fetch(_RENEW_AND_DELIVER, *args)
        if not rows:
            return None
        entry = InboxEntry(seq=rows[0]["last_seq"], message=MessageRecord(message_id, sender, body, thread_id, now))
        return entry, bool(rows[0]["followed"])

    async def renew_and_read(
        self, token_hash: str, now: datetime, *, after: int | None, limit: int, shown: int = 0, active: bool = True
    ) -> tuple[AgentRecord, list[InboxEntry]] | None:
        # The expiry is computed here from the TTL seen for this token (the WHERE re-checks it): without one, the
        # transaction reads the row first.
        ttl = self.ttl_hints.get(token_hash)
        if ttl is None:
            return None
        rows = await self.driver.fetch(
            _RENEW_AND_READ, now, now + timedelta(seconds=ttl), token_hash, ttl, after, limit, shown, active
        )
        if not rows:
            return None
        entries = [
            InboxEntry(
                seq=r["seq"],
                message=MessageRecord(
                    message_id=r["message_id"],
                    sender=r["sender"],
                    body=r["body"],
                    thread_id=r["thread_id"],
                    sent_at=r["sent_at"],
                ),
            )
            for r in rows
            if r["seq"] is not None
        ]
        return agent_from(rows[0]), entries

    async def renew_and_claims(self, token_hash: str, now: datetime, repo: str) -> list[ClaimRecord] | None:
        ttl = self.ttl_hints.get(token_hash)
        if ttl is None:
            return None
        rows = await self.driver.fetch(RENEW_AND_CLAIMS_PG, now, now + timedelta(seconds=ttl), token_hash, ttl, repo)
        if not rows:
            return None
        # The statement's columns are ClaimRecord's fields in order (exclusive a bool already): built by position,
        # at half the CPU of reading each column by name.
        return [ClaimRecord(*r) for r in rows if r[0] is not None]

    async def claim_in_one_step(self, step: ClaimStep) -> ClaimedInOneStep | None:
        # As a read: the expiry from the TTL seen for this token (the statement re-checks it).
        ttl = self.ttl_hints.get(step.token_hash)
        if ttl is None:
            return None
        now = step.now
        args = (step.token_hash, now, now + timedelta(seconds=ttl), ttl, step.max_attempts, step.fail_reason)
        filters = (step.only_role, step.only_repo, step.only_cap)
        rows = await self.driver.fetch(CLAIM_PG, *args, *filters, step.message_id, CLAIMED_NOTE, TOKEN_NOTE)
        if not rows:
            return None
        row = rows[0]
        if row["task_id"] is None:
            return ClaimedInOneStep(row["caller"], None, None)
        return ClaimedInOneStep(row["caller"], task_record(row), await self._told(step.message_id, now))

    async def _told(self, message_id: str, now: datetime) -> int | None:
        """The poster's message, pending since the claim, once it is in the poster's inbox: its sequence."""
        try:
            return await self.deliverer.deliver(message_id, now)
        except Exception:
            # The claim is committed: an error here would leave the caller holding a task it was told it did not
            # get. The message stays pending, for the next delivery or the sweeper; no wake-up leaves for it.
            log.exception("the poster's message of a task claim stays pending")
            return None

    async def follow(self, agent_id: str, until: datetime) -> None:
        sql, names = _driver_select(FOLLOW, self.engine.dialect)
        params = {"p_id": agent_id, "p_until": until}
        await self.driver.fetch(sql, *(params[n] for n in names))

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        sql, names = _driver_select(mark_statement(marks), self.engine.dialect)
        params = {"p_id": agent_id, "p_after": after, "p_through": through, "p_now": now}
        await self.driver.fetch(sql, *(params[n] for n in names))

    async def aclose(self) -> None:
        await self.driver.aclose()


__all__ = ["PostgresMeshStore", "PostgresMeshTx"]
