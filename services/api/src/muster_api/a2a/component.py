"""Start-up and shut-down of the a2a capability inside the service.

At start-up the config file's ``agents`` block is loaded (a broken file refuses to start), every agent is resolved
(a failing agent is reported, never fatal), and calls still in flight that nobody holds are claimed and resumed by
GetTask. Calls run in this component's task group, not in the request's task: a client that disconnects does not
cancel the remote work, and a shutdown leaves the call in flight (stored, released) for the next start to resume.

Several instances on one database: each call is held by the instance following it (owner + lease, renewed every
``renew_every`` seconds); every ``scan_every`` seconds an instance claims the calls whose holder is gone (lease
lapsed) and follows them (the lease and both periods: ``Settings.a2a``). An instance that finds its lease renewed
by nobody — taken over — stops following.

Reload: a superseded agent set is closed as soon as no call runs on it any more (calls hold the set they run on).

Health: an agent that failed to resolve is retried (the config reloaded) with a doubling backoff until every agent
resolves; an agent whose last ``DEGRADED_AFTER`` calls failed (transport or protocol, not a task the agent itself
failed) shows ``degraded`` with the last error, and ``ok`` again after a call succeeds.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from fastapi import FastAPI

from muster_a2a import (
    AgentConfigError,
    AgentSet,
    AgentStatus,
    CallRecord,
    CallTakenOverError,
    CallTracker,
    Tool,
    ToolResult,
    load_agents,
)
from muster_api.a2a.store import SqlCallStore
from muster_api.configfile import load_agents_block
from muster_api.errors import ConfigurationError, NotReadyError
from muster_api.runtime import Runtime

log = logging.getLogger("muster.a2a")

# Consecutive failed calls before an agent shows degraded: one failure can be the task's fault, several are not.
DEGRADED_AFTER = 3
# Backoff of the retries of agents that did not resolve: 1, 2, 4 … up to 60 s between attempts.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
MAX_ERROR_CHARS = 500

Job = Callable[[], Awaitable[CallRecord]]


@dataclass
class Health:
    """Calls of one agent as seen from this instance: consecutive failures and the last one's text."""

    failures: int = 0
    last_error: str | None = None

    def observe(self, result: ToolResult) -> None:
        # State "error" is the call failing (unreachable, a protocol error); "failed" is the agent's own answer.
        if result.is_error and result.metadata.get("state") == "error":
            self.failures += 1
            self.last_error = result.text[:MAX_ERROR_CHARS]
        else:
            self.failures, self.last_error = 0, None


class A2AState:
    """What ``app.state.a2a`` holds: the current agents, the call tracker, the task group calls run in."""

    def __init__(
        self,
        runtime: Runtime,
        config: Path,
        *,
        lease: timedelta | None = None,
        renew_every: float | None = None,
        scan_every: float | None = None,
    ) -> None:
        self.runtime = runtime
        self.config = config
        self.owner = uuid.uuid4().hex
        self.store = SqlCallStore(runtime.engine, runtime.dialect)
        periods = runtime.settings.a2a
        self.tracker = CallTracker(self.store, runtime.now, owner=self.owner, lease=lease or periods.lease)
        self.renew_every = renew_every or periods.renew_every
        self.scan_every = scan_every or periods.scan_every
        self.agents = AgentSet([])
        self.group: TaskGroup | None = None
        # Superseded agent sets that calls still run on; each is closed when its last call ends.
        self.retired: list[AgentSet] = []
        self._users: dict[AgentSet, int] = {}
        self._reload_lock = anyio.Lock()
        # The calls this instance follows (it holds their lease), with the scope that stops one if taken over.
        self._following: dict[str, anyio.CancelScope] = {}
        # Calls held (and renewed) but not followed: their agent is unavailable; the next reload tries them again.
        # Held rather than released, so that a scan does not claim them again and again ahead of the others.
        self._parked: dict[str, CallRecord] = {}
        self.health: dict[str, Health] = {}
        self.retry_first = RETRY_FIRST_SECONDS
        self.retry_max = RETRY_MAX_SECONDS

    def statuses(self) -> list[AgentStatus]:
        """Each agent's status, ``degraded`` where its recent calls failed."""
        out = []
        for name in sorted(self.agents.status):
            status = self.agents.status[name]
            health = self.health.get(name)
            if status.status == "ok" and health is not None and health.failures >= DEGRADED_AFTER:
                status = status.model_copy(update={"status": "degraded", "error": health.last_error})
            out.append(status)
        return out

    def _observe(self, record: CallRecord) -> None:
        if record.result is not None:
            self.health.setdefault(record.agent, Health()).observe(record.result)

    async def recover_forever(self) -> None:
        """Reload while an agent is unresolved, waiting twice as long after each attempt that leaves one so."""
        delay = self.retry_first
        while True:
            await anyio.sleep(delay)
            failing = [name for name, status in self.agents.status.items() if status.status == "error"]
            if not failing:
                delay = self.retry_first
                continue
            try:
                await self.reload()
            except Exception as exc:  # a broken config file meanwhile: keep the agents there are, try again later
                log.warning("A2A retry of %s failed: %s", ", ".join(failing), type(exc).__name__)
            still = any(status.status == "error" for status in self.agents.status.values())
            delay = min(delay * 2, self.retry_max) if still else self.retry_first

    @property
    def following(self) -> set[str]:
        return set(self._following)

    @property
    def parked(self) -> set[str]:
        return set(self._parked)

    # -- agent sets -------------------------------------------------------------------------------------------------

    async def reload(self) -> AgentSet:
        """Load the config file again; the previous agents stay usable for calls already running on them."""
        async with self._reload_lock:
            descriptors = await load_agents_block(self.config)
            agents = await load_agents(descriptors)
            agents.skipped.update(descriptors.skipped)
            previous, self.agents = self.agents, agents
            await self._retire(previous)
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
            self._unpark()
            await self.resume_in_flight()
        return agents

    def _hold(self) -> AgentSet:
        """The current agent set, held until ``_let_go``: a reload does not close it under a running call.
        Synchronous, so that no reload slips between looking the set up and holding it."""
        agents = self.agents
        self._users[agents] = self._users.get(agents, 0) + 1
        return agents

    def _unhold(self, agents: AgentSet) -> bool:
        """One call fewer on ``agents``; true when that was the last one."""
        left = self._users[agents] - 1
        if left:
            self._users[agents] = left
            return False
        del self._users[agents]
        return True

    async def _let_go(self, agents: AgentSet) -> None:
        if self._unhold(agents) and agents in self.retired:
            self.retired.remove(agents)
            with anyio.CancelScope(shield=True):
                await agents.aclose()

    async def _retire(self, agents: AgentSet) -> None:
        if agents in self._users:
            self.retired.append(agents)
        else:
            await agents.aclose()

    # -- following calls --------------------------------------------------------------------------------------------

    def _tasks(self) -> TaskGroup:
        if self.group is None:
            raise RuntimeError("the a2a component is not running")
        return self.group

    def _spawn(self, call_id: str, agents: AgentSet, job: Job) -> tuple[anyio.Event, dict[str, Any]]:
        """Follow a call this instance holds, in the task group; the box gets its outcome once the event is set.
        The agent set (held by the caller) is let go when the call ends."""
        scope = anyio.CancelScope()
        self._following[call_id] = scope
        done = anyio.Event()
        box: dict[str, Any] = {}

        async def runner() -> None:
            try:
                with scope:
                    box["value"] = await job()
                    self._observe(box["value"])
                if scope.cancelled_caught:
                    box["error"] = CallTakenOverError(call_id)
                    log.warning("A2A call %s taken over by another instance; no longer followed here", call_id)
            except Exception as exc:
                log.exception("A2A call %s failed", call_id)
                box["error"] = exc
            finally:
                self._following.pop(call_id, None)
                done.set()
                await self._let_go(agents)

        try:
            self._tasks().start_soon(runner)
        except BaseException:
            self._following.pop(call_id, None)
            raise
        return done, box

    async def call(
        self,
        tool_name: str,
        task: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        continues: str | None = None,
    ) -> CallRecord:
        """Record the call, follow it and wait for its result (the following survives the caller's cancellation).
        ``task_id``/``context_id`` continue that remote task (an input-required one) instead of starting one;
        ``continues`` names the stored input-required call that ``task`` answers (its task, and its record learns
        how the task went on)."""
        agents = self._hold()
        try:
            tool = agents.tool(tool_name)
            earlier = await self._answered(continues, tool)
            record = await self.tracker.begin(tool, task)
            done, box = self._spawn(record.id, agents, self._job(record, tool, earlier, task_id, context_id))
        except BaseException:
            await self._let_go(agents)
            raise
        await done.wait()
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            # The component was cancelled (shutdown) while the call ran: the stored call stays in flight.
            raise NotReadyError("the service is shutting down; the call stays stored and resumes at the next start")
        value: CallRecord = box["value"]
        return value

    async def start(
        self,
        tool_name: str,
        task: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        continues: str | None = None,
    ) -> CallRecord:
        """Record the call and follow it in the background; returns at once."""
        agents = self._hold()
        try:
            tool = agents.tool(tool_name)
            earlier = await self._answered(continues, tool)
            record = await self.tracker.begin(tool, task)
            running = record.model_copy(deep=True)
            self._spawn(record.id, agents, self._job(running, tool, earlier, task_id, context_id))
        except BaseException:
            await self._let_go(agents)
            raise
        return record

    async def _answered(self, continues: str | None, tool: Tool) -> CallRecord | None:
        """The stored call that a new call answers, checked to take an answer through ``tool``."""
        if continues is None:
            return None
        earlier = await self.tracker.get(continues)
        self.tracker.check_continuable(earlier, tool)
        return earlier

    def _job(
        self, record: CallRecord, tool: Tool, earlier: CallRecord | None, task_id: str | None, context_id: str | None
    ) -> Job:
        if earlier is not None:
            return lambda: self.tracker.answer(record, tool, earlier)
        return lambda: self.tracker.run(record, tool, task_id=task_id, context_id=context_id)

    async def _resume(self, record: CallRecord, agents: AgentSet) -> CallRecord:
        done = await self.tracker.resume(record, agents.agent(record.agent))
        if done.in_flight:
            log.warning("A2A call %s waits (held) for agent %s, unavailable until a reload", record.id, record.agent)
            self._parked[record.id] = done
        else:
            log.info("A2A call %s resumed: %s", record.id, done.state)
        return done

    async def resume_in_flight(self) -> int:
        """Claim the stored calls in flight that nobody holds (lease lapsed, or released) and follow them."""
        records = await self.tracker.claim()
        started = 0
        for record in records:
            if record.id in self._following or record.id in self._parked:
                continue  # ours already: our lease had lapsed, and the claim renewed it
            self._follow_held(record)
            started += 1
        return started

    def _follow_held(self, record: CallRecord) -> None:
        agents = self._hold()
        try:
            self._spawn(record.id, agents, functools.partial(self._resume, record, agents))
        except BaseException:
            self._unhold(agents)  # never started; the set is the current one, nothing to close
            raise

    def _unpark(self) -> None:
        """Try the parked calls again, with the agents just loaded."""
        parked, self._parked = self._parked, {}
        for record in parked.values():
            self._follow_held(record)

    async def renew(self) -> None:
        """Extend the lease of every call followed here; stop following those another instance took over."""
        kept = await self.tracker.renew([*self._parked, *self._following])
        for call_id in [c for c in self._parked if c not in kept]:
            self._parked.pop(call_id, None)  # taken over or finished elsewhere
        held = list(self._following)
        for call_id in held:
            if call_id in kept or call_id not in self._following:
                continue
            record = await self.store.get(call_id)
            # Finished (and released) between the two looks: nothing to stop.
            if record is not None and record.in_flight and record.owner != self.owner:
                scope = self._following.get(call_id)
                if scope is not None:
                    scope.cancel()

    async def _every(self, seconds: float, step: Callable[[], Awaitable[object]], what: str) -> None:
        while True:
            await anyio.sleep(seconds)
            try:
                await step()
            except Exception:
                log.exception("A2A %s failed; retrying in %.0f s", what, seconds)

    async def hand_over(self) -> None:
        """At shutdown: release the calls still held, so that another instance (or the next start) resumes them at
        once instead of waiting for the lease to lapse."""
        with anyio.CancelScope(shield=True):
            try:
                await self.tracker.release()
            except Exception:
                log.exception("A2A calls not released at shutdown; they resume once their lease lapses")

    async def aclose(self) -> None:
        for agents in [*self.retired, self.agents]:
            await agents.aclose()
        self.retired.clear()


@asynccontextmanager
async def lifespan(app: FastAPI, runtime: Runtime) -> AsyncIterator[None]:
    state = A2AState(runtime, runtime.settings.config)
    try:
        # Loaded before the task group opens, so that a broken file surfaces as a plain ConfigurationError.
        try:
            await state.reload()
        except AgentConfigError as exc:
            raise ConfigurationError(str(exc)) from None
        try:
            async with anyio.create_task_group() as group:
                state.group = group
                resumed = await state.resume_in_flight()
                if resumed:
                    log.info("resuming %d A2A call(s) left in flight", resumed)
                group.start_soon(state._every, state.renew_every, state.renew, "lease renewal")
                group.start_soon(state._every, state.scan_every, state.resume_in_flight, "scan for calls to take over")
                group.start_soon(state.recover_forever)
                app.state.a2a = state
                try:
                    yield
                finally:
                    group.cancel_scope.cancel()
        finally:
            state.group = None
            await state.hand_over()
    finally:
        await state.aclose()
