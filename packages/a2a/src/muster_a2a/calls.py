"""Stored call handles: a call is recorded before it is followed, so that a restart resumes it instead of losing it.

``CallStore`` is the storage protocol (the service implements it in SQL; ``InMemoryCallStore`` here), checked by the
conformance suite in ``muster_a2a.testing``. ``CallTracker`` runs calls and resumptions against a store.

Several instances may share one store: the instance following a call holds it (``owner`` until
``lease_expires_at``), renews that while it follows and releases it when the call ends. Another instance takes a call
over only once nobody holds it or its lease has lapsed (``claim``), so a call is never followed twice while its
follower lives, and never lost when it dies. Expiries come from the injected clock, never from the store's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import Protocol

import anyio

from muster_a2a.agent import OnProgress, Progress, RemoteAgent, Tool
from muster_a2a.errors import NotContinuableError, UnknownCallError
from muster_a2a.models import CallRecord, ToolResult

DEFAULT_LEASE = timedelta(seconds=30)


class CallStore(Protocol):
    async def save(self, record: CallRecord) -> None:
        """Insert the record with this id (with its ``owner`` and lease), or replace it: every field except
        ``owner`` and ``lease_expires_at``, which only ``claim``, ``renew`` and ``release`` change — but a record
        saved with its result is finished, held by nobody: the same write clears both."""
        ...

    async def get(self, call_id: str) -> CallRecord | None: ...

    async def in_flight(self) -> list[CallRecord]:
        """Records without a result, oldest first."""
        ...

    async def claim(self, owner: str, now: datetime, until: datetime, *, limit: int = 100) -> list[CallRecord]:
        """Take up to ``limit`` records without a result that nobody holds (no owner, or a lease expired before
        ``now``), oldest first: each gets ``owner`` and a lease until ``until``, and is returned so. Atomic: two
        claimers, even concurrent ones on other instances, never get the same record."""
        ...

    async def renew(self, owner: str, call_ids: Collection[str], until: datetime) -> set[str]:
        """Extend to ``until`` the lease of those records ``owner`` still holds; returns their ids (a missing id was
        taken over by another instance, or is finished)."""
        ...

    async def release(self, owner: str, call_ids: Collection[str] | None = None) -> None:
        """Drop ``owner``'s hold on these records (all it holds when ``None``): they are free to be claimed."""
        ...


class InMemoryCallStore:
    def __init__(self) -> None:
        self._records: dict[str, CallRecord] = {}

    async def save(self, record: CallRecord) -> None:
        stored = self._records.get(record.id)
        copy = record.model_copy(deep=True)
        if stored is not None:
            copy.owner, copy.lease_expires_at = stored.owner, stored.lease_expires_at
        if copy.result is not None:
            copy.owner = copy.lease_expires_at = None
        self._records[record.id] = copy

    async def get(self, call_id: str) -> CallRecord | None:
        record = self._records.get(call_id)
        return record.model_copy(deep=True) if record else None

    def _pending(self) -> list[CallRecord]:
        pending = [r for r in self._records.values() if r.result is None]
        return sorted(pending, key=lambda r: (r.created_at, r.id))

    async def in_flight(self) -> list[CallRecord]:
        return [r.model_copy(deep=True) for r in self._pending()]

    async def claim(self, owner: str, now: datetime, until: datetime, *, limit: int = 100) -> list[CallRecord]:
        free = [r for r in self._pending() if r.owner is None or r.lease_expires_at is None or r.lease_expires_at < now]
        for record in free[:limit]:
            record.owner, record.lease_expires_at = owner, until
        return [r.model_copy(deep=True) for r in free[:limit]]

    async def renew(self, owner: str, call_ids: Collection[str], until: datetime) -> set[str]:
        renewed: set[str] = set()
        for call_id in call_ids:
            record = self._records.get(call_id)
            if record is not None and record.result is None and record.owner == owner:
                record.lease_expires_at = until
                renewed.add(call_id)
        return renewed

    async def release(self, owner: str, call_ids: Collection[str] | None = None) -> None:
        for record in self._records.values():
            if record.owner == owner and (call_ids is None or record.id in call_ids):
                record.owner, record.lease_expires_at = None, None


class CallTracker:
    """Runs tool calls with their handle stored (before polling) and their result stored at the end.

    ``owner`` names this tracker's instance in the store; the calls it begins or claims are held for ``lease`` (from
    ``now``), which its user renews (``renew``) while it follows them."""

    def __init__(
        self,
        store: CallStore,
        now: Callable[[], datetime],
        *,
        owner: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
    ) -> None:
        self.store = store
        self.now = now
        self.owner = owner or uuid.uuid4().hex
        self.lease = lease

    async def _save(self, record: CallRecord) -> None:
        # A write that has begun completes even if the follower is cancelled (shutdown, taken over): an interrupted
        # database call leaves a connection half-closed, and the stored handle would lag behind the remote task.
        with anyio.CancelScope(shield=True):
            await self.store.save(record)

    async def claim(self, *, limit: int = 100) -> list[CallRecord]:
        """The in-flight calls nobody holds any more, now held by this tracker's owner."""
        now = self.now()
        return await self.store.claim(self.owner, now, now + self.lease, limit=limit)

    async def renew(self, call_ids: Collection[str]) -> set[str]:
        """Extend the lease of the calls still held; returns those (the others were taken over or are finished)."""
        if not call_ids:
            return set()
        return await self.store.renew(self.owner, call_ids, self.now() + self.lease)

    async def release(self, call_ids: Collection[str] | None = None) -> None:
        await self.store.release(self.owner, call_ids)

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
            owner=self.owner,
            lease_expires_at=at + self.lease,
        )
        await self._save(record)
        return record

    def _progress(self, record: CallRecord) -> OnProgress:
        async def on_progress(progress: Progress) -> None:
            record.task_id = progress.task_id
            record.context_id = progress.context_id
            record.state = progress.state
            record.polls = progress.polls
            record.dialect = progress.dialect or record.dialect
            record.updated_at = self.now()
            await self._save(record)

        return on_progress

    async def _finish(self, record: CallRecord, result: ToolResult) -> CallRecord:
        meta = result.metadata
        record.task_id = meta.get("task_id") or record.task_id
        record.context_id = meta.get("context_id") or record.context_id
        record.state = str(meta.get("state") or record.state)
        record.polls = int(meta.get("polls") or record.polls)
        record.result = result
        record.updated_at = self.now()
        record.owner = record.lease_expires_at = None
        await self._save(record)  # with its result: released in the same write
        return record

    async def run(
        self, record: CallRecord, tool: Tool, *, task_id: str | None = None, context_id: str | None = None
    ) -> CallRecord:
        """Send the call's task and follow it. ``task_id``/``context_id``: the remote task (and its context) that
        this task continues, e.g. the answer to an input-required task; the record learns the task id from the
        agent's answer, as for a new task."""
        result = await tool.call(
            record.task, task_id=task_id, context_id=context_id, on_progress=self._progress(record)
        )
        return await self._finish(record, result)

    @staticmethod
    def check_continuable(earlier: CallRecord, tool: Tool) -> None:
        """``earlier`` may take an answer through ``tool``: a call of that tool whose task asks for input."""
        if earlier.tool != tool.name or earlier.state != "input-required" or earlier.task_id is None:
            raise NotContinuableError(earlier.id, tool.name, earlier.state)

    async def answer(self, record: CallRecord, tool: Tool, earlier: CallRecord) -> CallRecord:
        """Send ``record``'s task as the answer to ``earlier`` (an input-required call, ``check_continuable``) on
        the same remote task and follow it. ``earlier`` is ``continued`` while the answer runs and then takes the
        state the task reached; its result's metadata names the answering call (``continued_by``)."""
        await self._continued(earlier, "continued", record.id)
        done = await self.run(record, tool, task_id=earlier.task_id, context_id=earlier.context_id)
        await self._continued(earlier, done.state, record.id)
        return done

    async def _continued(self, earlier: CallRecord, state: str, by: str) -> None:
        earlier.state = state
        if earlier.result is not None:
            earlier.result.metadata["continued_by"] = by
        earlier.updated_at = self.now()
        await self._save(earlier)

    async def call(
        self, tool: Tool, task: str, *, task_id: str | None = None, context_id: str | None = None
    ) -> CallRecord:
        return await self.run(await self.begin(tool, task), tool, task_id=task_id, context_id=context_id)

    async def resume(self, record: CallRecord, agent: RemoteAgent | None) -> CallRecord:
        """Follow an in-flight record by GetTask for what is left of its budget (then CancelTask).

        An agent that is configured but unavailable right now (card unreachable) leaves the record in flight, still
        held, for a later attempt (reload, restart; the caller keeps renewing it or releases it); an agent no longer
        configured ends it with an error."""
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
