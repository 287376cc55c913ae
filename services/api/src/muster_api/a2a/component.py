"""Start-up and shut-down of the a2a capability inside the service.

At start-up the config file's ``agents`` block is loaded (a broken file refuses to start), every agent is resolved
(a failing agent is reported, never fatal), and calls still in flight from a previous run are resumed by GetTask.
Calls run in this component's task group, not in the request's task: a client that disconnects does not cancel the
remote work, and a shutdown leaves the call in flight (stored) for the next start to resume.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from fastapi import FastAPI

from muster_a2a import AgentConfigError, AgentSet, CallRecord, CallTracker, Tool, load_agents
from muster_api.a2a.config import load_agents_block
from muster_api.a2a.store import SqlCallStore
from muster_api.errors import ConfigurationError, NotReadyError
from muster_api.runtime import Runtime

log = logging.getLogger("muster.a2a")

T = TypeVar("T")


class A2AState:
    """What ``app.state.a2a`` holds: the current agents, the call tracker, the task group calls run in."""

    def __init__(self, runtime: Runtime, config: Path) -> None:
        self.runtime = runtime
        self.config = config
        self.store = SqlCallStore(runtime.engine)
        self.tracker = CallTracker(self.store, runtime.now)
        self.agents = AgentSet([])
        self.group: TaskGroup | None = None
        self._retired: list[AgentSet] = []
        self._reload_lock = anyio.Lock()
        # Calls this process is following (running or resuming), so that a reload does not follow them twice.
        self._following: set[str] = set()

    async def reload(self) -> AgentSet:
        """Load the config file again; the previous agents stay usable for calls already running on them."""
        async with self._reload_lock:
            descriptors = await load_agents_block(self.config)
            agents = await load_agents(descriptors)
            agents.skipped.update(descriptors.skipped)
            self._retired.append(self.agents)
            self.agents = agents
            for name, status in agents.status.items():
                if status.status == "error":
                    log.warning("A2A agent %s unavailable: %s", name, status.error)
            for collision in agents.collisions:
                log.warning(
                    "A2A tool name %s of agent %s taken by %s; registered as %s",
                    collision.name,
                    collision.agent,
                    collision.kept_by,
                    collision.renamed_to,
                )
        if self.group is not None:
            # An agent that was unavailable may be back: pick up the calls left in flight for it.
            await self.resume_in_flight()
        return agents

    async def _in_group(self, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` in the component's task group and wait for it (shielded from the caller's cancellation)."""
        done = anyio.Event()
        box: dict[str, Any] = {}

        async def runner() -> None:
            try:
                box["value"] = await job()
            except Exception as exc:
                box["error"] = exc
            finally:
                done.set()

        self._tasks().start_soon(runner)
        await done.wait()
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            # The component was cancelled (shutdown) while the job ran: the stored call stays in flight.
            raise NotReadyError("the service is shutting down; the call stays stored and resumes at the next start")
        value: T = box["value"]
        return value

    def _tasks(self) -> TaskGroup:
        if self.group is None:
            raise RuntimeError("the a2a component is not running")
        return self.group

    async def _run(self, record: CallRecord, tool: Tool) -> CallRecord:
        self._following.add(record.id)
        try:
            return await self.tracker.run(record, tool)
        finally:
            self._following.discard(record.id)

    async def call(self, tool: Tool, task: str) -> CallRecord:
        record = await self.tracker.begin(tool, task)
        return await self._in_group(lambda: self._run(record, tool))

    async def start(self, tool: Tool, task: str) -> CallRecord:
        """Record the call and follow it in the background; returns at once."""
        record = await self.tracker.begin(tool, task)
        self._following.add(record.id)
        self._tasks().start_soon(self._background, record.model_copy(deep=True), tool)
        return record

    async def _background(self, record: CallRecord, tool: Tool) -> None:
        try:
            await self._run(record, tool)
        except Exception:
            log.exception("A2A call %s failed in the background", record.id)

    async def _resume(self, record: CallRecord) -> None:
        try:
            done = await self.tracker.resume(record, self.agents.agent(record.agent))
            if done.in_flight:
                log.warning("A2A call %s left in flight: agent %s is unavailable", record.id, record.agent)
            else:
                log.info("A2A call %s resumed: %s", record.id, done.state)
        except Exception:
            log.exception("A2A call %s could not be resumed", record.id)
        finally:
            self._following.discard(record.id)

    async def resume_in_flight(self) -> int:
        """Follow every stored call still in flight that this process is not following already."""
        records = [r for r in await self.store.in_flight() if r.id not in self._following]
        for record in records:
            self._following.add(record.id)
            self._tasks().start_soon(self._resume, record)
        return len(records)

    async def aclose(self) -> None:
        for agents in [*self._retired, self.agents]:
            await agents.aclose()


@asynccontextmanager
async def lifespan(app: FastAPI, runtime: Runtime) -> AsyncIterator[None]:
    state = A2AState(runtime, runtime.settings.config)
    try:
        # Loaded before the task group opens, so that a broken file surfaces as a plain ConfigurationError.
        try:
            await state.reload()
        except AgentConfigError as exc:
            raise ConfigurationError(str(exc)) from None
        async with anyio.create_task_group() as group:
            state.group = group
            resumed = await state.resume_in_flight()
            if resumed:
                log.info("resuming %d A2A call(s) left in flight", resumed)
            app.state.a2a = state
            try:
                yield
            finally:
                group.cancel_scope.cancel()
    finally:
        await state.aclose()
