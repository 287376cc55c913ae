"""Stored call handles: a call is recorded before it is followed, so that a restart resumes it instead of losing it.

``CallStore`` is the storage protocol (the service implements it in SQL; ``InMemoryCallStore`` here), checked by the
conformance suite in ``muster_a2a.testing``. ``CallTracker`` runs calls and resumptions against a store.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

from muster_a2a.agent import OnProgress, Progress, RemoteAgent, Tool
from muster_a2a.errors import UnknownCallError
from muster_a2a.models import CallRecord, ToolResult


class CallStore(Protocol):
    async def save(self, record: CallRecord) -> None:
        """Insert or replace the record with this id."""
        ...

    async def get(self, call_id: str) -> CallRecord | None: ...

    async def in_flight(self) -> list[CallRecord]:
        """Records without a result, oldest first."""
        ...


class InMemoryCallStore:
    def __init__(self) -> None:
        self._records: dict[str, CallRecord] = {}

    async def save(self, record: CallRecord) -> None:
        self._records[record.id] = record.model_copy(deep=True)

    async def get(self, call_id: str) -> CallRecord | None:
        record = self._records.get(call_id)
        return record.model_copy(deep=True) if record else None

    async def in_flight(self) -> list[CallRecord]:
        pending = [r for r in self._records.values() if r.result is None]
        return [r.model_copy(deep=True) for r in sorted(pending, key=lambda r: (r.created_at, r.id))]


class CallTracker:
    """Runs tool calls with their handle stored (before polling) and their result stored at the end."""

    def __init__(self, store: CallStore, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now

    async def begin(self, tool: Tool, task: str) -> CallRecord:
        """Record a call about to be sent (state ``sending``)."""
        at = self.now()
        record = CallRecord(
            id=uuid.uuid4().hex,
            agent=tool.agent.name,
            tool=tool.name,
            task=task,
            dialect=tool.agent.dialect,
            created_at=at,
            updated_at=at,
            expires_at=at + timedelta(milliseconds=tool.agent.timeout),
        )
        await self.store.save(record)
        return record

    def _progress(self, record: CallRecord) -> OnProgress:
        async def on_progress(progress: Progress) -> None:
            record.task_id = progress.task_id
            record.context_id = progress.context_id
            record.state = progress.state
            record.polls = progress.polls
            record.dialect = progress.dialect or record.dialect
            record.updated_at = self.now()
            await self.store.save(record)

        return on_progress

    async def _finish(self, record: CallRecord, result: ToolResult) -> CallRecord:
        meta = result.metadata
        record.task_id = meta.get("task_id") or record.task_id
        record.context_id = meta.get("context_id") or record.context_id
        record.state = str(meta.get("state") or record.state)
        record.polls = int(meta.get("polls") or record.polls)
        record.result = result
        record.updated_at = self.now()
        await self.store.save(record)
        return record

    async def run(self, record: CallRecord, tool: Tool) -> CallRecord:
        result = await tool.call(record.task, on_progress=self._progress(record))
        return await self._finish(record, result)

    async def call(self, tool: Tool, task: str) -> CallRecord:
        return await self.run(await self.begin(tool, task), tool)

    async def resume(self, record: CallRecord, agent: RemoteAgent | None) -> CallRecord:
        """Follow an in-flight record by GetTask for what is left of its budget (then CancelTask).

        An agent that is configured but unavailable right now (card unreachable) leaves the record in flight, for a
        later attempt (reload, restart); an agent no longer configured ends it with an error."""
        if agent is not None and not agent.ok and record.task_id is not None:
            return record
        if record.task_id is None:
            reason = "the service stopped before the agent returned a task id; the call cannot be resumed"
            return await self._finish(record, ToolResult(text=reason, is_error=True, metadata=self._meta(record)))
        if agent is None:
            reason = f"agent {record.agent} is no longer configured; task {record.task_id} cannot be followed"
            return await self._finish(record, ToolResult(text=reason, is_error=True, metadata=self._meta(record)))
        left_ms = int((record.expires_at - self.now()).total_seconds() * 1000)
        result = await agent.follow(
            record.task_id,
            context_id=record.context_id,
            budget_ms=max(left_ms, 0),
            polls=record.polls,
            state=record.state,
            on_progress=self._progress(record),
        )
        return await self._finish(record, result)

    async def get(self, call_id: str) -> CallRecord:
        record = await self.store.get(call_id)
        if record is None:
            raise UnknownCallError(call_id)
        return record

    @staticmethod
    def _meta(record: CallRecord) -> dict[str, object]:
        return {
            "agent": record.agent,
            "task_id": record.task_id,
            "context_id": record.context_id,
            "state": "error",
            "polls": record.polls,
            "ms": 0,
            "dialect": record.dialect,
        }
