"""Tasks with one owner: posted to an agent, a role, a repo or a capability; claimed atomically by exactly one live
agent, with a fencing token that grows with every claim of the task; done, failed or released only with the current
token. A task whose holder's lease ends is claimable again, its attempts counted; past ``max_attempts`` it fails.
The poster hears of each claim, completion and failure by a mesh message in the task's thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Literal, Protocol, cast

from pydantic import ConfigDict, Field, StringConstraints

from muster_mesh.errors import InvalidAddress, MeshError
from muster_mesh.mesh import Mesh, _fingerprint
from muster_mesh.models import ADDRESS_FIELDS, AgentId, Body, Label, Repo, Strict
from muster_mesh.records import AgentRecord, InboxEntry, MessageRecord
from muster_mesh.store import MeshTx
from muster_mesh.tokens import token_hash

TaskState = Literal["open", "claimed", "done", "failed"]
Title = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
TaskId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Fence = Annotated[int, Field(ge=1, le=2**62)]
MAX_RESULT_CHARS = 16_000
# What the poster is told at a claim: this, then the task's title (stores that claim in one step build the same text).
CLAIMED_NOTE = "claimed your task: "
# The history note of a claim: this, then the fencing token.
TOKEN_NOTE = "token "


class TaskPost(Strict):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"description": "Exactly one of `to`, `role`, `repo`, `cap`."}
    )

    title: Title
    body: Body = Field(description="What to do; at most 16,000 characters.", max_length=MAX_RESULT_CHARS)
    to: AgentId | None = None
    role: Label | None = None
    repo: Repo | None = None
    cap: Label | None = None
    priority: int = Field(default=0, ge=0, le=100, description="Higher first; oldest first within a priority.")
    confirm: bool = Field(default=False, strict=True)

    def address(self) -> dict[str, str]:
        return {k: v for k in ADDRESS_FIELDS if (v := getattr(self, k)) is not None}


class TaskClaim(Strict):
    role: Label | None = Field(default=None, description="Only tasks addressed to this role.")
    repo: Repo | None = Field(default=None, description="Only tasks addressed to this repo.")
    cap: Label | None = Field(default=None, description="Only tasks addressed to this capability.")
    confirm: bool = Field(default=False, strict=True)


class TaskDone(Strict):
    token: Fence = Field(description="The fencing token your claim answered.")
    result: Annotated[str, StringConstraints(max_length=MAX_RESULT_CHARS)] = ""
    confirm: bool = Field(default=False, strict=True)


class TaskFail(Strict):
    token: Fence
    reason: Annotated[str, StringConstraints(min_length=1, max_length=MAX_RESULT_CHARS)]
    confirm: bool = Field(default=False, strict=True)


class TaskRelease(Strict):
    token: Fence
    confirm: bool = Field(default=False, strict=True)


class TaskView(Strict):
    id: str
    title: str
    body: str
    poster: str
    to: str | None
    role: str | None
    repo: str | None
    cap: str | None
    priority: int
    state: TaskState
    holder: str | None
    token: int = Field(description="The fencing token of the latest claim (0: never claimed).")
    attempts: int
    result: str | None
    reason: str | None
    created_at: datetime
    updated_at: datetime


class TaskEvent(Strict):
    at: datetime
    kind: str
    agent: str | None
    note: str | None


class TaskDetail(TaskView):
    history: list[TaskEvent]


class TaskList(Strict):
    tasks: list[TaskView]


class TaskAnswer(Strict):
    """A task call's answer: the task as it is (or would be, in a preview); ``task`` null when none was claimable."""

    preview: bool
    task: TaskView | None
    replayed: bool = Field(default=False, exclude=True)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    task_id: str
    title: str
    body: str
    poster: str
    to_agent: str | None
    role: str | None
    repo: str | None
    cap: str | None
    priority: int
    state: str
    holder: str | None
    fence: int
    attempts: int
    result: str | None
    reason: str | None
    created_at: datetime
    updated_at: datetime

    def view(self, state: str | None = None) -> TaskView:
        return TaskView.model_validate(
            {
                "id": self.task_id,
                "title": self.title,
                "body": self.body,
                "poster": self.poster,
                "to": self.to_agent,
                "role": self.role,
                "repo": self.repo,
                "cap": self.cap,
                "priority": self.priority,
                "state": state or self.state,
                "holder": self.holder,
                "token": self.fence,
                "attempts": self.attempts,
                "result": self.result,
                "reason": self.reason,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
            }
        )


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who claims and which of its tasks it wants: its own address, narrowed by the request's filters."""

    agent_id: str
    role: str | None
    repo: str | None
    caps: tuple[str, ...]
    only_role: str | None = None
    only_repo: str | None = None
    only_cap: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimStep:
    """A whole claim for a store that does it in one step: the caller's renewal (by its token, the TTL seen for it
    re-checked), the failing of exhausted lapsed tasks, the claim (as ``TaskTx.claim_task``, the caller's role, repo
    and caps read with its renewal), its history row (``TOKEN_NOTE`` and the token) and the message to the poster
    (``CLAIMED_NOTE`` and the title, in the thread ``task:<id>``, stored when the poster is live)."""

    token_hash: str
    now: datetime
    only_role: str | None
    only_repo: str | None
    only_cap: str | None
    max_attempts: int
    fail_reason: str
    message_id: str


@dataclass(frozen=True, slots=True)
class ClaimedInOneStep:
    """What a one-step claim did: the caller renewed, the task it now holds (None: none was claimable) and the
    sequence of the poster's message (None: no task, or the poster was not live)."""

    agent_id: str
    task: TaskRecord | None
    told_seq: int | None


class TaskTx(MeshTx, Protocol):
    async def insert_task(self, record: TaskRecord) -> None: ...

    async def get_task(self, task_id: str, *, for_update: bool = False) -> TaskRecord | None: ...

    async def claim_task(
        self, claimant: Claimant, now: datetime, *, max_attempts: int, fail_reason: str
    ) -> TaskRecord | None:
        """One atomic step: the open task of the highest priority, oldest first, addressed to the claimant (directly,
        or to its role, repo or one of its caps), now held by it (``state='claimed'``, ``fence + 1``, ``attempts +
        1``). A claimed task whose holder's lease is not live at ``now`` counts as open while its attempts are below
        ``max_attempts``, and is failed with ``fail_reason`` in the same step once they are not. Exactly one
        concurrent claimer gets each task; None when none is claimable."""

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
        """Set the state of a task still ``claimed`` by ``holder`` under ``fence`` (``open`` releases it, the holder
        cleared and one attempt given back); None, and no change, otherwise."""

    async def add_task_event(
        self, task_id: str, at: datetime, kind: str, agent: str | None, note: str | None
    ) -> None: ...

    async def task_history(self, task_id: str) -> list[TaskEvent]: ...

    async def list_tasks(self, *, state: str | None, role: str | None, limit: int) -> list[TaskRecord]: ...

    async def live_agent_ids(self, agent_ids: Sequence[str], live_at: datetime) -> set[str]: ...


class TaskStore(Protocol):
    def transaction(self) -> AbstractAsyncContextManager[TaskTx]: ...

    def standalone(self) -> AbstractAsyncContextManager[TaskTx]: ...

    async def claim_in_one_step(self, step: ClaimStep) -> ClaimedInOneStep | None:
        """The whole claim in one round trip; None, and nothing written, when the store has no such step or the
        caller's token or TTL does not qualify (the claim's transaction then says why)."""


class TaskNotFound(MeshError):
    code = "task_not_found"

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {task_id!r}", task_id=task_id)


class StaleClaim(MeshError):
    code = "stale_claim"

    def __init__(self, task_id: str, token: int, current: TaskRecord) -> None:
        super().__init__(
            f"token {token} no longer holds task {task_id!r} (it is {current.state}, token {current.fence}): your "
            "claim ended (released, finished, or your lease lapsed and another agent claimed it)",
            task_id=task_id,
            token=token,
            current_token=current.fence,
            state=current.state,
        )


@dataclass(frozen=True)
class TaskLimits:
    max_attempts: int = 3
    list_limit: int = 500


def lost_reason(max_attempts: int) -> str:
    return f"its holder's lease ended {max_attempts} times (the attempts cap)"


class Tasks:
    def __init__(self, mesh: Mesh, limits: TaskLimits | None = None) -> None:
        self.mesh = mesh
        self.store = cast(TaskStore, mesh.store)
        self.limits = limits or TaskLimits()

    async def _tell(self, tx: TaskTx, task: TaskRecord, sender: str, text: str, now: datetime) -> dict[str, InboxEntry]:
        """A message to the poster in the task's thread, in the same transaction (published after the commit)."""
        message = MessageRecord(
            message_id=uuid.uuid4().hex, sender=sender, body=text, thread_id=f"task:{task.task_id}", sent_at=now
        )
        seqs = await tx.deliver(message, task.poster, now)
        return {agent_id: InboxEntry(seq=seq, message=message) for agent_id, seq in seqs.items()}

    async def _publish(self, entries: dict[str, InboxEntry]) -> None:
        if entries:
            await self.mesh.notifier.publish(sorted(entries), entries)

    async def post(self, request: TaskPost, *, token: str | None, idempotency_key: str | None = None) -> TaskAnswer:
        address = request.address()
        if len(address) != 1:
            raise InvalidAddress(sorted(address))
        now = self.mesh.now()
        fingerprint = _fingerprint("task_post", request.model_dump(mode="json", exclude={"confirm"}))
        async with self.store.transaction() as tx:
            agent = await self.mesh.caller(tx, token, now)
            scope = f"agent:{agent.agent_id}"
            if request.confirm:
                replayed = await self.mesh.replayed(tx, scope, idempotency_key, "task_post", fingerprint, TaskAnswer)
                if replayed is not None:
                    return replayed
            record = TaskRecord(
                task_id=uuid.uuid4().hex,
                title=request.title,
                body=request.body,
                poster=agent.agent_id,
                to_agent=request.to,
                role=request.role,
                repo=request.repo,
                cap=request.cap,
                priority=request.priority,
                state="open",
                holder=None,
                fence=0,
                attempts=0,
                result=None,
                reason=None,
                created_at=now,
                updated_at=now,
            )
            answer = TaskAnswer(preview=not request.confirm, task=record.view())
            if request.confirm:
                await tx.insert_task(record)
                await tx.add_task_event(record.task_id, now, "posted", agent.agent_id, None)
                await self.mesh.remember(tx, scope, idempotency_key, "task_post", fingerprint, answer, now)
            return answer

    async def claim(self, request: TaskClaim, *, token: str | None) -> TaskAnswer:
        """The caller's next task, held by it once this answers (a preview names none: which one a claim gets is
        decided by the claim itself, atomically)."""
        now = self.mesh.now()
        if request.confirm and token:
            claimed = await self._claim_in_one_step(request, token_hash(token), now)
            if claimed is not None:
                return claimed
        async with self.store.transaction() as tx:
            agent = await self.mesh.caller(tx, token, now)
            if not request.confirm:
                return TaskAnswer(preview=True, task=None)
            task = await tx.claim_task(
                _claimant(agent, request),
                now,
                max_attempts=self.limits.max_attempts,
                fail_reason=lost_reason(self.limits.max_attempts),
            )
            if task is None:
                return TaskAnswer(preview=False, task=None)
            await tx.add_task_event(task.task_id, now, "claimed", agent.agent_id, f"{TOKEN_NOTE}{task.fence}")
            told = await self._tell(tx, task, agent.agent_id, CLAIMED_NOTE + task.title, now)
        await self._publish(told)
        return TaskAnswer(preview=False, task=task.view())

    async def _claim_in_one_step(self, request: TaskClaim, hashed: str, now: datetime) -> TaskAnswer | None:
        step = ClaimStep(
            token_hash=hashed,
            now=now,
            only_role=request.role,
            only_repo=request.repo,
            only_cap=request.cap,
            max_attempts=self.limits.max_attempts,
            fail_reason=lost_reason(self.limits.max_attempts),
            message_id=uuid.uuid4().hex,
        )
        claimed = await self.store.claim_in_one_step(step)
        if claimed is None:
            return None
        task = claimed.task
        if task is None:
            return TaskAnswer(preview=False, task=None)
        if claimed.told_seq is not None:
            message = MessageRecord(
                message_id=step.message_id,
                sender=claimed.agent_id,
                body=CLAIMED_NOTE + task.title,
                thread_id=f"task:{task.task_id}",
                sent_at=now,
            )
            await self._publish({task.poster: InboxEntry(seq=claimed.told_seq, message=message)})
        return TaskAnswer(preview=False, task=task.view())

    async def finish(
        self, task_id: str, request: TaskDone | TaskFail | TaskRelease, *, token: str | None
    ) -> TaskAnswer:
        now = self.mesh.now()
        state, kind, result, reason = _outcome(request)
        told: dict[str, InboxEntry] = {}
        async with self.store.transaction() as tx:
            agent = await self.mesh.caller(tx, token, now)
            current = await tx.get_task(task_id, for_update=True)
            if current is None:
                raise TaskNotFound(task_id)
            live = current.holder is not None and bool(await tx.live_agent_ids([current.holder], now))
            if (
                current.state != "claimed"
                or current.holder != agent.agent_id
                or current.fence != request.token
                or not live
            ):
                raise StaleClaim(task_id, request.token, current)
            if not request.confirm:
                return TaskAnswer(preview=True, task=replace(current, state=state).view())
            done = await tx.finish_task(
                task_id, agent.agent_id, request.token, now, state=state, result=result, reason=reason
            )
            assert done is not None  # the row is locked and was checked above
            await tx.add_task_event(task_id, now, kind, agent.agent_id, reason)
            if kind != "released":
                told = await self._tell(
                    tx, done, agent.agent_id, f"{kind} your task {done.title!r}: {result or reason or ''}".strip(), now
                )
        await self._publish(told)
        return TaskAnswer(preview=False, task=done.view())

    async def get(self, task_id: str) -> TaskDetail:
        now = self.mesh.now()
        async with self.store.standalone() as tx:
            task = await tx.get_task(task_id)
            if task is None:
                raise TaskNotFound(task_id)
            history = await tx.task_history(task_id)
            live = await tx.live_agent_ids([task.holder] if task.holder else [], now)
        shown = self._shown(task, live)
        return TaskDetail.model_validate({**shown.model_dump(), "history": history})

    async def list(self, *, state: str | None = None, role: str | None = None) -> TaskList:
        now = self.mesh.now()
        async with self.store.standalone() as tx:
            # The state asked for is the state shown (a lapsed holder's task reads as open): filtered after.
            found = await tx.list_tasks(state=None, role=role, limit=self.limits.list_limit)
            live = await tx.live_agent_ids(sorted({t.holder for t in found if t.holder}), now)
        shown = [self._shown(t, live) for t in found]
        return TaskList(tasks=[t for t in shown if state is None or t.state == state])

    def _shown(self, task: TaskRecord, live: set[str]) -> TaskView:
        """A claimed task whose holder's lease lapsed shows as it will be at its next claim."""
        if task.state != "claimed" or (task.holder is not None and task.holder in live):
            return task.view()
        if task.attempts >= self.limits.max_attempts:
            return replace(task, state="failed", reason=lost_reason(self.limits.max_attempts)).view()
        return replace(task, state="open").view()


def _claimant(agent: AgentRecord, request: TaskClaim) -> Claimant:
    return Claimant(
        agent_id=agent.agent_id,
        role=agent.role,
        repo=agent.repo,
        caps=agent.caps,
        only_role=request.role,
        only_repo=request.repo,
        only_cap=request.cap,
    )


def _outcome(request: TaskDone | TaskFail | TaskRelease) -> tuple[str, str, str | None, str | None]:
    """(state, history kind, result, reason) a finishing call leaves."""
    if isinstance(request, TaskDone):
        return "done", "done", request.result, None
    if isinstance(request, TaskFail):
        return "failed", "failed", None, request.reason
    return "open", "released", None, None


__all__ = [
    "CLAIMED_NOTE",
    "TOKEN_NOTE",
    "ClaimStep",
    "Claimant",
    "ClaimedInOneStep",
    "StaleClaim",
    "TaskAnswer",
    "TaskClaim",
    "TaskDetail",
    "TaskDone",
    "TaskEvent",
    "TaskFail",
    "TaskLimits",
    "TaskList",
    "TaskNotFound",
    "TaskPost",
    "TaskRecord",
    "TaskRelease",
    "TaskStore",
    "TaskTx",
    "TaskView",
    "Tasks",
]
