"""The tasks' half of the in-memory transaction (``muster_mesh.tasks.TaskTx``), mixed into ``_MemoryTx``.

Transactions are serial here, so a claim is a scan for the best candidate and a replace; every change is undone when
the transaction raises, as the rest of the memory store is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Protocol

from muster_mesh.records import AgentRecord
from muster_mesh.tasks import Claimant, TaskEvent, TaskRecord


class TaskState(Protocol):
    agents: dict[str, AgentRecord]
    tasks: dict[str, TaskRecord]
    task_events: dict[str, list[TaskEvent]]


def addressed(task: TaskRecord, who: Claimant) -> bool:
    """Addressed to the claimant directly or by its role, repo or a cap, within the claim's filters."""
    ways = (
        task.to_agent == who.agent_id
        or (who.role is not None and task.role == who.role)
        or (who.repo is not None and task.repo == who.repo)
        or (task.cap is not None and task.cap in who.caps)
    )
    narrowed = (
        (who.only_role is None or task.role == who.only_role)
        and (who.only_repo is None or task.repo == who.only_repo)
        and (who.only_cap is None or task.cap == who.only_cap)
    )
    return ways and narrowed


def _queue_order(task: TaskRecord) -> tuple[int, datetime, str]:
    return (-task.priority, task.created_at, task.task_id)


class MemoryTasks:
    _s: TaskState
    _undo: list[Callable[[], object]]

    def _put_task(self, record: TaskRecord) -> None:
        tasks = self._s.tasks
        old = tasks.get(record.task_id)
        tasks[record.task_id] = record
        self._undo.append(
            partial(tasks.pop, record.task_id) if old is None else partial(tasks.__setitem__, record.task_id, old)
        )

    def _lapsed(self, task: TaskRecord, now: datetime) -> bool:
        holder = self._s.agents.get(task.holder) if task.holder is not None else None
        return task.state == "claimed" and (holder is None or not holder.live_at(now))

    async def insert_task(self, record: TaskRecord) -> None:
        self._put_task(record)

    async def get_task(self, task_id: str, *, for_update: bool = False) -> TaskRecord | None:
        return self._s.tasks.get(task_id)

    async def claim_task(
        self, claimant: Claimant, now: datetime, *, max_attempts: int, fail_reason: str
    ) -> TaskRecord | None:
        mine = [t for t in self._s.tasks.values() if addressed(t, claimant)]
        for task in mine:
            if self._lapsed(task, now) and task.attempts >= max_attempts:
                self._put_task(replace(task, state="failed", holder=None, reason=fail_reason, updated_at=now))
        claimable = [t for t in mine if t.state == "open" or (self._lapsed(t, now) and t.attempts < max_attempts)]
        if not claimable:
            return None
        best = min(claimable, key=_queue_order)
        held = replace(
            best,
            state="claimed",
            holder=claimant.agent_id,
            fence=best.fence + 1,
            attempts=best.attempts + 1,
            updated_at=now,
        )
        self._put_task(held)
        return held

    async def finish_task(
        self,
        task_id: str,
        holder: str,
        fence: int,
        now: datetime,
        *,
        state: str,
        result: str | None,
        reason: str | None,
    ) -> TaskRecord | None:
        task = self._s.tasks.get(task_id)
        if task is None or (task.state, task.holder, task.fence) != ("claimed", holder, fence):
            return None
        released = state == "open"
        done = replace(
            task,
            state=state,
            holder=None if released else task.holder,
            attempts=task.attempts - 1 if released else task.attempts,
            result=result,
            reason=reason,
            updated_at=now,
        )
        self._put_task(done)
        return done

    async def add_task_event(self, task_id: str, at: datetime, kind: str, agent: str | None, note: str | None) -> None:
        events = self._s.task_events.setdefault(task_id, [])
        events.append(TaskEvent(at=at, kind=kind, agent=agent, note=note))
        self._undo.append(events.pop)

    async def task_history(self, task_id: str) -> list[TaskEvent]:
        return list(self._s.task_events.get(task_id, []))

    async def list_tasks(self, *, state: str | None, role: str | None, limit: int) -> list[TaskRecord]:
        found = [
            t
            for t in self._s.tasks.values()
            if (state is None or t.state == state) and (role is None or t.role == role)
        ]
        return sorted(found, key=lambda t: (t.created_at, t.task_id))[:limit]

    async def live_agent_ids(self, agent_ids: Sequence[str], live_at: datetime) -> set[str]:
        agents = self._s.agents
        return {a for a in agent_ids if a in agents and agents[a].live_at(live_at)}


__all__ = ["MemoryTasks", "addressed"]
