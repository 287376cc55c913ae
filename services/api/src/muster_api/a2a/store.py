"""The SQL implementation of ``muster_a2a.CallStore`` (SQLite and PostgreSQL, through the dialect seam)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_a2a import CallRecord, ToolResult
from muster_api.a2a.tables import calls
from muster_api.db.dialect import upsert

_COLUMNS = [c.name for c in calls.columns]


class SqlCallStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def save(self, record: CallRecord) -> None:
        values: dict[str, Any] = record.model_dump(exclude={"result"})
        values["done"] = record.result is not None
        values["result"] = record.result.model_dump(mode="json") if record.result is not None else None
        stmt = upsert(
            self.engine.dialect.name, calls, values, conflict=["id"], update=[c for c in _COLUMNS if c != "id"]
        )
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


def _record(row: dict[str, Any]) -> CallRecord:
    done = row.pop("done")
    result = row.pop("result")
    record = CallRecord.model_validate(row)
    if done and isinstance(result, dict):
        record.result = ToolResult.model_validate(result)
    return record
