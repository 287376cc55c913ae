"""What the run store does differently on PostgreSQL: each write of a run's life is ONE statement in autocommit, one
round trip instead of BEGIN + statements + NOTIFY + COMMIT (profiled: a short run through a worker spent most of its
time in those round trips, each a context switch on a loaded machine).

- queue a run: the INSERT and its NOTIFY (a data-modifying CTE, written out: building it in SQLAlchemy Core cost
  the route more CPU than the statement);
- claim: ``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED) RETURNING`` the run and whether controls wait for it;
- journal rows: the whole batch in one INSERT (the rows of one JSON array parameter, the text its NOTIFY carries: one
  prepared statement whatever the batch size, one encoding of the rows) with its NOTIFY, which carries the rows when
  they fit (other instances' readers then need not read them);
- finish: the conditional UPDATE, the last journal rows only when it matched, the NOTIFY only when it matched; and the
  worker's next run claimed in the same statement.

A statement is atomic: each keeps the guarantees of the transaction it replaces.

They run on asyncpg connections of the store's own (``DriverPool``), not the engine's, as do the two reads every
run's stream makes (the run, its rows): SQLAlchemy's checkout, statement and result machinery around a statement cost
the API and the worker more CPU than the statement itself (each run pays five of them). The statements are
SQLAlchemy's compilation of the texts below, so the parameters are the same names on both paths; what asyncpg answers
is decoded here (the JSON columns arrive as text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import Boolean, Integer, bindparam, column, select, text
from sqlalchemy.engine import Dialect as SaDialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from muster_api.db.dialect import Dialect
from muster_api.db.driver_pool import DriverPool, asyncpg_dsn
from muster_api.db.schema import UTCDateTime
from muster_api.dispatch.models import Run
from muster_api.dispatch.notify import NEW_RUN, RunEnd, RunNotifier, encode_rows
from muster_api.dispatch.store import SqlRunStore, run_of, stored_row_json
from muster_api.dispatch.tables import events, runs
from muster_dispatch import Observation

# The columns a queued run has, with the NOTIFY that wakes idle workers.
_QUEUED = ("id", "agent", "status", "prompt", "workspace", "active_workspace", "idempotency_key", "deadline_s")
_QUEUE = text("""
WITH queued AS (
    INSERT INTO dispatch_runs (id, agent, status, prompt, workspace, active_workspace, idempotency_key, deadline_s,
                               request, queued_at)
    VALUES (:id, :agent, :status, :prompt, :workspace, :active_workspace, :idempotency_key, :deadline_s,
            CAST(:request AS jsonb), :queued_at)
)
SELECT pg_notify(:channel, :payload)
""").bindparams(bindparam("queued_at", type_=UTCDateTime()))

# The batch as one JSON array of rows (``encode_rows``, the text its NOTIFY carries): one prepared statement whatever
# the batch size, and one parameter to encode.
_APPEND = text("""
WITH stored AS (
    INSERT INTO dispatch_events (run_id, seq, at, source, scope, event)
    SELECT :run_id, CAST(u.r->>0 AS integer), u.r->>1, u.r->>2, u.r->3, u.r->4
    FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS u(r)
    RETURNING 1
)
SELECT pg_notify(:channel, :payload) FROM (SELECT count(*) FROM stored) AS done
""")

# No row when the run is no longer this owner's (interrupted): then no journal row is stored and nobody is woken.
_FINISH_SQL = """
WITH done AS (
    UPDATE dispatch_runs SET status = :status, finished_at = :finished_at, selected = :selected,
        attempts = CAST(:attempts AS jsonb), text = :text, usage = CAST(:usage AS jsonb),
        error = CAST(:error AS jsonb), conversation = :conversation, active_workspace = NULL, lease_expires_at = NULL
    WHERE id = :run_id AND worker = :owner AND status = 'running'
    RETURNING id
), stored AS (
    INSERT INTO dispatch_events (run_id, seq, at, source, scope, event)
    SELECT done.id, CAST(u.r->>0 AS integer), u.r->>1, u.r->>2, u.r->3, u.r->4
    FROM done, jsonb_array_elements(CAST(:rows AS jsonb)) AS u(r)
    RETURNING 1
){claim}
{select}
"""
_FINISHED_AT = bindparam("finished_at", type_=UTCDateTime())
_FINISH = text(
    _FINISH_SQL.format(
        claim="",
        select="SELECT pg_notify(:channel, :payload), (SELECT count(*) FROM stored) FROM done",
    )
).bindparams(_FINISHED_AT)

# The oldest queued run, claimed for an owner; whether controls wait for it. Nobody waits for a run to start (readers
# wait for events or the end): a claim notifies nobody.
_CLAIMED_SQL = """claimed AS (
    UPDATE dispatch_runs SET status = 'running', worker = :owner, started_at = :now, lease_expires_at = :until
    WHERE id = (SELECT id FROM dispatch_runs WHERE status = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
        AND status = 'queued'
    RETURNING {columns},
        EXISTS (SELECT 1 FROM dispatch_controls WHERE dispatch_controls.run_id = dispatch_runs.id) AS has_controls
)"""
_CLAIMED = _CLAIMED_SQL.format(columns=", ".join(column.name for column in runs.columns))
_WITH_CLAIMED = """WITH {claimed}
SELECT * FROM claimed"""
_TOLD = """, told AS (
    SELECT pg_notify(:channel, :payload) FROM done
), {claimed}"""
_CLAIM_TIMES = (bindparam("now", type_=UTCDateTime()), bindparam("until", type_=UTCDateTime()))
_CLAIM = (
    text(_WITH_CLAIMED.format(claimed=_CLAIMED))
    .bindparams(*_CLAIM_TIMES)
    .columns(*runs.columns, column("has_controls", Boolean))
)
# ``finish`` and ``claim`` at once. One row: whether the end was stored (``finished``), then the claimed run's columns
# (NULL when none was queued).
_FINISH_AND_CLAIM = (
    text(
        _FINISH_SQL.format(
            claim=_TOLD.format(claimed=_CLAIMED),
            select="SELECT (SELECT count(*) FROM told) AS finished, claimed.*\n"
            "FROM (SELECT (SELECT count(*) FROM stored)) AS one LEFT JOIN claimed ON true",
        )
    )
    .bindparams(_FINISHED_AT, *_CLAIM_TIMES)
    .columns(column("finished", Integer), *runs.columns, column("has_controls", Boolean))
)

_GET = select(runs).where(runs.c.id == bindparam("run_id"))
# A stream's read: the run and up to :limit of its rows after :after, in one statement (one snapshot: once the run
# is over, the rows read with it are all of them), a row per journal row (one with NULLs for none). The JSON columns
# as jsonb's text, which a stream sends as it is: decoding each row to encode it again cost the API more than the read.
_RUN_AND_ROWS_SQL = """
SELECT {columns}, e.seq, e.at, e.source, CAST(e.scope AS text), CAST(e.event AS text)
FROM dispatch_runs LEFT JOIN LATERAL (
    SELECT seq, at, source, scope, event FROM dispatch_events
    WHERE dispatch_events.run_id = dispatch_runs.id AND dispatch_events.seq > :after
    ORDER BY seq LIMIT :limit
) AS e ON true
WHERE dispatch_runs.id = :run_id
ORDER BY e.seq"""
_RUN_AND_ROWS = text(
    _RUN_AND_ROWS_SQL.format(columns=", ".join(f"dispatch_runs.{column.name}" for column in runs.columns))
)
_RUN_NAMES = tuple(column.name for column in runs.columns)
_EVENTS_AFTER = (
    select(events.c.seq, events.c.at, events.c.source, events.c.scope, events.c.event)
    .where(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after"))
    .order_by(events.c.seq)
    .limit(bindparam("limit"))
)
# The run columns asyncpg hands over as JSON text.
_JSON_COLUMNS = tuple(c.name for c in runs.columns if c.name in ("request", "attempts", "usage", "error"))
# Connections of this pool (beside the engine's and the mesh's): a process runs a few of these statements at once.
RUN_POOL_SIZE = 5

_OUTCOME_TEXT = ("status", "selected", "text", "conversation")
_OUTCOME_JSON = ("attempts", "usage", "error")


def _jsonb(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


@lru_cache(maxsize=32)
def _positional(stmt: ClauseElement, dialect: SaDialect) -> tuple[str, tuple[str, ...]]:
    """A statement compiled once for asyncpg: its SQL and the names of its positional parameters, in order."""
    compiled = cast(SQLCompiler, stmt.compile(dialect=dialect))
    return str(compiled), tuple(compiled.positiontup or ())


def _run_row(record: Any) -> dict[str, Any]:
    """The columns of a run as the engine would hand them over (JSON decoded)."""
    row = dict(record)
    for name in _JSON_COLUMNS:
        if isinstance(row.get(name), str):
            row[name] = json.loads(row[name])
    return row


def _claimed(row: dict[str, Any]) -> tuple[Run, bool]:
    """A claimed run and whether controls wait for it, from the columns ``_CLAIMED`` returns."""
    has_controls = bool(row.pop("has_controls"))
    return run_of(row), has_controls


class PostgresRunStore(SqlRunStore):
    def __init__(self, engine: AsyncEngine, notifier: RunNotifier, dialect: Dialect | None = None) -> None:
        super().__init__(engine, notifier, dialect)
        self.driver = DriverPool(asyncpg_dsn(engine), size=RUN_POOL_SIZE)

    async def _fetch(self, stmt: ClauseElement, params: Mapping[str, Any]) -> list[Any]:
        sql, names = _positional(stmt, self.engine.dialect)
        return await self.driver.fetch(sql, *(params[name] for name in names))

    async def aclose(self) -> None:
        await self.driver.aclose()

    def _notify_params(self, keys: list[str]) -> dict[str, str]:
        channel, payload = self.notifier.payload(keys)
        assert channel is not None and payload is not None, "one run's keys fit one notification"
        return {"channel": channel, "payload": payload}

    async def create(self, values: dict[str, Any]) -> Run:
        # The statement names its columns: a column the route adds must be added there too, not dropped unseen.
        assert values.keys() == {*_QUEUED, "request", "queued_at"}, sorted(values)
        params = {name: values[name] for name in _QUEUED}
        params.update(
            self._notify_params([NEW_RUN]), request=json.dumps(values["request"]), queued_at=values["queued_at"]
        )
        run = run_of(values)
        try:
            with self.notifier.queuing(run):
                await self._fetch(_QUEUE, params)
        except asyncpg.UniqueViolationError as exc:  # the engine's error, which callers know
            raise IntegrityError("queue a run", None, exc) from exc
        self.notifier.fire([NEW_RUN])
        return run

    async def get(self, run_id: str) -> Run | None:
        rows = await self._fetch(_GET, {"run_id": run_id})
        return run_of(_run_row(rows[0])) if rows else None

    async def run_and_json(
        self, run_id: str, after: int, limit: int = 1000
    ) -> tuple[Run | None, list[tuple[int, str]]]:
        records = await self._fetch(_RUN_AND_ROWS, {"run_id": run_id, "after": after, "limit": limit})
        if not records:
            return None, []
        width = len(_RUN_NAMES)
        run = run_of(_run_row(zip(_RUN_NAMES, records[0][:width], strict=True)))
        return run, [stored_row_json(*record[width:]) for record in records if record[width] is not None]

    async def events_after(self, run_id: str, after: int, limit: int = 1000) -> list[Observation]:
        rows = await self._fetch(_EVENTS_AFTER, {"run_id": run_id, "after": after, "limit": limit})
        return [Observation(row[0], row[1], row[2], json.loads(row[3]), json.loads(row[4])) for row in rows]

    async def claim(self, owner: str, now: datetime, until: datetime) -> tuple[Run, bool] | None:
        rows = await self._fetch(_CLAIM, {"owner": owner, "now": now, "until": until})
        return _claimed(_run_row(rows[0])) if rows else None

    async def finish(
        self,
        run_id: str,
        owner: str,
        values: dict[str, Any],
        last_events: list[Observation] | None = None,
        end: RunEnd | None = None,
    ) -> bool:
        rows = encode_rows(last_events or [])
        params = self._outcome_params(run_id, owner, values, rows)
        params.update(self._handing(run_id, rows, end))
        changed = bool(await self._fetch(_FINISH, params))
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
        rows = encode_rows(last_events)
        params = self._outcome_params(run_id, owner, values, rows)
        params.update(self._handing(run_id, rows, end), now=now, until=until)
        (record,) = await self._fetch(_FINISH_AND_CLAIM, params)
        row = _run_row(record)
        changed = bool(row.pop("finished"))
        if changed:
            self.notifier.hand(run_id, last_events, end)
        return changed, _claimed(row) if row["id"] is not None else None

    async def append_events(self, run_id: str, batch: list[Observation]) -> None:
        rows = encode_rows(batch)
        params = {"rows": rows, "run_id": run_id, **self._handing(run_id, rows)}
        await self._fetch(_APPEND, params)
        self.notifier.hand(run_id, batch)

    @staticmethod
    def _outcome_params(run_id: str, owner: str, values: dict[str, Any], rows: str) -> dict[str, Any]:
        params: dict[str, Any] = {name: values.get(name) for name in _OUTCOME_TEXT}
        params.update({name: _jsonb(values.get(name)) for name in _OUTCOME_JSON})
        params.update(rows=rows, run_id=run_id, owner=owner, finished_at=values["finished_at"])
        return params

    def _handing(self, run_id: str, rows: str, end: RunEnd | None = None) -> dict[str, str]:
        notify = self.notifier.handing(run_id, rows, end)
        assert notify is not None, "PostgreSQL has LISTEN/NOTIFY"
        return {"channel": notify[0], "payload": notify[1]}


__all__ = ["PostgresRunStore"]
