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
from muster_dispatch.bootstrap import ensure_cli, ready_cli
from muster_dispatch.errors import DispatchError, ReplayDivergence
from muster_dispatch.events import AgentEvent
from muster_dispatch.fallback import attempt_of, run_fallback
from muster_dispatch.harness import Command
from muster_dispatch.inputs import AgentInput, Continuation
from muster_dispatch.journal import JournalSink
from muster_dispatch.provider import LocalProcess, LocalProvider, Sandbox, read_dotenv
from muster_dispatch.replay import RecordedTurn, ReplayAgent, replay_turn
from muster_dispatch.results import TurnResult
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
READ_GRACE = 2.0  # seconds to drain the pipes after the CLI exited, before its group is swept


def dispatch(
    agent: DispatchAgent,
    input: AgentInput,
    *,
    workspace: Path | str,
    provider: LocalProvider | None = None,
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
        provider: LocalProvider | None,
        deadline: float | None,
        journal: JournalSink | None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.agent = agent
        self.input = input
        self.workspace = workspace
        self.deadline = deadline
        self.journal = journal
        self._provider = provider
        self._queue: asyncio.Queue[AgentEvent | None] | None = None
        self._task: asyncio.Task[TurnResult] | None = None
        self._deadline_at: float | None = None
        self._stop: asyncio.Event | None = None
        self._stop_reason: StopReason | None = None
        self._canceled = False
        self._steering: list[str] = []
        self._process: LocalProcess | None = None
        # While a live-input process runs: steering text -> the stdin lines that deliver it.
        self._live: Callable[[str], list[str]] | None = None
        self._live_sent = 0
        self._live_done = 0
        self._wakers: list[Callable[[], None]] = []  # wake a waiting _supervise on a stop request
        self._interrupt: Callable[[StopReason], None] | None = None  # interrupt a running _guard
        self._running: DispatchAgent = agent  # the candidate running now (a fallback's current one)
        self._replay_turn: RecordedTurn | None = None
        self._replay_steered = 0

    # ------------------------------------------------------------------ public surface

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self

    async def __anext__(self) -> AgentEvent:
        self._start()
        assert self._queue is not None
        event = await self._queue.get()
        if event is None:
            self._queue.put_nowait(None)  # every later __anext__ ends too
            raise StopAsyncIteration
        return event

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
        if self._live is not None and process is not None:
            self._record("turn.steer", {"text": text})
            for line in self._live(text):
                await process.write(line)
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
            self._queue = asyncio.Queue()
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
        for ring in list(self._wakers):
            ring()
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
        self._queue.put_nowait(event)

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
            self._queue.put_nowait(None)

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

        task = asyncio.ensure_future(consume())
        stopped = await self._supervise(task)
        if stopped is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            return state.conclude(exit_code=None, stopped=_as_stopped(stopped))
        error = task.exception()
        if isinstance(error, DispatchError):
            return replace(state.conclude(exit_code=None), status="failed", error=error)
        if error is not None:
            return replace(
                state.conclude(exit_code=None),
                status="failed",
                error=DispatchError("process", f"custom agent raised {type(error).__name__}: {error}", cause=error),
            )
        return state.conclude(exit_code=None)

    async def _guard(self, work: Coroutine[Any, Any, T]) -> tuple[StopReason | None, T | None]:
        """Run ``work`` in this task until it ends, a stop request or the deadline interrupts it (by cancelling this
        task and taking the cancellation back): no helper task on the hot path of a CLI turn."""
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
            return None, await work
        except asyncio.CancelledError:
            if fired and task.uncancel() == 0:  # our interruption, not a cancellation from outside
                return fired[0], None
            raise
        finally:
            self._interrupt = None
            if timer is not None:
                timer.cancel()

    async def _supervise(self, task: asyncio.Future[Any]) -> StopReason | None:
        """Wait for ``task``, a stop request or the deadline; which one stopped the turn (None: it ended).

        One future woken by callbacks (no helper task, no asyncio.wait): this runs once per turn on the hot path.
        """
        assert self._stop is not None
        if not task.done() and not self._stop.is_set():
            loop = asyncio.get_running_loop()
            wake: asyncio.Future[None] = loop.create_future()

            def ring(_: object = None) -> None:
                if not wake.done():
                    wake.set_result(None)

            task.add_done_callback(ring)
            self._wakers.append(ring)
            left = self._time_left()
            timer = loop.call_later(left, ring) if left is not None else None
            try:
                await wake
            finally:
                task.remove_done_callback(ring)
                self._wakers.remove(ring)
                if timer is not None:
                    timer.cancel()
        if task.done():
            return None
        if self._stop.is_set():
            return self._stop_reason or "aborted"
        return "timeout"

    # ------------------------------------------------------------------ CLI

    async def _run_cli(self, agent: CliAgent, input: AgentInput) -> TurnResult:
        harness = agent.harness
        continuation = input.continuation
        # Refusals that need no sandbox come first.
        if continuation is not None and not harness.resumable:
            return _failed(DispatchError("session", f"{harness.name} cannot resume a conversation"))
        if continuation is not None and continuation.fork and not harness.forkable:
            return _failed(DispatchError("session", f"{harness.name} cannot fork a conversation"))
        if input.live_input and not harness.live_input:
            return _failed(DispatchError("configuration", f"{harness.name} has no live-input protocol"))
        provider = self._provider
        assert provider is not None
        try:
            sandbox = provider.sandbox(self.workspace)
            env = self._environment(agent, provider, sandbox)
            # An install or a version check blocks: only then go through a thread.
            executable = ready_cli(harness) or await asyncio.to_thread(ensure_cli, harness)
            if continuation is not None:
                await restore_conversation(agent, sandbox, continuation.conversation)
                if continuation.fork and harness.fork is not None:
                    input = AgentInput(
                        input.prompt,
                        Continuation(fork_conversation(agent, sandbox, continuation.conversation)),
                        input.live_input,
                    )
        except DispatchError as exc:
            return _failed(exc)
        except OSError as exc:  # the private home or the session files could not be prepared
            return _failed(DispatchError("provider", f"cannot prepare the sandbox: {exc.strerror or exc}", cause=exc))
        signals = Signals(harness.quota, harness.unavailable, harness.requires_finished_event)
        usage: Usage | None = None
        events = 0
        leg = input
        while True:
            state = TurnState(signals)
            before: Usage | None = None
            if harness.cumulative_usage and leg.continuation is not None:
                before = conversation_usage(agent, sandbox, leg.continuation.conversation) or Usage.missing()
            exit_code, stopped = await self._run_process(
                agent, leg, agent.request(leg, executable=str(executable)), sandbox, env, state
            )
            events += state.events
            if harness.cumulative_usage and state.conversation:
                # The session's own running total, read once the CLI is gone, replaces the streamed one: exact
                # whatever the order of the usage notifications (a late one can be lost when the CLI exits).
                session_total = conversation_usage(agent, sandbox, state.conversation)
                if session_total is not None and session_total.complete:
                    state.usage = session_total
            if before is not None and state.usage is not None:
                state.usage = state.usage.minus(before)
            usage = state.usage if usage is None else usage + (state.usage or Usage.missing())
            if stopped == "steering" and self._steering and not self._canceled:
                conversation = state.conversation or (leg.continuation.conversation if leg.continuation else None)
                if conversation is None:
                    result = state.conclude(exit_code=exit_code)
                    result = replace(
                        result, status="failed", error=DispatchError("steering", "no conversation to resume")
                    )
                    break
                text = "\n\n".join(self._steering)
                self._steering.clear()
                assert self._stop is not None
                self._stop.clear()
                self._stop_reason = None
                recorded = prompt_recorded(agent, sandbox, conversation, leg.prompt)
                if recorded:
                    leg = AgentInput(text, Continuation(conversation))
                elif recorded is False:
                    # The session exists but the stopped prompt never reached it: resume with both.
                    leg = AgentInput(f"{leg.prompt}\n\n{text}", Continuation(conversation))
                else:
                    # Stopped before the CLI wrote its session (Codex writes the rollout only once the model
                    # request is under way): nothing to resume, so run the stopped prompt again with the steering.
                    leg = AgentInput(f"{leg.prompt}\n\n{text}", leg.continuation)
                continue
            result = state.conclude(exit_code=exit_code, stopped=_as_stopped(stopped) if stopped else None)
            break
        result = replace(result, usage=usage or Usage.missing(), events=events)
        if agent.capture and agent.storage is not None and result.conversation:
            try:
                await capture_conversation(agent, sandbox, result.conversation)
            except (DispatchError, OSError) as exc:
                self._emit(
                    AgentEvent("warning", text=f"conversation capture failed: {exc}", code="session"), agent, "harness"
                )
        return result

    def _environment(self, agent: CliAgent, provider: LocalProvider, sandbox: Sandbox) -> dict[str, str]:
        harness = agent.harness
        dotenv = read_dotenv(sandbox.dotenv)
        visible = {**provider.variables, **dotenv, **agent.variables}
        harness.credentials(visible)  # validates; a local provider passes the variables themselves
        configuration = harness.configuration(visible)
        provider.configure(sandbox, harness.name, configuration)
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
        harness = agent.harness
        try:
            process = await provider.start(command, sandbox, env)
        except DispatchError as exc:
            state.observe(AgentEvent("failure", text=exc.message, code="process"))
            return None, None
        self._process = process
        driver = (
            harness.live_driver(leg, agent.model, sandbox.workspace)
            if command.keep_stdin and harness.live_driver
            else None
        )
        counted = command.keep_stdin and driver is None and harness.live_message is not None
        if driver is not None:
            self._live = driver.steer
            for line in driver.opening():
                await process.write(line)
        elif counted:
            message = harness.live_message
            assert message is not None
            self._live_sent, self._live_done = 1, 0

            def one_more(text: str) -> list[str]:
                self._live_sent += 1
                return [message(text)]

            self._live = one_more

        async def read_stdout() -> None:
            decode = harness.events
            readline = process.stdout.readline
            while True:
                raw = await readline()
                if not raw:
                    return
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                for event in decode(text):
                    state.observe(event)
                    self._emit(event, agent, "harness")
                    if counted and event.type == "finished":
                        self._live_done += 1
                        if self._live_done >= self._live_sent:
                            # Every message sent has its result: closing stdin lets the CLI end the turn.
                            self._live = None
                            process.close_stdin()
                if driver is not None and self._live is not None:
                    with contextlib.suppress(DispatchError, ConnectionError):
                        for line in driver.feed(text):
                            await process.write(line)
                    if driver.done:
                        self._live = None
                        process.close_stdin()  # the protocol is over: the CLI exits

        async def read_stderr() -> None:
            while True:
                raw = await process.stderr.readline()
                if not raw:
                    return
                event = AgentEvent("stderr", text=raw.decode("utf-8", "replace").rstrip("\r\n"))
                state.observe(event)
                self._emit(event, agent, "harness")

        stderr = asyncio.ensure_future(read_stderr())
        loop = asyncio.get_running_loop()
        # If the CLI exits but a child keeps its pipes open, the readers would wait forever: sweep the group after
        # a grace period.
        grace: list[asyncio.TimerHandle] = []
        running = [True]

        def sweep_if_stuck() -> None:
            if running[0]:
                process.sweep()

        def check_exit() -> None:
            # A timer, not an exit watcher: a short turn ends before it ever fires, so it costs no wake-up.
            if not running[0]:
                return
            later = sweep_if_stuck if process.process.returncode is not None else check_exit
            grace.append(loop.call_later(READ_GRACE, later))

        grace.append(loop.call_later(READ_GRACE, check_exit))

        async def run() -> int:
            await read_stdout()
            await stderr
            return await process.wait()

        try:
            stopped, code = await self._guard(run())
            running[0] = False
            if stopped is None:
                process.sweep()
                return code, None
            await process.kill()
            self._emit(AgentEvent("stopped", code="aborted" if stopped == "aborted" else stopped), agent, "harness")
            return process.process.returncode, stopped
        finally:
            running[0] = False
            if process.process.returncode is None:
                process.kill_now()  # cancelled from outside (e.g. the loop shuts down): leave nothing running
            stderr.cancel()
            for handle in grace:
                handle.cancel()
            self._process = None
            self._live = None


def _as_stopped(reason: StopReason) -> Stopped:
    return "timeout" if reason == "timeout" else "aborted"


def _failed(error: DispatchError) -> TurnResult:
    status: Literal["failed", "canceled"] = "canceled" if error.code == "aborted" else "failed"
    return TurnResult(status=status, text=None, usage=Usage.missing(), error=error)
