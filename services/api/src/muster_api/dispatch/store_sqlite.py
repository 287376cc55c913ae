"""What the run store does differently on SQLite: each write of a run's life and each read of its stream is ONE call
of a function on a ``sqlite3`` connection, where SQLAlchemy's adapter takes a trip to aiosqlite's thread and back for
every step (a claim was six: a read, BEGIN IMMEDIATE, the locked select, the update, the select of controls, COMMIT;
a run's end four more; a stream's read of the run and of its rows two each), and its checkout, cursor and result
machinery around each cost more CPU than the statement.

- queue a run: the INSERT alone (atomic alone: no BEGIN and COMMIT);
- claim: the unlocked look for a queued run (an idle worker takes no write lock), then BEGIN IMMEDIATE, the
  conditional UPDATE … RETURNING, whether controls wait for the run, COMMIT;
- journal rows: BEGIN IMMEDIATE, the batch, COMMIT;
- the end with the next claim: BEGIN IMMEDIATE, the conditional UPDATE, the last rows only when it matched, the
  claim, COMMIT;
- a stream's read: the run, then its rows after the reader's cursor.

A call runs in place, on the event loop's thread, when SQLite's lock lets it start at once (``_Inline``): a trip to a
driver's thread is two thread wake-ups (a stream's read cost 0.15-0.19 ms of CPU through the thread here, 0.06 ms in
place; queueing a run 0.19-0.30 against 0.11-0.20). The log is checkpointed on a driver's thread behind the writes,
which do not wait for its syncs. A call that would wait for the lock goes to a driver's thread, which waits: writes to
one connection held out of the pool, reads to another, so that a read never waits behind a write waiting for the lock.
Either way a whole transaction is one call, so no two of them interleave. The statements are SQLAlchemy's compilation of
the core's (``DriverStatement``), their parameters bound and their columns decoded by the columns' own types.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import anyio
from sqlalchemy import bindparam, exists, insert, null, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.db.engine import BACKSTOP_CHECKPOINT_PAGES, SQLITE_CONNECTION_PRAGMAS
from muster_api.db.sqlite_driver import NAMED, DriverStatement, in_transaction, on_driver_thread
from muster_api.db.url import sqlite_path
from muster_api.dispatch.models import Run
from muster_api.dispatch.notify import NEW_RUN, RunEnd
from muster_api.dispatch.store import KEEP_NON_ASCII, SqlRunStore, run_of, stored_row_json
from muster_api.dispatch.tables import controls, events, runs
from muster_dispatch import Observation

log = logging.getLogger("muster.dispatch.store")

T = TypeVar("T")

# Each column's bind and result processing on SQLite (UTCDateTime's stored text, JSON's): the same values both ways.
_RUN_BIND = {c.name: c.type.dialect_impl(NAMED).bind_processor(NAMED) for c in runs.columns}
_RUN_RESULT = [c.type.dialect_impl(NAMED).result_processor(NAMED, None) for c in runs.columns]
_RUN_NAMES = tuple(c.name for c in runs.columns)

_QUEUED = select(runs.c.id).where(runs.c.status == "queued").order_by(runs.c.id).limit(1)
_ANY_QUEUED = DriverStatement(_QUEUED)
_CLAIM = DriverStatement(
    update(runs)
    .where(runs.c.id == _QUEUED.scalar_subquery(), runs.c.status == "queued")
    .values(
        status="running",
        worker=bindparam("p_owner"),
        started_at=bindparam("p_now"),
        lease_expires_at=bindparam("p_until"),
    )
    .returning(*runs.columns)
)
# Steering or a cancel posted while the run was queued: the worker reads them before it starts.
_PENDING = DriverStatement(select(exists().where(controls.c.run_id == bindparam("p_run")).label("pending")))
_OWNED = (runs.c.id == bindparam("p_run"), runs.c.worker == bindparam("p_owner"), runs.c.status == "running")
_RENEW = DriverStatement(update(runs).where(*_OWNED).values(lease_expires_at=bindparam("p_until")).returning(runs.c.id))
_INSERT_EVENTS = DriverStatement(insert(events))
_GET = DriverStatement(select(runs).where(runs.c.id == bindparam("p_run")))
_EVENTS_AFTER = DriverStatement(
    select(events.c.seq, events.c.at, events.c.source, events.c.scope, events.c.event)
    .where(events.c.run_id == bindparam("p_run"), events.c.seq > bindparam("p_after"))
    .order_by(events.c.seq)
    .limit(bindparam("p_limit"))
)
_CONTROLS_AFTER = DriverStatement(
    select(controls.c.id, controls.c.kind, controls.c.text)
    .where(controls.c.run_id == bindparam("p_run"), controls.c.id > bindparam("p_after"))
    .order_by(controls.c.id)
)


@lru_cache(maxsize=8)
def _insert_run(names: tuple[str, ...]) -> DriverStatement:
    return DriverStatement(insert(runs), names)


@lru_cache(maxsize=8)
def _finish(names: tuple[str, ...]) -> DriverStatement:
    """The end of a run this owner still holds, setting ``names`` (bound as ``v_<name>``: SQLAlchemy keeps a column's
    own name for itself)."""
    values: dict[str, Any] = {name: bindparam(f"v_{name}") for name in names}
    values.update(active_workspace=null(), lease_expires_at=null())
    return DriverStatement(update(runs).where(*_OWNED).values(values).returning(runs.c.id))


def _bind(name: str, value: Any) -> Any:
    process = _RUN_BIND[name]
    return process(value) if process is not None and value is not None else value


def _run_row(row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        name: process(value) if process is not None else value
        for name, process, value in zip(_RUN_NAMES, _RUN_RESULT, row, strict=False)
    }


# The JSON columns as ``observation_json`` writes them (non-ASCII kept): a stream sends the stored text as it is
# (``stored_row_json``), the same text for rows written here; a row stored otherwise differs at most in its escapes.
def _event_params(run_id: str, batch: list[Observation]) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id,
            "seq": o.seq,
            "at": o.at,
            "source": o.source,
            "scope": KEEP_NON_ASCII(o.scope),
            "event": KEEP_NON_ASCII(o.event),
        }
        for o in batch
    ]


def _observation(row: tuple[Any, ...]) -> Observation:
    return Observation(row[0], row[1], row[2], json.loads(row[3]), json.loads(row[4]))


def _claim_in(conn: sqlite3.Connection, params: Mapping[str, Any]) -> tuple[dict[str, Any], bool] | None:
    """Inside a transaction: the oldest queued run claimed, and whether controls wait for it."""
    claimed = _CLAIM.run(conn, params)
    if not claimed:
        return None
    row = _run_row(claimed[0])
    return row, bool(_PENDING.run(conn, {"p_run": row["id"]})[0][0])


def _claim(params: Mapping[str, Any]) -> Callable[[sqlite3.Connection], tuple[dict[str, Any], bool] | None]:
    def call(conn: sqlite3.Connection) -> tuple[dict[str, Any], bool] | None:
        if not _ANY_QUEUED.run(conn, {}):  # idle: found out without the write lock
            return None
        return in_transaction(conn, lambda conn: _claim_in(conn, params))

    return call


def _end(
    finish: DriverStatement, params: Mapping[str, Any], rows: list[dict[str, Any]], claim: Mapping[str, Any] | None
) -> Callable[[sqlite3.Connection], tuple[bool, tuple[dict[str, Any], bool] | None] | None]:
    """The end, its last rows only when it matched, and the owner's next run when ``claim`` (its parameters)."""

    def body(conn: sqlite3.Connection) -> tuple[bool, tuple[dict[str, Any], bool] | None]:
        ended = bool(finish.run(conn, params))
        if ended and rows:
            conn.executemany(_INSERT_EVENTS.sql, rows)
        return ended, _claim_in(conn, claim) if claim is not None else None

    return lambda conn: in_transaction(conn, body)


def _read(run_id: str, after: int, limit: int) -> Callable[[sqlite3.Connection], tuple[Any, list[Any]]]:
    def call(conn: sqlite3.Connection) -> tuple[Any, list[Any]]:
        # The run read before its rows: once it is over, the rows read after it are all of them.
        found = _GET.run(conn, {"p_run": run_id})
        if not found:
            return None, []
        return found[0], _EVENTS_AFTER.run(conn, {"p_run": run_id, "p_after": after, "p_limit": limit})

    return call


class _Held:
    """One connection of the engine's, held out of its pool, and the aiosqlite connection under it; beside it, for a
    database file, a connection of the event loop's own thread that runs a call in place when SQLite's lock is free
    (``_Inline``), whose log this connection checkpoints on its own thread after every ``CHECKPOINT_EVERY``-th write
    in place, a write's caller not waiting for it."""

    CHECKPOINT_EVERY = 64

    def __init__(self, engine: AsyncEngine, inline: _Inline | None) -> None:
        self.engine = engine
        self._conn: AsyncConnection | None = None
        self._driver: Any = None
        self._opening = anyio.Lock()
        self._inline = inline
        self._writes = 0
        self._checkpoint: asyncio.Task[None] | None = None
        self.checkpoints = 0

    async def call(self, call: Callable[[sqlite3.Connection], T], write: bool) -> T:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            async with self._opening:
                if self._conn is None or self._conn.closed or self._conn.invalidated:
                    conn = await self.engine.connect()
                    self._driver = (await conn.get_raw_connection()).driver_connection
                    self._conn = conn
        elif self._inline is not None:
            try:
                result = self._inline.call(call)
            except _Elsewhere:
                pass
            else:
                if write:
                    self._wrote()
                return result
        return await on_driver_thread(self._driver, call)

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes % self.CHECKPOINT_EVERY == 0 and (self._checkpoint is None or self._checkpoint.done()):
            self._checkpoint = asyncio.get_running_loop().create_task(self._checkpointed())

    async def _checkpointed(self) -> None:
        """The log copied into the database as far as no reader still needs it (passive: readers and writers go on
        meanwhile), on the driver's thread: a checkpoint syncs the files, which the loop's thread must not wait for.
        A failure waits for the next one."""
        try:
            await on_driver_thread(self._driver, _checkpoint)
            self.checkpoints += 1
        except Exception:
            log.exception("checkpoint of the run store's log failed; the next write's turn retries it")

    async def aclose(self) -> None:
        async with self._opening:
            if self._checkpoint is not None:
                await self._checkpoint
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()


def _checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class _Elsewhere(Exception):
    """A call not run in place: it goes to the driver's thread."""


class _Inline:
    """A connection used on the event loop's thread: a call runs in place, where a trip to aiosqlite's thread and
    back is two thread wake-ups. It never waits: its busy timeout is zero, and a call SQLite refuses for its lock
    (another process writing, or this one on the driver's thread) goes to the driver's thread, which waits for it.
    Every call begins with its transaction or is one statement, so a refused call changed nothing. Its log is
    checkpointed on the driver's thread (``_Held``); its own automatic checkpoint is the backstop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def call(self, call: Callable[[sqlite3.Connection], T]) -> T:
        """The call's result; ``_Elsewhere`` when it belongs on the driver's thread (nothing was changed)."""
        if self._conn is None:
            self._conn = _inline_connection(self.path)
        try:
            return call(self._conn)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF in _BUSY:
                raise _Elsewhere from None
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _inline_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    for pragma in (*SQLITE_CONNECTION_PRAGMAS, f"PRAGMA wal_autocheckpoint={BACKSTOP_CHECKPOINT_PAGES}"):
        conn.execute(pragma)
    return conn


class SqliteRunStore(SqlRunStore):
    def __init__(self, engine: AsyncEngine, notifier: Any, dialect: Any = None) -> None:
        super().__init__(engine, notifier, dialect)
        path = sqlite_path(engine.url.render_as_string(hide_password=False))
        self._inline = _Inline(path) if path is not None else None
        self._writer = _Held(engine, self._inline)
        self._reader = _Held(engine, self._inline)

    async def aclose(self) -> None:
        if self._inline is not None:
            self._inline.close()
        await self._writer.aclose()
        await self._reader.aclose()

    async def _write(self, call: Callable[[sqlite3.Connection], T]) -> T:
        # Shielded: a caller cancelled once its call is with the driver's thread must still learn what it did (a
        # run claimed and then forgotten would wait for its lease to lapse).
        with anyio.CancelScope(shield=True):
            result = await self._writer.call(call, write=True)
        return result  # noqa: RET504 (returned inside, mypy counts on a scope that could swallow the exception)

    async def create(self, values: dict[str, Any]) -> Run:
        names = tuple(sorted(values))
        params = {name: _bind(name, values[name]) for name in names}
        stmt = _insert_run(names)
        run = run_of(values)
        try:
            with self.notifier.queuing(run):
                await self._write(lambda conn: stmt.run(conn, params))
        except sqlite3.IntegrityError as exc:  # the engine's error, which callers know
            raise IntegrityError("queue a run", None, exc) from exc
        self.notifier.fire([NEW_RUN])
        return run

    async def get(self, run_id: str) -> Run | None:
        rows = await self._reader.call(lambda conn: _GET.run(conn, {"p_run": run_id}), write=False)
        return run_of(_run_row(rows[0])) if rows else None

    async def events_after(self, run_id: str, after: int, limit: int = 1000) -> list[Observation]:
        params = {"p_run": run_id, "p_after": after, "p_limit": limit}
        rows = await self._reader.call(lambda conn: _EVENTS_AFTER.run(conn, params), write=False)
        return [_observation(row) for row in rows]

    async def run_and_events(self, run_id: str, after: int, limit: int = 1000) -> tuple[Run | None, list[Observation]]:
        found, rows = await self._reader.call(_read(run_id, after, limit), write=False)
        return (run_of(_run_row(found)) if found is not None else None), [_observation(row) for row in rows]

    async def run_and_json(
        self, run_id: str, after: int, limit: int = 1000
    ) -> tuple[Run | None, list[tuple[int, str]]]:
        found, rows = await self._reader.call(_read(run_id, after, limit), write=False)
        return (run_of(_run_row(found)) if found is not None else None), [stored_row_json(*row) for row in rows]

    async def controls_after(self, run_id: str, after: int) -> list[tuple[int, str, str | None]]:
        rows = await self._reader.call(
            lambda conn: _CONTROLS_AFTER.run(conn, {"p_run": run_id, "p_after": after}), write=False
        )
        return [(row[0], row[1], row[2]) for row in rows]

    async def claim(self, owner: str, now: datetime, until: datetime) -> tuple[Run, bool] | None:
        # Nobody waits for a run to start (readers wait for its rows or its end): a claim wakes nobody.
        claimed = await self._write(_claim(self._claim_params(owner, now, until)))
        return (run_of(claimed[0]), claimed[1]) if claimed is not None else None

    async def renew(self, run_id: str, owner: str, until: datetime) -> bool:
        params = {"p_run": run_id, "p_owner": owner, "p_until": _bind("lease_expires_at", until)}
        return bool(await self._write(lambda conn: _RENEW.run(conn, params)))

    async def finish(
        self,
        run_id: str,
        owner: str,
        values: dict[str, Any],
        last_events: list[Observation] | None = None,
        end: RunEnd | None = None,
    ) -> bool:
        changed, _ = await self._end(run_id, owner, values, last_events or [], None, end)
        return changed

    async def finish_and_claim(
        self,
        run_id: str,
        owner: str,
        values: dict[str, Any],
        last_events: list[Observation],
        now: datetime,
        until: datetime,
        end: RunEnd | None = None,
    ) -> tuple[bool, tuple[Run, bool] | None]:
        changed, claimed = await self._end(
            run_id, owner, values, last_events, self._claim_params(owner, now, until), end
        )
        return changed, (run_of(claimed[0]), claimed[1]) if claimed is not None else None

    async def _end(
        self,
        run_id: str,
        owner: str,
        values: dict[str, Any],
        last_events: list[Observation],
        claim: Mapping[str, Any] | None,
        end: RunEnd | None,
    ) -> tuple[bool, tuple[dict[str, Any], bool] | None]:
        names = tuple(sorted(values))
        params: dict[str, Any] = {f"v_{name}": _bind(name, values[name]) for name in names}
        params.update(p_run=run_id, p_owner=owner)
        done = await self._write(_end(_finish(names), params, _event_params(run_id, last_events), claim))
        assert done is not None, "the transaction commits whatever it found"
        if done[0]:
            self.notifier.hand(run_id, last_events, end)
        return done

    async def append_events(self, run_id: str, batch: list[Observation]) -> None:
        rows = _event_params(run_id, batch)
        await self._write(lambda conn: in_transaction(conn, lambda conn: conn.executemany(_INSERT_EVENTS.sql, rows)))
        self.notifier.hand(run_id, batch)

    @staticmethod
    def _claim_params(owner: str, now: datetime, until: datetime) -> dict[str, Any]:
        return {
            "p_owner": owner,
            "p_now": _bind("started_at", now),
            "p_until": _bind("lease_expires_at", until),
        }


__all__ = ["SqliteRunStore"]
