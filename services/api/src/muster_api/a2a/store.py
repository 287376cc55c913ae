"""The SQL implementation of ``muster_a2a.CallStore`` (SQLite and PostgreSQL, through the dialect seam)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_a2a import CallRecord, ToolResult
from muster_api.a2a.tables import calls
from muster_api.db.dialect import Dialect, dialect_of

_COLUMNS = [c.name for c in calls.columns]
# A replace never touches who holds the call: only claim / renew / release do.
_REPLACED = [c for c in _COLUMNS if c not in ("id", "owner", "lease_expires_at")]


def _free(now: datetime) -> ColumnElement[bool]:
    """Unfinished, and nobody holds it: no owner, or a lease that lapsed before ``now``."""
    return calls.c.done.is_(False) & or_(
        calls.c.owner.is_(None), calls.c.lease_expires_at.is_(None), calls.c.lease_expires_at < now
    )


class SqlCallStore:
    def __init__(self, engine: AsyncEngine, dialect: Dialect | None = None) -> None:
        self.engine = engine
        self.dialect = dialect or dialect_of(engine)

    async def save(self, record: CallRecord) -> None:
        values: dict[str, Any] = record.model_dump(exclude={"result"})
        values["done"] = record.result is not None
        values["result"] = record.result.model_dump(mode="json") if record.result is not None else None
        replaced = _REPLACED
        if record.result is not None:
            # Finished: held by nobody, in the same write (a reader never sees a result with a live lease).
            values["owner"] = values["lease_expires_at"] = None
            replaced = [*_REPLACED, "owner", "lease_expires_at"]
        stmt = self.dialect.upsert(calls, values, conflict=["id"], update=replaced)
        async with self.engine.begin() as conn:
            await conn.execute(stmt)

    async def get(self, call_id: str) -> CallRecord | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(calls).where(calls.c.id == call_id))).mappings().first()
        return _record(dict(row)) if row is not None else None

    async def in_flight(self) -> list[CallRecord]:
        query = select(calls).where(calls.c.done.is_(False)).order_by(calls.c.created_at, calls.c.id)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [_record(dict(row)) for row in rows]

    async def claim(self, owner: str, now: datetime, until: datetime, *, limit: int = 100) -> list[CallRecord]:
        candidates = select(calls.c.id).where(_free(now)).order_by(calls.c.created_at, calls.c.id).limit(limit)
        async with self.engine.begin() as conn:
            ids = list((await conn.execute(self.dialect.lock_claimable(candidates))).scalars())
            if not ids:
                return []
            # Conditional: a row whose lease was renewed or taken since the select is left alone.
            stmt = (
                update(calls)
                .where(calls.c.id.in_(ids), _free(now))
                .values(owner=owner, lease_expires_at=until)
                .returning(*calls.columns)
            )
            rows = (await conn.execute(stmt)).mappings().all()
        records = [_record(dict(row)) for row in rows]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    async def renew(self, owner: str, call_ids: Collection[str], until: datetime) -> set[str]:
        if not call_ids:
            return set()
        stmt = (
            update(calls)
            .where(calls.c.id.in_(list(call_ids)), calls.c.owner == owner, calls.c.done.is_(False))
            .values(lease_expires_at=until)
            .returning(calls.c.id)
        )
        async with self.engine.begin() as conn:
            return set((await conn.execute(stmt)).scalars())

    async def release(self, owner: str, call_ids: Collection[str] | None = None) -> None:
        stmt = update(calls).where(calls.c.owner == owner).values(owner=None, lease_expires_at=None)
        if call_ids is not None:
            if not call_ids:
                return
            stmt = stmt.where(calls.c.id.in_(list(call_ids)))
        async with self.engine.begin() as conn:
            await conn.execute(stmt)


def _record(row: dict[str, Any]) -> CallRecord:
    done = row.pop("done")
    result = row.pop("result")
    record = CallRecord.model_validate(row)
    if done and isinstance(result, dict):
        record.result = ToolResult.model_validate(result)
    return record
