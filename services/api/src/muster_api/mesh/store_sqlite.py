"""What the mesh's SQL store does differently on SQLite: serial transactions on one held connection, the hot
statements run on the driver connection, the common send and inbox read as one call on the driver's thread, and
checkpoints off the path of the calls that write.

Through SQLAlchemy's adapter each statement is three or four hops to aiosqlite's thread (cursor, execute, fetch,
close); on the driver connection, inside the same transaction, it is one; a whole transaction in ``sqlite_trips`` is
one in all. The SQL is SQLAlchemy's own compilation of the core's statements, so every path runs the same text.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar

import anyio
from sqlalchemy import ColumnElement, Integer, Select, String, literal_column
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.dialect import Dialect
from muster_api.db.engine import BACKSTOP_CHECKPOINT_PAGES, SQLITE_BUSY_TIMEOUT_MS
from muster_api.mesh import sqlite_trips
from muster_api.mesh.claims_store import claim_record, live_statement
from muster_api.mesh.search import index_pending
from muster_api.mesh.sqlite_driver import NAMED, DriverStatement, bound, on_driver_thread, time_text
from muster_api.mesh.store import (
    BUMP_ONE,
    FOLLOW,
    INBOX_ENTRY,
    INSERT_INBOX,
    INSERT_MESSAGE,
    SqlMeshStore,
    SqlMeshTx,
    TransactionNotifier,
    agent_from,
    mark_statement,
    message_values,
    shown_columns,
    stored_time,
)
from muster_api.mesh.tasks_store import task_record
from muster_mesh import AgentFilter, AgentRecord, InboxEntry, MessageRecord
from muster_mesh.claims import ClaimRecord
from muster_mesh.directory import ShownRow
from muster_mesh.records import Marks
from muster_mesh.tasks import ClaimedInOneStep, ClaimStep

T = TypeVar("T")

log = logging.getLogger("muster.mesh")

# The WAL is copied back into the database off the path of the calls that write it: by ``checkpoint_forever``, on a
# pooled connection (its own thread), after every CHECKPOINT_EVERY writes of the store. Left to SQLite, the commit
# that grows the WAL past 1,000 pages checkpoints inline: it copies the pages and syncs both files, milliseconds to
# a hundred on a busy disk, paid by whichever send or check-in it was. The held connection's own automatic checkpoint
# stays as a backstop (``BACKSTOP_CHECKPOINT_PAGES``).
CHECKPOINT_EVERY = 100


@lru_cache(maxsize=64)
def _driver_select(stmt: Select[Any]) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """A select compiled once for the driver: its SQL, the names of its columns, the parameters SQLAlchemy adds
    itself (the OFFSET beside a bound LIMIT)."""
    compiled = stmt.compile(dialect=NAMED)
    return str(compiled), tuple(stmt.selected_columns.keys()), dict(compiled.params)


def _timestamp(name: str) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    # UTCDateTime's stored text is 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC, always six digits): its JSON form puts a T for
    # the space and a Z at the end, dropping an all-zero fraction as pydantic does; its microseconds since the epoch
    # are the whole seconds and the fraction's digits.
    column = f"mesh_agents.{name}"
    return (
        literal_column(f"replace(replace({column} || 'Z', '.000000Z', 'Z'), ' ', 'T')", String).label(name),
        literal_column(
            f"CAST(strftime('%s', {column}) AS INTEGER) * 1000000 + CAST(substr({column}, 21, 6) AS INTEGER)", Integer
        ).label(f"{name}_us"),
    )


# A directory page's rows come out of SQLite ready to encode: Python parses no datetime.
_SHOWN = shown_columns(_timestamp)

_driver_statement = lru_cache(maxsize=64)(DriverStatement)
_BUMP_ONE = DriverStatement(BUMP_ONE)
_FOLLOW = DriverStatement(FOLLOW)
_INSERT_MESSAGE = DriverStatement(INSERT_MESSAGE)
_INSERT_INBOX = DriverStatement(INSERT_INBOX, INBOX_ENTRY)


@lru_cache(maxsize=8)
def _marking(marks: Marks) -> DriverStatement:
    return DriverStatement(mark_statement(marks))


class SqliteMeshTx(SqlMeshTx):
    def __init__(self, conn: AsyncConnection, store: SqlMeshStore) -> None:
        super().__init__(conn, store)
        self._driver: Any = None

    async def _aiosqlite(self) -> Any:
        """The aiosqlite connection under this transaction's SQLAlchemy connection."""
        if self._driver is None:
            self._driver = (await self._conn.get_raw_connection()).driver_connection
        return self._driver

    async def _first_agent(self, stmt: Any, params: Mapping[str, Any]) -> AgentRecord | None:
        # Every one-agent statement (a read, a lease renewal, a check-in's UPDATE … RETURNING) in one hop to
        # aiosqlite's thread, where SQLAlchemy's cursor adapter takes three or four, all inside the write lock.
        values = {name: bound(value) for name, value in params.items()}
        rows = await _driver_statement(stmt).rows(await self._aiosqlite(), values)
        return agent_from(rows[0]) if rows else None

    async def _bump_one(self, agent_id: str, live_at: datetime) -> dict[str, int]:
        rows = await _BUMP_ONE.rows(await self._aiosqlite(), {"p_id": agent_id, "p_now": time_text(live_at)})
        return {row["agent_id"]: int(row["last_seq"]) for row in rows}

    async def live_claims(self, live_at: datetime, *, repo: str | None, holder: str | None) -> list[ClaimRecord]:
        # One hop to aiosqlite's thread, as a directory page: a claims check runs this on every call.
        sql, names, added = _driver_select(live_statement(repo is not None, holder is not None))
        params = {**added, "p_now": time_text(live_at), "p_repo": repo, "p_holder": holder}
        rows = await (await self._aiosqlite()).execute_fetchall(sql, params)
        found = [dict(zip(names, row, strict=True)) for row in rows]
        return [claim_record({**row, "since": stored_time(row["since"])}) for row in found]

    async def list_agents(self, where: AgentFilter, *, after: str | None, limit: int) -> list[AgentRecord]:
        # A directory page is one hop to aiosqlite's thread this way, four through SQLAlchemy's cursor adapter (open,
        # execute, fetch, close), and its rows skip SQLAlchemy's result machinery.
        stmt, params = self._list_query(where, after, limit)
        sql, names, added = _driver_select(stmt)
        if where.live_at is not None:
            params["p_live"] = time_text(where.live_at)
        rows = await (await self._aiosqlite()).execute_fetchall(sql, {**added, **params})
        return [agent_from(dict(zip(names, row, strict=True))) for row in rows]

    async def directory_rows(self, where: AgentFilter, *, after: str | None, limit: int) -> list[ShownRow]:
        # As ``list_agents``: one hop to aiosqlite's thread; the rows are sqlite3's tuples as they come.
        stmt, params = self._list_query(where, after, limit, _SHOWN)
        sql, _, added = _driver_select(stmt)
        if where.live_at is not None:
            params["p_live"] = time_text(where.live_at)
        return list(await (await self._aiosqlite()).execute_fetchall(sql, {**added, **params}))

    async def add_message(self, message: MessageRecord, seqs: Mapping[str, int]) -> None:
        if len(seqs) != 1:
            await super().add_message(message, seqs)
            return
        ((recipient, seq),) = seqs.items()
        driver = await self._aiosqlite()
        await _INSERT_MESSAGE.rows(driver, {**message_values(message), "sent_at": time_text(message.sent_at)})
        await _INSERT_INBOX.rows(driver, {"recipient": recipient, "seq": seq, "message_id": message.message_id})
        await self._store.on_stored(self._conn, [recipient])


class SqliteMeshStore(SqlMeshStore):
    """SQLite has one writer at a time and every transaction here is BEGIN IMMEDIATE: connections racing for the lock
    would wait in SQLite's busy handler, which sleeps (1, 2, 5, 10 … ms) instead of waking when the lock frees.
    Queueing in-process hands the lock over at once; the busy handler still covers other writers. The transactions
    are serial anyway, so they share one connection kept out of the pool: returning it would cost a rollback (a hop
    to aiosqlite's thread) between the commit and the wake-ups."""

    tx_class = SqliteMeshTx
    serial = True

    def __init__(self, engine: AsyncEngine, dialect: Dialect, notifier: TransactionNotifier | None = None) -> None:
        super().__init__(engine, dialect, notifier)
        self._serial = anyio.Lock()
        self._held: AsyncConnection | None = None
        # The held connection and the aiosqlite connection under it.
        self._driver: tuple[AsyncConnection, Any] | None = None
        self._writes = 0
        self._checkpoint_due = anyio.Event()
        self.checkpoints = 0

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes >= CHECKPOINT_EVERY:
            self._checkpoint_due.set()

    async def checkpoint_forever(self) -> None:
        """Checkpoint the WAL after every CHECKPOINT_EVERY writes of this store (run it in a task); the messages
        queued for the search index are indexed first, so that a search finds no more than about that many to index
        before it answers."""
        while True:
            await self._checkpoint_due.wait()
            self._checkpoint_due, self._writes = anyio.Event(), 0
            try:
                await self.on_held(index_pending)
            except Exception:  # the next round or search retries: the queue stays as it was
                log.warning("mesh search indexing failed", exc_info=True)
            try:
                await self._checkpoint()
            except Exception:  # the next round retries, and the backstop bounds the WAL meanwhile
                log.warning("mesh WAL checkpoint failed", exc_info=True)

    async def _checkpoint(self) -> None:
        # PASSIVE: copies what no reader still needs, waiting for no one; writers carry on meanwhile (a commit in
        # WAL mode with synchronous=NORMAL appends to the WAL without syncing it, so it does not wait for this one).
        async with self.engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            await driver.execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")
        self.checkpoints += 1

    async def _connection(self) -> AsyncConnection:
        if self._held is None or self._held.closed or self._held.invalidated:
            held = await self.engine.connect()
            driver = (await held.get_raw_connection()).driver_connection
            assert driver is not None
            await driver.execute_fetchall(f"PRAGMA wal_autocheckpoint={BACKSTOP_CHECKPOINT_PAGES}")
            self._held = held
        return self._held

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlMeshTx]:
        # Shielded: a cancellation (a client closing its stream or long-poll) delivered while a statement is with
        # aiosqlite's thread makes SQLAlchemy drop the connection halfway, its write lock still held, and the next
        # writer waits out the busy timeout ("database is locked"). These blocks are a few statements, never a wait.
        with anyio.CancelScope(shield=True):
            async with self._serial:
                conn = await self._connection()
                async with conn.begin():
                    yield self.tx_class(conn, self)
                self._wrote()

    @asynccontextmanager
    async def standalone(self) -> AsyncIterator[SqlMeshTx]:
        # Queued like a transaction (one writer at a time either way), without BEGIN and COMMIT: each statement that
        # runs on the driver connection commits alone, one hop to aiosqlite's thread instead of three. A statement
        # that goes through SQLAlchemy begins a transaction, ended here.
        with anyio.CancelScope(shield=True):  # as a transaction is, for the same reason
            async with self._serial:
                conn = await self._connection()
                try:
                    yield self.tx_class(conn, self)
                except BaseException:
                    if conn.in_transaction():
                        await conn.rollback()
                    raise
                if conn.in_transaction():
                    await conn.commit()
                self._wrote()

    async def _held_driver(self) -> Any:
        """aiosqlite's connection under the held one (looked up again only when the held connection changed). Called
        inside ``_serial``."""
        conn = await self._connection()
        if self._driver is None or self._driver[0] is not conn:
            self._driver = conn, (await conn.get_raw_connection()).driver_connection
        return self._driver[1]

    async def _in_one_trip(self, call: Callable[[sqlite3.Connection], T], *, writes: bool = True) -> T:
        """A whole transaction (``sqlite_trips``) on the held connection, queued like the others, in one trip to
        aiosqlite's thread."""
        with anyio.CancelScope(shield=True):  # as a transaction is, for the same reason
            async with self._serial:
                result = await on_driver_thread(await self._held_driver(), call)
                if writes:
                    self._wrote()
        return result

    async def on_held(self, call: Callable[[sqlite3.Connection], T]) -> T:
        """``call`` on the held connection in one trip, between the store's transactions (it begins and ends its own,
        if it writes).

        For a read that looks at many pages (a search): a connection throws its whole page cache away when another
        connection has committed since its last read, so a pooled connection reads every page anew after each
        write of the store, while the held connection, which makes those writes, keeps its cache. Measured on
        100,000 messages, an agent's search right after its own lease renewal: 3.7 ms of CPU on a pooled
        connection, 1.3 ms on this one. The price: the writes wait for the read (about a millisecond)."""
        return await self._in_one_trip(call, writes=False)

    async def _here_or_trip(self, call: Callable[[sqlite3.Connection], T]) -> T:
        """A short transaction run on the event loop's own thread when it need not wait, else on the driver's as
        ``_in_one_trip``. A trip there and back is two thread switches (0.1 ms of CPU measured around a check whose
        statements take 0.07 ms, and on a busy machine a wait for a core each); here the statements block the loop
        for their own time only: with another connection holding the write lock the call goes to the driver's
        thread, whose busy handler waits, and the commit leaves checkpoints to the background (``on_this_thread``).
        The held connection is used by one call at a time either way (``_serial``), so it is free."""
        with anyio.CancelScope(shield=True):  # as a transaction is, for the same reason
            async with self._serial:
                driver = await self._held_driver()
                try:
                    result = sqlite_trips.on_this_thread(
                        driver._conn, call, SQLITE_BUSY_TIMEOUT_MS, BACKSTOP_CHECKPOINT_PAGES
                    )
                except sqlite_trips.Busy:
                    result = await on_driver_thread(driver, call)
                self._wrote()
        return result

    def _renewal(self, token_hash: str, now: datetime, *, active: bool = True) -> dict[str, Any] | None:
        """The parameters of a renewal computed from the TTL seen for this token (the statement re-checks it);
        None without one (the transaction then reads the row first). ``active``: the call is the agent's
        activity."""
        ttl = self.ttl_hints.get(token_hash)
        if ttl is None:
            return None
        at = time_text(now)
        return {
            "p_hash": token_hash,
            "p_now": at,
            "p_ttl": ttl,
            "p_seen": at,
            "p_exp": time_text(now + timedelta(seconds=ttl)),
            "p_active": at if active else None,
        }

    async def renew_and_deliver(
        self, token_hash: str, to: str, now: datetime, *, message_id: str, body: str, thread_id: str | None
    ) -> tuple[InboxEntry, bool] | None:
        renew = self._renewal(token_hash, now)
        # A notifier wakes from inside the sending transaction, which a trip has no room for: the transaction then.
        if renew is None or self.notifier is not None:
            return None
        message = {"message_id": message_id, "body": body, "thread_id": thread_id, "sent_at": renew["p_now"]}
        sent = await self._in_one_trip(sqlite_trips.renew_and_deliver(renew, to, renew["p_now"], message))
        if sent is None:
            return None
        sender, seq, followed = sent
        return InboxEntry(seq=seq, message=MessageRecord(message_id, sender, body, thread_id, now)), followed

    async def renew_and_read(
        self, token_hash: str, now: datetime, *, after: int | None, limit: int, shown: int = 0, active: bool = True
    ) -> tuple[AgentRecord, list[InboxEntry]] | None:
        renew = self._renewal(token_hash, now, active=active)
        if renew is None:
            return None
        read = await self._in_one_trip(sqlite_trips.renew_and_read(renew, after, limit, shown))
        if read is None:
            return None
        agent, rows = read
        entries = [
            InboxEntry(
                seq=seq,
                message=MessageRecord(
                    message_id=message_id, sender=sender, body=body, thread_id=thread_id, sent_at=stored_time(sent_at)
                ),
            )
            for seq, message_id, sender, body, thread_id, sent_at in rows
        ]
        return agent_from(agent), entries

    async def renew_and_claims(self, token_hash: str, now: datetime, repo: str) -> list[ClaimRecord] | None:
        renew = self._renewal(token_hash, now)
        if renew is None:
            return None
        rows = await self._here_or_trip(sqlite_trips.renew_and_claims(renew, repo))
        if rows is None:
            return None
        return [
            ClaimRecord(claim_id, repo, holder, pattern, bool(exclusive), reason, stored_time(since))
            for claim_id, repo, holder, pattern, exclusive, reason, since in rows
        ]

    async def claim_in_one_step(self, step: ClaimStep) -> ClaimedInOneStep | None:
        renew = self._renewal(step.token_hash, step.now)
        # As a send: a notifier that wakes from inside the transaction has no room in a trip.
        if renew is None or self.notifier is not None:
            return None
        claim = {
            "p_now": renew["p_now"],
            "p_max": step.max_attempts,
            "p_reason": step.fail_reason,
            "p_only_role": step.only_role,
            "p_only_repo": step.only_repo,
            "p_only_cap": step.only_cap,
        }
        done = await self._in_one_trip(sqlite_trips.claim_task(renew, claim, step.message_id))
        if done is None:
            return None
        caller, row, seq = done
        if row is None:
            return ClaimedInOneStep(caller, None, None)
        times = {"created_at": stored_time(row["created_at"]), "updated_at": stored_time(row["updated_at"])}
        return ClaimedInOneStep(caller, task_record({**row, **times}), seq)

    async def mark_inbox(self, agent_id: str, *, after: int, through: int, now: datetime, marks: Marks) -> None:
        params = {"p_id": agent_id, "p_after": after, "p_through": through, "p_now": time_text(now)}
        await self._in_one_trip(sqlite_trips.one_statement(_marking(marks), params))

    async def follow(self, agent_id: str, until: datetime) -> None:
        params = {"p_id": agent_id, "p_until": time_text(until)}
        await self._in_one_trip(sqlite_trips.one_statement(_FOLLOW, params))

    async def aclose(self) -> None:
        async with self._serial:
            held, self._held = self._held, None
            if held is not None:
                await held.close()


__all__ = ["SqliteMeshStore", "SqliteMeshTx"]
