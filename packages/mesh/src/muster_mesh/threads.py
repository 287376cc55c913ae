"""Threads: the conversations a caller is in, and the messages of one of them it may see.

A message belongs to the thread named by its ``thread_id``; a message sent without one opens a thread of its own,
named by its ``message_id``, so that a reply sent with ``thread_id = <that message_id>`` joins it. A caller sees the
messages it sent and the ones that reached its inbox (as search decides it); a thread is listed when it holds at least
one of them, and shows only those: participants (the senders and recipients of the messages shown), their count and
the last one. The overseer's view (``viewer=None``: every message) and an agent's conversation (``viewer`` = that
agent, asked by an overseer) are the service's to grant, as for search; the mesh only runs the query it is handed.
Pages are counted in threads (or messages) and carried by an opaque cursor, the offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pydantic import ConfigDict, Field

from muster_mesh.errors import InvalidRequest, ThreadNotFound
from muster_mesh.mesh import Mesh
from muster_mesh.models import Strict

DEFAULT_THREAD_PAGE = 20
MAX_THREAD_PAGE = 100
# A deep page costs what it skips: offsets past this are refused.
MAX_THREAD_OFFSET = 10_000
# The last message of a listed thread is shown by its first characters only (a body may be 64 KiB).
PREVIEW_CHARS = 280
MAX_THREAD_ID_CHARS = 128


@dataclass(frozen=True)
class ThreadQuery:
    viewer: str | None
    """Only messages this agent sent or holds in its inbox; None: every message (the overseer's view)."""
    limit: int
    offset: int
    thread_id: str | None = None
    """For ``thread_messages``: the thread read."""


@dataclass(frozen=True)
class ThreadRow:
    thread_id: str
    messages: int
    participants: tuple[str, ...]
    last_message_id: str
    last_sender: str
    last_preview: str
    """The last message's first ``PREVIEW_CHARS + 1`` characters (one more tells that it was cut)."""
    last_at: datetime


@dataclass(frozen=True)
class ThreadMessageRow:
    message_id: str
    sender: str
    recipients: tuple[str, ...]
    body: str
    thread_id: str | None
    sent_at: datetime


class ThreadStore(Protocol):
    async def list_threads(self, query: ThreadQuery) -> list[ThreadRow]:
        """Up to ``query.limit`` threads holding a message visible to ``query.viewer``, after skipping
        ``query.offset``: the latest last message first, then by thread id."""

    async def thread_messages(self, query: ThreadQuery) -> list[ThreadMessageRow]:
        """Up to ``query.limit`` messages of ``query.thread_id`` visible to ``query.viewer``, after skipping
        ``query.offset``: oldest first, then by message id. Recipients in agent_id order."""


class LastMessage(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    message_id: str
    sender: str = Field(alias="from")
    preview: str = Field(description=f"The body's first {PREVIEW_CHARS} characters.")
    truncated: bool = Field(description="True when the body is longer than the preview.")
    sent_at: datetime


class ThreadSummary(Strict):
    thread_id: str = Field(description="The messages' thread_id; a message sent without one: its message_id.")
    participants: list[str] = Field(description="Senders and recipients of the messages shown, in agent_id order.")
    messages: int = Field(description="How many of its messages the caller may see.")
    last_message: LastMessage


class ThreadPage(Strict):
    threads: list[ThreadSummary]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class ThreadMessage(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    message_id: str
    sender: str = Field(alias="from", description="The sender's agent_id (from its token).")
    to: list[str] = Field(description="The inboxes that hold it (until retention sweeps them).")
    body: str
    thread_id: str | None
    sent_at: datetime


class ThreadMessages(Strict):
    thread_id: str
    messages: list[ThreadMessage]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


def _offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit() or int(cursor) > MAX_THREAD_OFFSET:
        raise InvalidRequest(
            "cursor must be the next_cursor of an earlier page",
            errors=[{"field": "cursor", "rule": "invalid_cursor", "message": "not a thread cursor"}],
        )
    return int(cursor)


def _next(offset: int, limit: int, rows: int) -> str | None:
    more = rows > limit and offset + limit <= MAX_THREAD_OFFSET
    return str(offset + limit) if more else None


def _summary(row: ThreadRow) -> ThreadSummary:
    return ThreadSummary(
        thread_id=row.thread_id,
        participants=sorted(row.participants),
        messages=row.messages,
        last_message=LastMessage(
            message_id=row.last_message_id,
            sender=row.last_sender,
            preview=row.last_preview[:PREVIEW_CHARS],
            truncated=len(row.last_preview) > PREVIEW_CHARS,
            sent_at=row.last_at,
        ),
    )


def _message(row: ThreadMessageRow) -> ThreadMessage:
    return ThreadMessage(
        message_id=row.message_id,
        sender=row.sender,
        to=sorted(row.recipients),
        body=row.body,
        thread_id=row.thread_id,
        sent_at=row.sent_at,
    )


class MeshThreads:
    """Threads as the mesh's rules allow: an agent sees what it sent and what reached its inbox (and its lease is
    renewed, like any call); ``overseer`` sees every message, or one agent's (``agent``), for callers the service
    vouches for."""

    def __init__(self, mesh: Mesh, store: ThreadStore) -> None:
        self.mesh = mesh
        self.store = store

    async def _viewer(self, token: str | None, overseer: bool, agent: str | None) -> str | None:
        if overseer:
            return agent
        if agent is not None:
            raise InvalidRequest(
                "agent is for the overseer's view (view=all)",
                errors=[{"field": "agent", "rule": "overseer_only", "message": "give view=all with agent"}],
            )
        return (await self.mesh.whoami(token=token)).agent_id

    async def threads(
        self,
        *,
        token: str | None,
        overseer: bool = False,
        agent: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ThreadPage:
        limit = min(max(limit or DEFAULT_THREAD_PAGE, 1), MAX_THREAD_PAGE)
        offset = _offset(cursor)
        viewer = await self._viewer(token, overseer, agent)
        rows = await self.store.list_threads(ThreadQuery(viewer, limit + 1, offset))
        return ThreadPage(threads=[_summary(r) for r in rows[:limit]], next_cursor=_next(offset, limit, len(rows)))

    async def thread(
        self,
        thread_id: str,
        *,
        token: str | None,
        overseer: bool = False,
        agent: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ThreadMessages:
        """The page of the thread's messages the caller may see; ``ThreadNotFound`` when it may see none."""
        limit = min(max(limit or DEFAULT_THREAD_PAGE, 1), MAX_THREAD_PAGE)
        offset = _offset(cursor)
        viewer = await self._viewer(token, overseer, agent)
        rows = await self.store.thread_messages(ThreadQuery(viewer, limit + 1, offset, thread_id))
        if not rows and offset == 0:
            raise ThreadNotFound(thread_id)
        return ThreadMessages(
            thread_id=thread_id,
            messages=[_message(r) for r in rows[:limit]],
            next_cursor=_next(offset, limit, len(rows)),
        )


__all__ = [
    "DEFAULT_THREAD_PAGE",
    "MAX_THREAD_ID_CHARS",
    "MAX_THREAD_PAGE",
    "PREVIEW_CHARS",
    "LastMessage",
    "MeshThreads",
    "ThreadMessage",
    "ThreadMessageRow",
    "ThreadMessages",
    "ThreadPage",
    "ThreadQuery",
    "ThreadRow",
    "ThreadStore",
    "ThreadSummary",
]
