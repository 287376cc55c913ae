"""SQL storage of runs: the runs themselves (claimed by workers with owner + lease), their controls, their journal
rows and conversation snapshots. Every write that a reader or a worker waits for notifies the run's key in its own
transaction (see notify.py)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import Dialect, dialect_of
from muster_api.db.engine import UNLOCKED_READS
from muster_api.dispatch.models import ACTIVE, ActiveRun, Run
from muster_api.dispatch.notify import NEW_RUN, RunEnd, RunNotifier, control_key
from muster_api.dispatch.tables import controls, conversation_files, conversations, events, runs
from muster_dispatch import Observation
from muster_dispatch.conversations import check_key, checked_snapshot

Clock = Callable[[], datetime]
_REQUEST_FIELDS = ("continuation", "replay_of", "divergence", "live_input")


# ``json.dumps(value, ensure_ascii=False)`` builds an encoder at each call, more than half of its cost for a journal
# row (called for every row a stream sends, twice for every row a SQLite worker stores).
KEEP_NON_ASCII = json.JSONEncoder(ensure_ascii=False).encode


def observation_json(observation: Observation) -> str:
    """A journal row as a stream sends it: ``{seq, at, source, scope, event}``."""
    return KEEP_NON_ASCII(observation.to_dict())


def stored_row_json(seq: int, at: str, source: str, scope: str, event: str) -> tuple[int, str]:
    """A stored row as ``observation_json`` writes it, its JSON columns as the database hands their text over:
    neither decoded nor encoded again (a stream reads a run's rows more often than anything else does)."""
    return (
        seq,
        f'{{"seq": {seq}, "at": {KEEP_NON_ASCII(at)}, "source": {KEEP_NON_ASCII(source)}, "scope": {scope}, '
        f'"event": {event}}}',
    )


def new_run_id() -> str:
    """Time-ordered (48 bits of milliseconds, then 80 random bits), so that newest first is ``id DESC``."""
    return f"{int(time.time() * 1000):012x}{os.urandom(10).hex()}"


def run_of(row: Any) -> Run:
    """A run from its row (a ``RowMapping`` or a dict of column values)."""
    values = dict(row)
    request = values.pop("request") or {}
    values.pop("active_workspace", None)
    values["attempts"] = values.get("attempts") or []
    for name in _REQUEST_FIELDS:
        values[name] = request.get(name)
    values["live_input"] = bool(values["live_input"])
    return Run.model_validate(values)


class SqlRunStore:
    def __init__(self, engine: AsyncEngine, notifier: RunNotifier, dialect: Dialect | None = None) -> None:
        self.engine = engine
        self.notifier = notifier
        self.dialect = dialect or dialect_of(engine)
        # A read is one statement: it needs no BEGIN/ROLLBACK round trips around it (PostgreSQL), nor the write
        # lock every SQLite transaction takes (engine.py), which would queue readers behind a writing worker.
        self.reads = self.dialect.pick(
            sqlite=engine.execution_options(**{UNLOCKED_READS: True}),
            postgresql=engine.execution_options(isolation_level="AUTOCOMMIT"),
        )

    async def aclose(self) -> None:
        """Before the engine is disposed: close what the store holds beside it (nothing here)."""

    # -- runs ---------------------------------------------------------------------------------------------------

    async def create(self, values: dict[str, Any]) -> Run:
        """Insert a queued run; ``IntegrityError`` when its idempotency key or its workspace is taken."""
        run = run_of(values)
        with self.notifier.queuing(run):
            async with self.engine.begin() as conn:
                await conn.execute(insert(runs).values(values))
                await self.notifier.in_transaction(conn, [NEW_RUN])
        self.notifier.fire([NEW_RUN])
        return run

    async def get(self, run_id: str) -> Run | None:
        async with self.reads.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).mappings().first()
        return run_of(row) if row is not None else None

    async def by_key(self, key: str) -> tuple[Run, dict[str, Any]] | None:
        query = select(runs).where(runs.c.idempotency_key == key)
        async with self.reads.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        return (run_of(row), dict(row)) if row is not None else None

    async def active_on(self, workspace: str) -> str | None:
        query = select(runs.c.id).where(runs.c.active_workspace == workspace)
        async with self.reads.connect() as conn:
            return (await conn.execute(query)).scalar()

    async def page(self, *, agent: str | None, status: str | None, before: str | None, limit: int) -> list[Run]:
        query = select(runs).order_by(runs.c.id.desc()).limit(limit)
        if agent is not None:
            query = query.where(runs.c.agent == agent)
        if status is not None:
            query = query.where(runs.c.status == status)
        if before is not None:
            query = query.where(runs.c.id < before)
        async with self.reads.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [run_of(row) for row in rows]

    async def claim(self, owner: str, now: datetime, until: datetime) -> tuple[Run, bool] | None:
        """The oldest queued run, now running under ``owner`` until ``until``, and whether controls wait for it;
        None when none is queued."""
        candidate = select(runs.c.id).where(runs.c.status == "queued").order_by(runs.c.id).limit(1)
        async with self.reads.connect() as conn:
            if (await conn.execute(candidate)).scalar() is None:  # idle: found out without the write lock
                return None
        async with self.engine.begin() as conn:
            run_id = (await conn.execute(self.dialect.lock_claimable(candidate))).scalar()
            if run_id is None:
                return None
            stmt = (
                update(runs)
                .where(runs.c.id == run_id, runs.c.status == "queued")
                .values(status="running", worker=owner, started_at=now, lease_expires_at=until)
                .returning(*runs.columns)
            )
            row = (await conn.execute(stmt)).mappings().first()
            if row is None:
                return None
            # Steering or a cancel posted while the run was queued: the worker reads them before it starts.
            pending = select(exists().where(controls.c.run_id == run_id))
            has_controls = bool((await conn.execute(pending)).scalar())
            await self.notifier.in_transaction(conn, [run_id])
        self.notifier.fire([run_id])
        return run_of(row), has_controls

    async def renew(self, run_id: str, owner: str, until: datetime) -> bool:
        stmt = (
            update(runs)
            .where(runs.c.id == run_id, runs.c.worker == owner, runs.c.status == "running")
            .values(lease_expires_at=until)
        )
        async with self.engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def finish(
        self,
        run_id: str,
        owner: str,
        values: dict[str, Any],
        last_events: list[Observation] | None = None,
        end: RunEnd | None = None,
    ) -> bool:
        """Record the outcome of a run this owner still holds, with the journal rows not stored yet (one transaction:
        a reader that sees the run finished sees its whole journal); False when the run was taken from the owner
        (interrupted), and then the rows are not stored either. ``end`` (the run as it ends) is handed to readers."""
        stmt = (
            update(runs)
            .where(runs.c.id == run_id, runs.c.worker == owner, runs.c.status == "running")
            .values(**values, active_workspace=None, lease_expires_at=None)
        )
        async with self.engine.begin() as conn:
            changed = (await conn.execute(stmt)).rowcount == 1
            if changed and last_events:
                await conn.execute(insert(events), _event_rows(run_id, last_events))
            if changed:
                await self.notifier.in_transaction(conn, [run_id])
        if changed:
            self.notifier.hand(run_id, last_events or [], end)
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
        """``finish``, then ``claim`` for the same owner: a worker's next run comes with the end of its last (in one
        statement on PostgreSQL)."""
        return await self.finish(run_id, owner, values, last_events, end), await self.claim(owner, now, until)

    async def cancel_queued(self, run_id: str, now: datetime) -> bool:
        stmt = (
            update(runs)
            .where(runs.c.id == run_id, runs.c.status == "queued")
            .values(
                status="cancelled",
                finished_at=now,
                active_workspace=None,
                error={"code": "aborted", "message": "cancelled before it started", "details": {}},
            )
        )
        return await self._write_and_wake(stmt, [run_id])

    async def interrupt_lapsed(self, now: datetime) -> list[str]:
        """Runs whose worker stopped renewing its lease: interrupted, their journal kept as it is."""
        error = {"code": "interrupted", "message": "the worker executing the run stopped renewing its lease"}
        lapsed = select(runs.c.id).where(runs.c.status == "running", runs.c.lease_expires_at < now)
        async with self.engine.begin() as conn:
            ids = list((await conn.execute(self.dialect.lock_claimable(lapsed))).scalars())
            if not ids:
                return []
            stmt = (
                update(runs)
                .where(runs.c.id.in_(ids), runs.c.status == "running", runs.c.lease_expires_at < now)
                .values(status="interrupted", finished_at=now, active_workspace=None, error={**error, "details": {}})
                .returning(runs.c.id)
            )
            done = list((await conn.execute(stmt)).scalars())
            await self.notifier.in_transaction(conn, done)
        self.notifier.fire(done)
        return done

    async def _write_and_wake(self, stmt: Any, keys: list[str]) -> bool:
        async with self.engine.begin() as conn:
            changed = (await conn.execute(stmt)).rowcount == 1
            if changed:
                await self.notifier.in_transaction(conn, keys)
        if changed:
            self.notifier.fire(keys)
        return changed

    # -- controls -----------------------------------------------------------------------------------------------

    async def add_control(self, run_id: str, kind: str, text: str | None, now: datetime) -> Run | None:
        """Queue a steer or cancel for the run's worker; the run as it was, or None when it is unknown."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).mappings().first()
            if row is None:
                return None
            if row["status"] in ACTIVE:
                await conn.execute(insert(controls).values(run_id=run_id, kind=kind, text=text, created_at=now))
                await self.notifier.in_transaction(conn, [control_key(run_id)])
        if row["status"] in ACTIVE:
            self.notifier.fire([control_key(run_id)])
        return run_of(row)

    async def controls_after(self, run_id: str, after: int) -> list[tuple[int, str, str | None]]:
        query = (
            select(controls.c.id, controls.c.kind, controls.c.text)
            .where(controls.c.run_id == run_id, controls.c.id > after)
            .order_by(controls.c.id)
        )
        async with self.reads.connect() as conn:
            return [(row.id, row.kind, row.text) for row in await conn.execute(query)]

    # -- journal rows -------------------------------------------------------------------------------------------

    async def append_events(self, run_id: str, batch: list[Observation]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(events), _event_rows(run_id, batch))
            await self.notifier.in_transaction(conn, [run_id])
        self.notifier.hand(run_id, batch)

    async def events_after(self, run_id: str, after: int, limit: int = 1000) -> list[Observation]:
        query = (
            select(events.c.seq, events.c.at, events.c.source, events.c.scope, events.c.event)
            .where(events.c.run_id == run_id, events.c.seq > after)
            .order_by(events.c.seq)
            .limit(limit)
        )
        async with self.reads.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [Observation(row.seq, row.at, row.source, row.scope, row.event) for row in rows]

    async def run_and_events(self, run_id: str, after: int, limit: int = 1000) -> tuple[Run | None, list[Observation]]:
        """The run (None when there is none), then up to ``limit`` of its journal rows after ``after``, read in that
        order: once the run is over, the rows read after it are all of them."""
        run = await self.get(run_id)
        return run, (await self.events_after(run_id, after, limit) if run is not None else [])

    async def run_and_json(
        self, run_id: str, after: int, limit: int = 1000
    ) -> tuple[Run | None, list[tuple[int, str]]]:
        """As ``run_and_events``, each row as its sequence number and what a stream sends of it
        (``observation_json``)."""
        run, rows = await self.run_and_events(run_id, after, limit)
        return run, [(o.seq, observation_json(o)) for o in rows]

    async def event_count(self, run_id: str) -> int:
        query = select(func.coalesce(func.max(events.c.seq), 0)).where(events.c.run_id == run_id)
        async with self.reads.connect() as conn:
            return int((await conn.execute(query)).scalar() or 0)

    # -- the agents' active runs (the roster's runtime column and the wake decision read the same) ------------------

    async def active_runs(self, agents: Sequence[str]) -> dict[str, ActiveRun]:
        """The active run (queued or running: it holds its workspace) of each of ``agents`` that has one; of several
        (an agent may run in several workspaces at once), a running one before a queued one, then the newest."""
        if not agents:
            return {}
        query = (
            select(runs.c.agent, runs.c.id, runs.c.status, runs.c.request)
            .where(runs.c.agent.in_(agents), runs.c.active_workspace.is_not(None))
            .order_by(runs.c.id.desc())
        )
        found: dict[str, ActiveRun] = {}
        async with self.reads.connect() as conn:
            for agent, run_id, status, request in await conn.execute(query):
                kept = found.get(agent)
                if kept is None or (kept.status == "queued" and status == "running"):
                    live = bool((request or {}).get("live_input"))
                    found[str(agent)] = ActiveRun(str(run_id), "running" if status == "running" else "queued", live)
        return found


def _event_rows(run_id: str, batch: list[Observation]) -> list[dict[str, Any]]:
    return [
        {"run_id": run_id, "seq": o.seq, "at": o.at, "source": o.source, "scope": o.scope, "event": o.event}
        for o in batch
    ]


class SqlConversationStore:
    """``muster_dispatch.ConversationStore`` on the database: a capture replaces the whole snapshot at once."""

    def __init__(self, engine: AsyncEngine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    async def capture(self, harness: str, conversation: str, files: Mapping[str, bytes]) -> None:
        snapshot = checked_snapshot(harness, conversation, files)
        key = (conversation_files.c.harness == harness) & (conversation_files.c.conversation == conversation)
        async with self.engine.begin() as conn:
            await conn.execute(delete(conversation_files).where(key))
            await conn.execute(
                delete(conversations).where(
                    (conversations.c.harness == harness) & (conversations.c.conversation == conversation)
                )
            )
            await conn.execute(
                insert(conversations).values(harness=harness, conversation=conversation, captured_at=self.clock())
            )
            if snapshot:
                rows = [
                    {"harness": harness, "conversation": conversation, "path": path, "content": content}
                    for path, content in snapshot.items()
                ]
                await conn.execute(insert(conversation_files), rows)

    async def restore(self, harness: str, conversation: str) -> dict[str, bytes] | None:
        check_key(harness, conversation)
        known = exists().where((conversations.c.harness == harness) & (conversations.c.conversation == conversation))
        query = select(conversation_files.c.path, conversation_files.c.content).where(
            (conversation_files.c.harness == harness) & (conversation_files.c.conversation == conversation)
        )
        async with self.engine.connect() as conn:
            if not (await conn.execute(select(known))).scalar():
                return None
            return {row.path: bytes(row.content) for row in await conn.execute(query)}
