"""``dispatch``: run one turn of an agent and stream its normalized events, then its TurnResult.

The Dispatch starts on first use (iteration, ``result()``, ``steer()`` or ``cancel()``) inside the running event loop.
Events are journaled and queued as they are decoded; ``result()`` waits for the end of the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from muster_dispatch.agents import CliAgent, CustomAgent, CustomContext, DispatchAgent, FallbackAgent
from muster_dispatch.bootstrap import ensure_cli, ready_cli, unpack_environment
from muster_dispatch.egress import Endpoint
from muster_dispatch.errors import DispatchError, ReplayDivergence
from muster_dispatch.event_stream import EventStream
from muster_dispatch.events import AgentEvent
from muster_dispatch.fallback import attempt_of, run_fallback
from muster_dispatch.harness import Command, Harness, McpServer
from muster_dispatch.host_login import CopiedLogin, copy_login, write_back
from muster_dispatch.inputs import AgentInput, Continuation
from muster_dispatch.journal import JournalSink
from muster_dispatch.live import live_input
from muster_dispatch.process_run import ProcessRun
from muster_dispatch.provider import LocalProvider, Sandbox
from muster_dispatch.replay import RecordedTurn, ReplayAgent, replay_turn
from muster_dispatch.results import TurnResult
from muster_dispatch.sandbox import SandboxProvider
from muster_dispatch.sessions import (
    capture_conversation,
    conversation_usage,
    fork_conversation,
    prompt_recorded,
    restore_conversation,
)
from muster_dispatch.turn import NO_SIGNALS, Signals, Stopped, TurnState
from muster_dispatch.usage import Usage

StopReason = Literal["timeout", "aborted", "steering"]
T = TypeVar("T")


def dispatch(
    agent: DispatchAgent,
    input: AgentInput,
    *,
    workspace: Path | str,
    provider: SandboxProvider | None = None,
    deadline: float | None = None,
    journal: JournalSink | None = None,
) -> Dispatch:
    """Dispatch one turn. ``deadline``: seconds from the start for the whole turn (fallback attempts included)."""
    if not isinstance(input, AgentInput):
        raise DispatchError("prompt", "input must be an AgentInput", {"field": "input"})
    if deadline is not None and not deadline > 0:
        raise DispatchError("configuration", "deadline must be a positive number of seconds", {"field": "deadline"})
    if getattr(agent, "kind", None) not in ("cli", "custom", "replay", "fallback"):
        raise DispatchError(
            "configuration", "agent must come from cli_agent, custom_agent, replay_agent or fallback_agent"
        )
    return Dispatch(agent, input, workspace=Path(workspace), provider=provider, deadline=deadline, journal=journal)


class Dispatch:
    def __init__(
        self,
        agent: DispatchAgent,
        input: AgentInput,
        *,
        workspace: Path,
        provider: SandboxProvider | None,
        deadline: float | None,
        journal: JournalSink | None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.agent = agent
        self.input = input
        self.workspace = workspace
        self.deadline = deadline
        self.journal = journal
        self._provider: SandboxProvider | None = provider
        self._queue: EventStream | None = None
        self._task: asyncio.Task[TurnResult] | None = None
        self._deadline_at: float | None = None
        self._stop: asyncio.Event | None = None
        self._stop_reason: StopReason | None = None
        self._canceled = False
        self._steering: list[str] = []
        self._process: ProcessRun | None = None  # the CLI process running now, if any
        self._interrupt: Callable[[StopReason], None] | None = None  # interrupt a running _guard
        self._running: DispatchAgent = agent  # the candidate running now (a fallback's current one)
        self._replay_turn: RecordedTurn | None = None
        self._replay_steered = 0
        self._login: CopiedLogin | None = None  # the host login copied for the CLI turn running now
        self._endpoints: tuple[Endpoint, ...] = ()  # the model endpoints of the CLI agent running now
        self._read_only: tuple[str, ...] = ()  # what its MCP servers run from

    # ------------------------------------------------------------------ public surface

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self

    async def __anext__(self) -> AgentEvent:
        self._start()
        assert self._queue is not None
        event = await self._queue.get()
        if event is None:
            self._queue.put(None)  # every later __anext__ ends too
            raise StopAsyncIteration
        return event

    def start(self) -> None:
        """Start the turn now, without waiting for it (``result()`` and iterating start it too)."""
        self._start()

    @property
    def over(self) -> bool:
        """Whether the turn has ended: its result is ready."""
        return self._task is not None and self._task.done()

    async def result(self) -> TurnResult:
        """The TurnResult; raises ``ReplayDivergence`` when a replay diverges under ``"fail"`` or is exhausted."""
        task = self._start()
        return await asyncio.shield(task)

    async def steer(self, text: str) -> None:
        """Add a user message: through stdin with live input, else stop the turn and resume the conversation."""
        if not isinstance(text, str) or not text.strip():
            raise DispatchError("steering", "steering text must be non-empty", {"field": "text"})
        task = self._start()
        running = self._current_agent()
        if isinstance(running, ReplayAgent):
            # A replay runs nothing: steering is only checked against the recording (even once replayed).
            if self._replay_turn is None and not task.done():
                await asyncio.sleep(0)  # let the replay take its recorded turn first
            self._record("turn.steer", {"text": text}, source="replay")
            self._replay_steer(running, text)
            return
        if task.done():
            raise DispatchError("steering", "the turn is over")
        process = self._process
        if process is not None and process.live is not None:
            self._record("turn.steer", {"text": text})
            await process.steer(text)
            return
        if isinstance(running, CustomAgent):
            raise DispatchError("steering", f"custom agent {running.name} does not accept steering")
        if not getattr(running, "resumable", False):
            raise DispatchError("steering", f"{running.name} cannot resume a conversation: steering needs it")
        self._record("turn.steer", {"text": text})
        self._steering.append(text)
        self._request_stop("steering")

    def _replay_steer(self, agent: ReplayAgent, text: str) -> None:
        """Steering during a replay must be the recorded steering, in order."""
        recorded = self._replay_turn.steering if self._replay_turn is not None else []
        index = self._replay_steered
        self._replay_steered += 1
        expected = recorded[index] if index < len(recorded) else None
        if expected == text:
            return
        details = {"reason": "unrecorded" if expected is None else "steering", "expected": expected, "actual": text}
        if agent.divergence == "fail":
            raise ReplayDivergence("the steering differs from the recorded turn", details)
        self._emit(
            AgentEvent(
                "warning", text="replay: the steering differs from the recorded turn", code="steering", data=details
            ),
            agent,
            "replay",
        )

    async def cancel(self) -> None:
        """Stop the turn (process group killed); the result is ``canceled`` with code ``aborted``."""
        task = self._start()
        if task.done():
            return
        self._canceled = True
        self._request_stop("aborted")
        with contextlib.suppress(Exception):
            await asyncio.shield(task)

    # ------------------------------------------------------------------ machinery

    def _start(self) -> asyncio.Task[TurnResult]:
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._queue = EventStream()
            self._stop = asyncio.Event()
            self._deadline_at = loop.time() + self.deadline if self.deadline is not None else None
            self._task = loop.create_task(self._main())
        return self._task

    def _current_agent(self) -> DispatchAgent:
        return self._running

    def _request_stop(self, reason: StopReason) -> None:
        effective: StopReason = "aborted" if self._stop_reason == "aborted" else reason  # a cancel wins
        self._stop_reason = effective
        assert self._stop is not None
        self._stop.set()
        if self._interrupt is not None:
            self._interrupt(effective)

    def _record(
        self, etype: str, payload: dict[str, Any], *, agent: str | None = None, source: str = "harness"
    ) -> None:
        if self.journal is not None:
            scope = {"dispatch": self.id, "agent": agent or self.agent.name}
            self.journal.record(source, scope, {"type": etype, **payload})

    def _emit(self, event: AgentEvent, agent: DispatchAgent, source: str) -> None:
        if self.journal is not None:
            self.journal.record(source, {"dispatch": self.id, "agent": agent.name}, event.to_dict())
        assert self._queue is not None
        self._queue.put(event)

    async def _main(self) -> TurnResult:
        owned_root: Path | None = None
        try:
            if self._provider is None:
                owned_root = Path(tempfile.mkdtemp(prefix="muster-dispatch-"))
                self._provider = LocalProvider(owned_root)
            continuation = self.input.continuation
            self._record(
                "turn.input",
                {
                    "agent": self.agent.name,
                    "prompt": self.input.prompt,
                    "continuation": {"conversation": continuation.conversation, "fork": continuation.fork}
                    if continuation
                    else None,
                    "live_input": self.input.live_input,
                },
                source="replay" if self.agent.kind == "replay" else "harness",
            )
            if isinstance(self.agent, FallbackAgent):
                result = await self._run_fallback(self.agent)
            else:
                result = await self._run_agent(self.agent, self.input)
                attempt = attempt_of(self.agent, result)
                result = replace(
                    result, attempts=result.attempts or [attempt], selected=result.selected or self.agent.name
                )
            if self.journal is not None:  # the result's dict is built only to be journaled
                self._record(
                    "turn.result",
                    {"result": result.to_dict()},
                    source="replay" if self.agent.kind == "replay" else "harness",
                )
            return result
        finally:
            if owned_root is not None:
                shutil.rmtree(owned_root, ignore_errors=True)
            assert self._queue is not None
            self._queue.put(None)

    def _time_left(self) -> float | None:
        if self._deadline_at is None:
            return None
        return max(self._deadline_at - asyncio.get_running_loop().time(), 0.0)

    async def _run_agent(self, agent: DispatchAgent, input: AgentInput) -> TurnResult:
        self._running = agent
        if self._canceled:
            return _failed(DispatchError("aborted", "the turn was canceled"))
        if isinstance(agent, CliAgent):
            return await self._run_cli(agent, input)
        if isinstance(agent, CustomAgent):
            return await self._run_custom(agent, input)
        if isinstance(agent, ReplayAgent):
            return await self._run_replay(agent, input)
        return _failed(DispatchError("configuration", "a fallback agent cannot be a candidate"))

    # ------------------------------------------------------------------ fallback

    async def _run_fallback(self, agent: FallbackAgent) -> TurnResult:
        return await run_fallback(
            agent, self.input, self._run_agent, lambda event, by: self._emit(event, by, "harness")
        )

    async def _run_replay(self, agent: ReplayAgent, input: AgentInput) -> TurnResult:
        turn = agent.next_turn()
        if turn is None:
            raise ReplayDivergence("the replay journal is exhausted", {"reason": "exhausted"})
        self._replay_turn = turn
        for event in replay_turn(agent, turn, input):
            self._emit(event, agent, "replay")
            await asyncio.sleep(0)  # a replay streams like a run: consumers see events one by one
        assert turn.result is not None
        return turn.result

    # ------------------------------------------------------------------ custom

    async def _run_custom(self, agent: CustomAgent, input: AgentInput) -> TurnResult:
        state = TurnState(NO_SIGNALS)
        context = CustomContext(self.workspace, self._time_left())

        async def consume() -> None:
            item: object
            async for item in agent.fn(input, context):
                event = item if isinstance(item, AgentEvent) else AgentEvent("raw", data=repr(item))
                state.observe(event)
                self._emit(event, agent, "agent")

        try:
            stopped, _ = await self._guard(consume())
        except DispatchError as error:
            return replace(state.conclude(exit_code=None), status="failed", error=error)
        except Exception as error:  # the agent's own code: any failure ends its turn as failed
            return replace(
                state.conclude(exit_code=None),
                status="failed",
                error=DispatchError("process", f"custom agent raised {type(error).__name__}: {error}", cause=error),
            )
        return state.conclude(exit_code=None, stopped=_as_stopped(stopped) if stopped else None)

    async def _guard(self, work: Coroutine[Any, Any, T]) -> tuple[StopReason | None, T | None]:
        """Run ``work`` in this task until it ends, a stop request or the deadline interrupts it (by cancelling this
        task and taking the cancellation back): the one stop mechanism of CLI and custom agents, with no helper task
        on the hot path of a turn."""
        assert self._stop is not None
        if self._stop.is_set():
            work.close()
            return self._stop_reason or "aborted", None
        task = asyncio.current_task()
        assert task is not None
        fired: list[StopReason] = []

        def interrupt(reason: StopReason) -> None:
            if not fired:
                fired.append(reason)
                task.cancel()

        self._interrupt = interrupt
        left = self._time_left()
        timer = asyncio.get_running_loop().call_later(left, interrupt, "timeout") if left is not None else None
        try:
            value = await work
        except asyncio.CancelledError:
            if fired and task.uncancel() == 0:  # our interruption, not a cancellation from outside
                return fired[0], None
            raise
        finally:
            self._interrupt = None
            if timer is not None:
                timer.cancel()
        if fired:  # the work swallowed our interruption and ended: it was stopped all the same
            task.uncancel()
            return fired[0], value
        return None, value

    # ------------------------------------------------------------------ CLI

    async def _run_cli(self, agent: CliAgent, input: AgentInput) -> TurnResult:
        refusal = _refusal(agent.harness, input)
        if refusal is not None:  # refusals that need no sandbox come first
            return _failed(refusal)
        try:
            sandbox, env, executable, input = await self._prepare(agent, input)
        except DispatchError as exc:
            return _failed(exc)
        except OSError as exc:  # the private home or the session files could not be prepared
            return _failed(DispatchError("provider", f"cannot prepare the sandbox: {exc.strerror or exc}", cause=exc))
        try:
            return await self._run_turn(agent, input, sandbox, env, executable)
        finally:
            if self._login is not None:
                # A login the CLI refreshed during the turn goes back to the host (only if the host's is unchanged).
                with contextlib.suppress(OSError):
                    write_back(self._login)
                self._login = None

    async def _run_turn(
        self, agent: CliAgent, input: AgentInput, sandbox: Sandbox, env: dict[str, str], executable: str
    ) -> TurnResult:
        harness = agent.harness
        signals = Signals(harness.quota, harness.unavailable, harness.requires_finished_event)
        usage: Usage | None = None
        events = 0
        leg: AgentInput | None = input
        while leg is not None:
            state = TurnState(signals)
            exit_code, stopped = await self._run_leg(agent, leg, executable, sandbox, env, state)
            events += state.events
            usage = state.usage if usage is None else usage + (state.usage or Usage.missing())
            if stopped == "steering" and self._steering and not self._canceled:
                leg = self._steered_leg(agent, sandbox, leg, state)
                if leg is None:
                    result = state.conclude(exit_code=exit_code)
                    error = DispatchError("steering", "no conversation to resume")
                    result = replace(result, status="failed", error=error)
                continue
            result = state.conclude(exit_code=exit_code, stopped=_as_stopped(stopped) if stopped else None)
            break
        result = replace(result, usage=usage or Usage.missing(), events=events)
        await self._capture(agent, sandbox, result)
        return result

    async def _prepare(self, agent: CliAgent, input: AgentInput) -> tuple[Sandbox, dict[str, str], str, AgentInput]:
        """The sandbox, the environment, the executable, and the input with a forked conversation in place."""
        harness = agent.harness
        provider = self._provider
        assert provider is not None
        sandbox = provider.sandbox(self.workspace)
        env = self._environment(agent, provider, sandbox)
        # An install or a version check blocks: only then go through a thread.
        executable = ready_cli(harness) or await asyncio.to_thread(ensure_cli, harness)
        if executable is not None:
            env.update(unpack_environment(harness, executable))
        continuation = input.continuation
        if continuation is not None:
            await restore_conversation(agent, sandbox, continuation.conversation)
            if continuation.fork and harness.fork is not None:
                forked = fork_conversation(agent, sandbox, continuation.conversation)
                input = AgentInput(input.prompt, Continuation(forked), input.live_input)
        return sandbox, env, str(executable), input

    async def _run_leg(
        self, agent: CliAgent, leg: AgentInput, executable: str, sandbox: Sandbox, env: dict[str, str], state: TurnState
    ) -> tuple[int | None, StopReason | None]:
        """One process of the turn (steering resumes the conversation in another); ``state.usage`` is this leg's."""
        harness = agent.harness
        before: Usage | None = None
        if harness.cumulative_usage and leg.continuation is not None:
            before = conversation_usage(agent, sandbox, leg.continuation.conversation) or Usage.missing()
        command = replace(
            agent.request(leg, executable=executable), endpoints=self._endpoints, read_only=self._read_only
        )
        exit_code, stopped = await self._run_process(agent, leg, command, sandbox, env, state)
        if harness.cumulative_usage and state.conversation:
            # The session's own running total, read once the CLI is gone, replaces the streamed one: exact whatever
            # the order of the usage notifications (a late one can be lost when the CLI exits).
            session_total = conversation_usage(agent, sandbox, state.conversation)
            if session_total is not None and session_total.complete:
                state.usage = session_total
        if before is not None and state.usage is not None:
            state.usage = state.usage.minus(before)
        return exit_code, stopped

    def _steered_leg(self, agent: CliAgent, sandbox: Sandbox, leg: AgentInput, state: TurnState) -> AgentInput | None:
        """The next leg after a stop for steering: the conversation resumed with the steering text (None when there
        is no conversation to resume)."""
        conversation = state.conversation or (leg.continuation.conversation if leg.continuation else None)
        if conversation is None:
            return None
        text = "\n\n".join(self._steering)
        self._steering.clear()
        assert self._stop is not None
        self._stop.clear()
        self._stop_reason = None
        recorded = prompt_recorded(agent, sandbox, conversation, leg.prompt)
        if recorded:
            return AgentInput(text, Continuation(conversation))
        if recorded is False:
            # The session exists but the stopped prompt never reached it: resume with both.
            return AgentInput(f"{leg.prompt}\n\n{text}", Continuation(conversation))
        # Stopped before the CLI wrote its session (Codex writes the rollout only once the model request is under
        # way): nothing to resume, so run the stopped prompt again with the steering.
        return AgentInput(f"{leg.prompt}\n\n{text}", leg.continuation)

    async def _capture(self, agent: CliAgent, sandbox: Sandbox, result: TurnResult) -> None:
        if not (agent.capture and agent.storage is not None and result.conversation):
            return
        try:
            await capture_conversation(agent, sandbox, result.conversation)
        except (DispatchError, OSError) as exc:
            warning = AgentEvent("warning", text=f"conversation capture failed: {exc}", code="session")
            self._emit(warning, agent, "harness")

    def _environment(self, agent: CliAgent, provider: SandboxProvider, sandbox: Sandbox) -> dict[str, str]:
        harness = agent.harness
        dotenv = sandbox.variables()
        visible = {**provider.variables, **dotenv, **agent.variables}
        plan = harness.credentials(visible)  # a local provider passes the key variables themselves
        configuration = harness.configuration(visible)
        self._endpoints = harness.endpoints(visible)
        self._read_only = ()
        if agent.mcp_servers and harness.mcp is not None:
            servers = [_at_home(server, sandbox.agent_home) for server in agent.mcp_servers]
            configuration = configuration.merged(harness.mcp(servers))
            self._endpoints += tuple(endpoint for server in servers for endpoint in server.endpoints)
            self._read_only = tuple(path for server in servers for path in server.read_only)
        provider.configure(sandbox, harness.name, configuration)
        if plan.host_login is not None:  # the user's own login, copied fresh for this turn
            self._login = copy_login(plan.host_login, sandbox.home, provider.host_home)
        return provider.environment(
            sandbox, harness={**harness.environment, **configuration.env}, agent=agent.variables, dotenv=dotenv
        )

    async def _run_process(
        self,
        agent: CliAgent,
        leg: AgentInput,
        command: Command,
        sandbox: Sandbox,
        env: dict[str, str],
        state: TurnState,
    ) -> tuple[int | None, StopReason | None]:
        provider = self._provider
        assert provider is not None
        if command.conversation is not None:
            named = AgentEvent("conversation", id=command.conversation)
            state.observe(named)
            self._emit(named, agent, "harness")
        try:
            process = await provider.start(command, sandbox, env)
        except DispatchError as exc:
            state.observe(AgentEvent("failure", text=exc.message, code=exc.code))
            return None, None

        def on_event(event: AgentEvent) -> None:
            state.observe(event)
            self._emit(event, agent, "harness")

        live = live_input(agent.harness, command, leg, agent.model, sandbox.workspace)
        run = ProcessRun(process, agent.harness.events, on_event, live)
        self._process = run
        try:
            await run.open()
            stopped, code = await self._guard(run.run())
            if stopped is None:
                return code, None
            await run.kill()
            self._emit(AgentEvent("stopped", code="aborted" if stopped == "aborted" else stopped), agent, "harness")
            return run.returncode, stopped
        finally:
            run.close()
            self._process = None


def _at_home(server: McpServer, home: Path) -> McpServer:
    """The server with its ``~/`` variables as paths under the home the agent sees."""
    env = {name: str(home / value[2:]) if value.startswith("~/") else value for name, value in server.env.items()}
    return replace(server, env=env)


def _refusal(harness: Harness, input: AgentInput) -> DispatchError | None:
    """Why this harness cannot take this input at all, if it cannot."""
    continuation = input.continuation
    if continuation is not None and not harness.resumable:
        return DispatchError("session", f"{harness.name} cannot resume a conversation")
    if continuation is not None and continuation.fork and not harness.forkable:
        return DispatchError("session", f"{harness.name} cannot fork a conversation")
    if input.live_input and not harness.live_input:
        return DispatchError("configuration", f"{harness.name} has no live-input protocol")
    return None


def _as_stopped(reason: StopReason) -> Stopped:
    return "timeout" if reason == "timeout" else "aborted"


def _failed(error: DispatchError) -> TurnResult:
    status: Literal["failed", "canceled"] = "canceled" if error.code == "aborted" else "failed"
    return TurnResult(status=status, text=None, usage=Usage.missing(), error=error)
