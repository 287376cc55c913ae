"""The outbox in SQL: events written by the scans, packed into deliveries, deliveries claimed and settled.

Every step is one transaction. Packing and claiming lock their rows with the dialect's claim lock (``FOR UPDATE
SKIP LOCKED`` on PostgreSQL): instances sharing the database each pack an event once and send a delivery once. A
delivery claimed by an instance that died is claimable again once its claim lapses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import Dialect
from muster_api.db.engine import UNLOCKED_READS
from muster_api.notify import render
from muster_api.notify.config import NotifyConfig
from muster_api.notify.tables import deliveries, events

PACK_LIMIT = 500
SHOWN = (
    deliveries.c.id,
    deliveries.c.kind,
    deliveries.c.subject,
    deliveries.c.events,
    deliveries.c.title,
    deliveries.c.service,
    deliveries.c.state,
    deliveries.c.attempts,
    deliveries.c.last_error,
    deliveries.c.created_at,
    deliveries.c.due_at,
    deliveries.c.finished_at,
)


@dataclass(frozen=True)
class Claimed:
    id: int
    url_digest: str
    service: str
    title: str
    body: str
    attempts: int


def _groups(rows: list[Any], ready_before: datetime) -> list[list[Any]]:
    """A person's messages form one group, once the first of them is older than the coalescing window; every other
    event is a group of its own."""
    people: dict[str, list[Any]] = defaultdict(list)
    groups: list[list[Any]] = []
    for row in rows:
        if row.kind == "message_to_human":
            people[row.subject].append(row)
        else:
            groups.append([row])
    groups.extend(burst for burst in people.values() if burst[0].created_at <= ready_before)
    return groups


def _words(group: list[Any]) -> tuple[str, str]:
    first = group[0]
    if first.kind == "message_to_human":
        return render.burst(first.subject, [(row.title, row.body) for row in group])
    return first.title, first.body


class SqlOutbox:
    def __init__(self, engine: AsyncEngine, dialect: Dialect) -> None:
        self.engine = engine
        self.dialect = dialect
        # Scans and the log only read: on SQLite they take no write lock (the senders of messages never wait on them).
        self.reads = engine.execution_options(**{UNLOCKED_READS: True})

    async def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Events written once each: a dedup key already present is skipped."""
        if rows:
            async with self.engine.begin() as conn:
                await conn.execute(self.dialect.upsert(events, list(rows), conflict=["dedup"], update=()))

    async def pack(self, config: NotifyConfig, now: datetime, coalesce: timedelta) -> int:
        """Deliveries (one per group and URL) for the events not packed yet; how many deliveries were made."""
        query = select(events).where(events.c.packed == 0).order_by(events.c.id).limit(PACK_LIMIT)
        made = 0
        async with self.engine.begin() as conn:
            rows = (await conn.execute(self.dialect.lock_claimable(query))).all()
            for group in _groups(list(rows), now - coalesce):
                title, body = _words(group)
                first_id = None
                for target in config.targets:
                    values = {
                        "kind": group[0].kind,
                        "subject": group[0].subject,
                        "events": len(group),
                        "title": title,
                        "body": body,
                        "url_digest": target.digest,
                        "service": target.service,
                        "state": "pending",
                        "attempts": 0,
                        "due_at": now,
                        "created_at": now,
                    }
                    made_id = (
                        await conn.execute(insert(deliveries).values(values).returning(deliveries.c.id))
                    ).scalar_one()
                    first_id = first_id or made_id
                    made += 1
                ids = [row.id for row in group]
                await conn.execute(update(events).where(events.c.id.in_(ids)).values(packed=1, delivery_id=first_id))
        return made

    async def claim(self, now: datetime, hold: timedelta) -> Claimed | None:
        """The next due delivery, marked sending (its attempt counted) until ``now + hold``."""
        query = (
            select(deliveries.c.id, deliveries.c.state, deliveries.c.claimed_until)
            .where(deliveries.c.state.in_(("pending", "sending")), deliveries.c.due_at <= now)
            .order_by(deliveries.c.due_at, deliveries.c.id)
            .limit(20)
        )
        async with self.engine.begin() as conn:
            for row in (await conn.execute(self.dialect.lock_claimable(query))).all():
                if row.state == "sending" and row.claimed_until is not None and row.claimed_until > now:
                    continue  # another instance is sending it
                claimed = (
                    await conn.execute(
                        update(deliveries)
                        .where(deliveries.c.id == row.id)
                        .values(state="sending", claimed_until=now + hold, attempts=deliveries.c.attempts + 1)
                        .returning(
                            deliveries.c.id,
                            deliveries.c.url_digest,
                            deliveries.c.service,
                            deliveries.c.title,
                            deliveries.c.body,
                            deliveries.c.attempts,
                        )
                    )
                ).one()
                return Claimed(*claimed)
        return None

    async def settle(self, delivery_id: int, values: dict[str, Any]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(deliveries).where(deliveries.c.id == delivery_id).values(claimed_until=None, **values)
            )

    async def page(self, limit: int, before: int | None) -> list[dict[str, Any]]:
        query = select(*SHOWN).order_by(deliveries.c.id.desc()).limit(limit)
        if before is not None:
            query = query.where(deliveries.c.id < before)
        async with self.reads.connect() as conn:
            return [dict(row._mapping) for row in (await conn.execute(query)).all()]

    async def prune(self, before: datetime) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(delete(events).where(events.c.created_at < before))
            await conn.execute(
                delete(deliveries).where(
                    deliveries.c.created_at < before, deliveries.c.state.in_(("delivered", "failed"))
                )
            )
