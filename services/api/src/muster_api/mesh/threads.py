"""The mesh's threads in SQL (``muster_mesh.threads.ThreadStore``), the same statements on SQLite and PostgreSQL.

A thread's key is ``coalesce(thread_id, message_id)``. It is never searched as that expression: a thread is found by
``thread_id`` (indexed) or, for a message sent without one, by its primary key. A caller's listing starts from the
messages it may see, the ones it sent (``ix_mesh_messages_sender``) and its inbox (the inbox's primary key), grouped
by thread; the page's threads then get their last message and participants, two more statements bounded by the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, FromClause, Select, and_, exists, func, or_, select, union
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from muster_api.mesh.tables import inbox, messages
from muster_mesh.threads import PREVIEW_CHARS, ThreadMessageRow, ThreadQuery, ThreadRow

_m = messages.c
_KEY = func.coalesce(_m.thread_id, _m.message_id)


def _in_threads(keys: Sequence[str]) -> ColumnElement[bool]:
    return or_(_m.thread_id.in_(keys), and_(_m.thread_id.is_(None), _m.message_id.in_(keys)))


def _shown(viewer: str | None) -> FromClause:
    """The messages table, cut to what ``viewer`` sent or received (all of it when None)."""
    if viewer is None:
        return messages
    mine = union(
        select(_m.message_id.label("message_id")).where(_m.sender == viewer),
        select(inbox.c.message_id).where(inbox.c.recipient == viewer),
    ).subquery("mine")
    return messages.join(mine, mine.c.message_id == _m.message_id)


def _visible_to(viewer: str) -> ColumnElement[bool]:
    held = exists().where(inbox.c.message_id == _m.message_id, inbox.c.recipient == viewer)
    return or_(_m.sender == viewer, held)


def _page(query: ThreadQuery) -> Select[Any, Any, Any]:
    tkey = _KEY.label("tkey")
    last_at = func.max(_m.sent_at).label("last_at")
    return (
        select(tkey, func.count().label("n"), last_at)
        .select_from(_shown(query.viewer))
        .group_by(_KEY)
        .order_by(last_at.desc(), tkey)
        .limit(query.limit)
        .offset(query.offset)
    )


def _last_messages(viewer: str | None, keys: Sequence[str]) -> Select[Any]:
    order = (_m.sent_at.desc(), _m.message_id.desc())
    ranked = (
        select(
            _KEY.label("tkey"),
            _m.message_id,
            _m.sender,
            func.substr(_m.body, 1, PREVIEW_CHARS + 1).label("preview"),
            _m.sent_at,
            func.row_number().over(partition_by=_KEY, order_by=order).label("rn"),
        )
        .select_from(_shown(viewer))
        .where(_in_threads(keys))
        .subquery("ranked")
    )
    return select(ranked).where(ranked.c.rn == 1)


def _participants(viewer: str | None, keys: Sequence[str]) -> Any:
    to = inbox.alias("to_")
    senders = select(_KEY.label("tkey"), _m.sender.label("who")).select_from(_shown(viewer)).where(_in_threads(keys))
    recipients = (
        select(_KEY.label("tkey"), to.c.recipient.label("who"))
        .select_from(_shown(viewer).join(to, to.c.message_id == _m.message_id))
        .where(_in_threads(keys))
    )
    return union(senders, recipients)


class SqlThreads:
    """``ThreadStore`` on one database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def list_threads(self, query: ThreadQuery) -> list[ThreadRow]:
        async with self.engine.connect() as conn:
            page = (await conn.execute(_page(query))).all()
            keys = [r.tkey for r in page]
            if not keys:
                return []
            last = {r.tkey: r for r in (await conn.execute(_last_messages(query.viewer, keys))).all()}
            people: dict[str, set[str]] = {}
            for r in (await conn.execute(_participants(query.viewer, keys))).all():
                people.setdefault(r.tkey, set()).add(r.who)
        return [
            ThreadRow(
                p.tkey,
                p.n,
                tuple(sorted(people.get(p.tkey, ()))),
                last[p.tkey].message_id,
                last[p.tkey].sender,
                last[p.tkey].preview,
                last[p.tkey].sent_at,
            )
            for p in page
        ]

    async def thread_messages(self, query: ThreadQuery) -> list[ThreadMessageRow]:
        assert query.thread_id is not None
        stmt = (
            select(_m.message_id, _m.sender, _m.body, _m.thread_id, _m.sent_at)
            .where(_in_threads([query.thread_id]))
            .order_by(_m.sent_at, _m.message_id)
            .limit(query.limit)
            .offset(query.offset)
        )
        if query.viewer is not None:
            stmt = stmt.where(_visible_to(query.viewer))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
            to = await _recipients(conn, [r.message_id for r in rows])
        return [
            ThreadMessageRow(
                r.message_id, r.sender, tuple(sorted(to.get(r.message_id, ()))), r.body, r.thread_id, r.sent_at
            )
            for r in rows
        ]


async def _recipients(conn: AsyncConnection, ids: Sequence[str]) -> dict[str, set[str]]:
    if not ids:
        return {}
    found: dict[str, set[str]] = {}
    stmt = select(inbox.c.message_id, inbox.c.recipient).where(inbox.c.message_id.in_(ids))
    for r in (await conn.execute(stmt)).all():
        found.setdefault(r.message_id, set()).add(r.recipient)
    return found


__all__ = ["SqlThreads"]
