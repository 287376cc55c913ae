"""Serving a role's tasks (``serve_tasks = {role, repo?, max_parallel}``): the agent, kept on the mesh in that role
(``sleepers.Sleeper``), claims the tasks addressed to it through the mesh's atomic claim, runs each as a dispatch run
whose prompt is the task's title and body, and finishes the task with the run's outcome under the claim's fencing
token: ``done`` with the run's final text, ``fail`` with its error code. Every instance serves (at most
``max_parallel`` runs at once each); the claim gives a task to one of them. A run that hit a quota stops this
instance's claims until the reset time it reported. A pool of a fallback agent serves through its candidates: a
candidate in quota hands the task to the next one, and the next tasks start there until its reset (resting.py); only
when every candidate is in quota does the run fail with ``quota`` and the pool stop claiming.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

import anyio

from muster_api.dispatch.config import AgentDefinition
from muster_api.dispatch.models import Run, RunIn
from muster_api.dispatch.runs import DispatchState, create_run
from muster_mesh.tasks import MAX_RESULT_CHARS, TaskClaim, TaskDone, TaskFail, Tasks, TaskView


class PoolState(DispatchState, Protocol):
    @property
    def now(self) -> Callable[[], datetime]: ...


log = logging.getLogger("muster.dispatch.pools")

IDLE_SECONDS = 1.0  # an idle pool looks for tasks this often
QUOTA_PAUSE = timedelta(minutes=1)  # when a quota names no reset time


def prompt_of(task: TaskView) -> str:
    return f"{task.title}\n\n{task.body}"


def _reset_of(run: Run, now: datetime) -> datetime:
    details: Any = (run.error or {}).get("details") or {}
    reset = details.get("reset_at") if isinstance(details, dict) else None
    if isinstance(reset, str):
        try:
            return datetime.fromisoformat(reset)
        except ValueError:
            pass
    return now + QUOTA_PAUSE


class Pool:
    def __init__(
        self,
        state: PoolState,
        definition: AgentDefinition,
        agent_id: str,
        token: Callable[[], Awaitable[str | None]],
        tasks: Tasks,
    ) -> None:
        """``token``: the agent's session token, kept by its sleeper (``sleepers.Sleeper``)."""
        serve = definition.serves
        assert serve is not None
        self.state = state
        self.definition = definition
        self.agent_id = agent_id
        self.token = token
        self.tasks = tasks
        self.serve = serve
        self.quota_until: datetime | None = None

    async def run(self) -> None:
        slots = anyio.Semaphore(self.serve.max_parallel)
        async with anyio.create_task_group() as group:
            while True:
                await slots.acquire()
                await self._out_of_quota()  # after the slot: the run that freed it may have hit a quota
                try:
                    task = await self._claim()
                except Exception:
                    log.exception("%s: claiming a task failed", self.agent_id)
                    task = None
                if task is None:
                    slots.release()
                    await anyio.sleep(IDLE_SECONDS)
                    continue
                group.start_soon(self._serve_one, task, slots)

    async def _out_of_quota(self) -> None:
        if self.quota_until is None:
            return
        wait = (self.quota_until - self.state.now()).total_seconds()
        if wait > 0:
            log.info("%s: in quota until %s, claiming no task", self.agent_id, self.quota_until)
            await anyio.sleep(wait)
        self.quota_until = None

    async def _claim(self) -> TaskView | None:
        token = await self.token()
        if token is None:
            return None
        answer = await self.tasks.claim(
            TaskClaim(role=self.serve.role, repo=self.serve.repo, confirm=True), token=token
        )
        return answer.task

    async def _serve_one(self, task: TaskView, slots: anyio.Semaphore) -> None:
        try:
            run = await self._run(task)
            await self._finish(task, run)
        except Exception:  # the task goes back to open when the agent's lease ends, or stays held until then
            log.exception("%s: serving task %s failed", self.agent_id, task.id)
        finally:
            slots.release()

    async def _run(self, task: TaskView) -> Run:
        name = self.definition.name
        body = RunIn(agent=name, prompt=prompt_of(task), workspace=f"{name}-task-{task.id}")
        run = await create_run(self.state, body)
        while not run.finished:
            await anyio.sleep(0.2)
            found = await self.state.store.get(run.id)
            assert found is not None
            run = found
        return run

    async def _finish(self, task: TaskView, run: Run) -> None:
        token = await self.token()
        request: TaskDone | TaskFail
        if run.status == "completed":
            request = TaskDone(token=task.token, result=(run.text or "")[:MAX_RESULT_CHARS], confirm=True)
        else:
            code = str((run.error or {}).get("code") or run.status)
            request = TaskFail(token=task.token, reason=f"run {run.id} {run.status}: {code}", confirm=True)
            if code == "quota":
                self.quota_until = _reset_of(run, self.state.now())
        await self.tasks.finish(task.id, request, token=token)
