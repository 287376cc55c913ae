"""A remote A2A agent and its tools: resolve the card, then send / stream / poll through the SDK's client."""

from __future__ import annotations

import copy
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import httpx
from a2a.client import Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
)

from muster_a2a._proto import has, which
from muster_a2a.cards import (
    DEFAULT_CARD_CACHE,
    CardCache,
    dialect_of,
    fetch_card_document,
    interface_only,
    parse_card,
    select_interface,
)
from muster_a2a.errors import AgentResolutionError
from muster_a2a.models import DEFAULT_POLL_EVERY_MS, DEFAULT_TIMEOUT_MS, INPUT_SCHEMA, ToolResult
from muster_a2a.naming import tool_name, unique
from muster_a2a.origins import credentials_allowed
from muster_a2a.output import FAILED, INTERRUPTED, TERMINAL, proto_message_text, state_name, status_text, task_output

log = logging.getLogger("muster.a2a")

CONNECT_TIMEOUT_S = 10.0
# Bound for the CancelTask sent after a timeout: the budget is already spent, so this must be short.
CANCEL_TIMEOUT_S = 10.0
_ALIASES = {
    "pollEvery": "poll_every",
    "poll-every": "poll_every",
    "allowHosts": "allow_hosts",
    "allow-hosts": "allow_hosts",
    "allowHttp": "allow_http",
    "allow-http": "allow_http",
}


@dataclass(frozen=True)
class Progress:
    """The remote task handle as it becomes known / changes state, for callers that store it."""

    task_id: str | None
    context_id: str | None
    state: str
    polls: int
    dialect: str | None


OnProgress = Callable[[Progress], Awaitable[None]]


def make_http_client(
    timeout_ms: int = DEFAULT_TIMEOUT_MS, *, connect_timeout: float = CONNECT_TIMEOUT_S
) -> httpx.AsyncClient:
    """An HTTP client with explicit timeouts: a short connect, and a read bound by the call budget (a stream may be
    silent for a long time), never httpx's 5-second default. Redirects are not followed: a redirect to another host
    would carry the credentials along."""
    read = max(timeout_ms / 1000 + 5.0, 30.0)
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=connect_timeout, read=read, write=30.0, pool=30.0),
        follow_redirects=False,
    )


@dataclass
class _Options:
    headers: dict[str, str]
    timeout: int
    poll_every: int
    allow_hosts: tuple[str, ...]
    allow_http: bool
    connect_timeout: float


@dataclass
class _Run:
    """What one call has learned so far."""

    task_id: str | None = None
    context_id: str | None = None
    state: str = "sending"
    polls: int = 0
    task: Task | None = None
    message: Message | None = None
    status_message: str = ""
    changed: bool = False

    def note(self, task_id: str, context_id: str, state: str) -> None:
        if task_id and task_id != self.task_id:
            self.task_id = task_id
            self.changed = True
        if context_id and context_id != self.context_id:
            self.context_id = context_id
            self.changed = True
        if state != self.state:
            self.state = state
            self.changed = True

    def absorb(self, event: StreamResponse) -> None:
        kind = which(event, "payload")
        if kind == "task":
            self.set_task(event.task)
        elif kind == "message":
            self.message = event.message
            self.note(event.message.task_id, event.message.context_id, "completed")
        elif kind == "status_update":
            update = event.status_update
            self.note(update.task_id, update.context_id, state_name(update.status.state))
            if has(update.status, "message"):
                self.status_message = proto_message_text(update.status.message)

    def set_task(self, task: Task) -> None:
        self.task = task
        self.note(task.id, task.context_id, state_name(task.status.state))

    @property
    def settled(self) -> bool:
        return self.message is not None or self.state in TERMINAL or self.state in INTERRUPTED


def _loop_time(monotonic: float) -> float:
    """A ``time.monotonic()`` instant on the event loop's clock, which cancel scopes' deadlines are read on."""
    return anyio.current_time() + (monotonic - time.monotonic())


class RemoteAgent:
    """A resolved (or failed) remote agent. A failed one has ``card is None``, ``tools == []`` and an ``error``."""

    def __init__(
        self,
        name: str,
        options: _Options,
        *,
        card: AgentCard | None = None,
        interface: AgentInterface | None = None,
        card_url: str | None = None,
        error: str | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.name = name
        self.card = card
        self.card_url = card_url
        self.error = error
        self._options = options
        self._interface = interface
        self._http = http
        self._clients: dict[bool, Client] = {}
        self.endpoint: str | None = interface.url if interface else None
        self.dialect: str | None = dialect_of(interface) if interface else None
        self.tools: list[Tool] = []
        self._sdk_card = interface_only(card, interface) if card is not None and interface is not None else None
        # With a card document handed over directly there is no configured URL: its chosen endpoint is the origin.
        configured = card_url if card_url is not None else self.endpoint
        self.sends_credentials = bool(
            self.endpoint and credentials_allowed(self.endpoint, configured, options.allow_hosts)
        )
        if card is not None and error is None:
            self.tools = self._build_tools(card)

    @property
    def ok(self) -> bool:
        return self.error is None and self.card is not None

    @property
    def timeout(self) -> int:
        return self._options.timeout

    @property
    def poll_every(self) -> int:
        return self._options.poll_every

    def _build_tools(self, card: AgentCard) -> list[Tool]:
        tools: list[Tool] = []
        taken: list[str] = []
        skills = list(card.skills)
        if not skills:
            name = unique(tool_name(card.name, None), taken)
            taken.append(name)
            tools.append(Tool(name, f"{card.description or card.name} (A2A agent {card.name})", self, None))
        for skill in skills:
            name = unique(tool_name(card.name, skill.id or skill.name), taken)
            taken.append(name)
            about = skill.description or skill.name or skill.id
            tools.append(
                Tool(name, f"{about} (skill {skill.name or skill.id!r} of the A2A agent {card.name})", self, skill.id)
            )
        return tools

    # ------------------------------------------------------------------ the wire, through the SDK

    @asynccontextmanager
    async def _client(self, *, streaming: bool) -> AsyncIterator[tuple[Client, ClientCallContext]]:
        headers = dict(self._options.headers) if self.sends_credentials else None
        if self._http is not None:
            # A shared HTTP client: the SDK client over it holds no per-call state, so it is built once per mode.
            client = self._clients.get(streaming)
            if client is None:
                client = self._clients[streaming] = self._sdk_client(self._http, streaming)
            yield client, ClientCallContext(service_parameters=headers)
            return
        http = make_http_client(self._options.timeout, connect_timeout=self._options.connect_timeout)
        try:
            yield self._sdk_client(http, streaming), ClientCallContext(service_parameters=headers)
        finally:
            await http.aclose()

    def _sdk_client(self, http: httpx.AsyncClient, streaming: bool) -> Client:
        assert self._sdk_card is not None and self._interface is not None
        config = ClientConfig(
            httpx_client=http, streaming=streaming, supported_protocol_bindings=[self._interface.protocol_binding]
        )
        return ClientFactory(config).create(self._sdk_card)

    def _failure(self, reason: str) -> ToolResult:
        return ToolResult(
            text=reason,
            is_error=True,
            metadata=self._metadata(_Run(state="error"), 0.0),
        )

    def _metadata(self, run: _Run, started: float) -> dict[str, Any]:
        return {
            "agent": self.name,
            "task_id": run.task_id,
            "context_id": run.context_id,
            "state": run.state,
            "polls": run.polls,
            "ms": int((time.monotonic() - started) * 1000) if started else 0,
            "dialect": self.dialect,
        }

    async def _report(self, run: _Run, on_progress: OnProgress | None) -> None:
        if run.changed and on_progress is not None:
            run.changed = False
            await on_progress(Progress(run.task_id, run.context_id, run.state, run.polls, self.dialect))

    async def call(
        self,
        task: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        on_progress: OnProgress | None = None,
    ) -> ToolResult:
        """Send ``task`` as a user message (non-blocking), then stream (if the card allows) or poll ``GetTask``
        until a terminal or interrupted state or the timeout. Pass ``task_id``/``context_id`` to answer an
        input-required task."""
        if not self.ok:
            return self._failure(f"A2A agent {self.name} is unavailable: {self.error}")
        assert self.card is not None
        started = time.monotonic()
        deadline = started + self._options.timeout / 1000
        run = _Run()
        streaming = bool(self.card.capabilities.streaming)
        try:
            async with self._client(streaming=streaming) as (client, ctx):
                request = SendMessageRequest(
                    message=Message(
                        role=Role.ROLE_USER,
                        message_id=uuid.uuid4().hex,
                        parts=[Part(text=task)],
                        task_id=task_id or "",
                        context_id=context_id or "",
                    )
                )
                request.configuration.return_immediately = True
                await self._send(client, ctx, request, run, deadline, on_progress)
                if run.message is not None:
                    return ToolResult(text=proto_message_text(run.message), metadata=self._metadata(run, started))
                if run.task_id is None:
                    if time.monotonic() >= deadline:
                        return self._timed_out(run, started)
                    return ToolResult(
                        text=f"A2A agent {self.name} answered neither a task nor a message",
                        is_error=True,
                        metadata=self._metadata(run, started),
                    )
                if streaming and run.settled:
                    # Stream events carry deltas; the finished task (artifacts, history) is one GetTask away.
                    run.set_task(await client.get_task(GetTaskRequest(id=run.task_id), context=ctx))
                    run.changed = False
                return await self._follow(client, ctx, run, started, deadline, on_progress, poll_first=False)
        except Exception as exc:  # a foreign server may fail in any way; the tool reports, never raises
            return self._error(run, started, exc)

    async def _send(
        self,
        client: Client,
        ctx: ClientCallContext,
        request: SendMessageRequest,
        run: _Run,
        deadline: float,
        on_progress: OnProgress | None,
    ) -> None:
        """Send the message and read its events until the task settles or the budget is spent. Once the request
        is out the remote task may exist, so its handle is waited for past the budget (as long as a CancelTask
        may take): a timeout that left before the task's id arrived could not cancel it, and it would run on."""
        with anyio.CancelScope(deadline=_loop_time(deadline) + CANCEL_TIMEOUT_S) as scope:
            stream = cast(AsyncGenerator[StreamResponse, None], client.send_message(request, context=ctx))
            async with aclosing(stream) as events:
                async for event in events:
                    run.absorb(event)
                    await self._report(run, on_progress)
                    if run.settled:
                        break
                    if run.task_id is not None:
                        scope.deadline = min(scope.deadline, _loop_time(deadline))

    async def follow(
        self,
        task_id: str,
        *,
        context_id: str | None = None,
        budget_ms: int | None = None,
        polls: int = 0,
        state: str = "submitted",
        on_progress: OnProgress | None = None,
    ) -> ToolResult:
        """Resume following a task we sent earlier (e.g. before a restart): ``GetTask`` until it settles or the
        remaining budget is spent (then CancelTask)."""
        started = time.monotonic()
        run = _Run(task_id=task_id, context_id=context_id, state=state, polls=polls)
        if not self.ok:
            return self._failure(f"A2A agent {self.name} is unavailable: {self.error}")
        budget = self._options.timeout if budget_ms is None else budget_ms
        deadline = started + max(budget, 0) / 1000
        try:
            async with self._client(streaming=False) as (client, ctx):
                return await self._follow(client, ctx, run, started, deadline, on_progress, poll_first=True)
        except Exception as exc:
            return self._error(run, started, exc)

    async def _follow(
        self,
        client: Client,
        ctx: ClientCallContext,
        run: _Run,
        started: float,
        deadline: float,
        on_progress: OnProgress | None,
        *,
        poll_first: bool,
    ) -> ToolResult:
        assert run.task_id is not None
        first = poll_first
        while not run.settled:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not first:
                return await self._cancel_after_timeout(client, ctx, run, started, on_progress)
            if not first:
                await anyio.sleep(min(self._options.poll_every / 1000, remaining))
            first = False
            with anyio.move_on_after(max(deadline - time.monotonic(), 0) + CANCEL_TIMEOUT_S) as scope:
                task = await client.get_task(GetTaskRequest(id=run.task_id), context=ctx)
            if scope.cancelled_caught:
                return await self._cancel_after_timeout(client, ctx, run, started, on_progress)
            run.polls += 1
            run.set_task(task)
            await self._report(run, on_progress)
        return self._settled(run, started)

    def _settled(self, run: _Run, started: float) -> ToolResult:
        assert run.task is not None
        metadata = self._metadata(run, started)
        if run.state == "completed":
            return ToolResult(text=task_output(run.task), metadata=metadata)
        why = status_text(run.task) or run.status_message
        text = f"A2A task {run.task_id} {run.state}" + (f": {why}" if why else "")
        return ToolResult(text=text, is_error=run.state in FAILED, metadata=metadata)

    def _timed_out(self, run: _Run, started: float, note: str = "") -> ToolResult:
        return ToolResult(
            text=f"A2A task {run.task_id} timed out after {self._options.timeout}ms (state={run.state}){note}",
            is_error=True,
            metadata=self._metadata(run, started),
        )

    async def _cancel_after_timeout(
        self, client: Client, ctx: ClientCallContext, run: _Run, started: float, on_progress: OnProgress | None
    ) -> ToolResult:
        """The budget is spent: cancel the remote task instead of leaving it running."""
        assert run.task_id is not None
        before = run.state
        note = "; CancelTask sent"
        try:
            with anyio.fail_after(CANCEL_TIMEOUT_S):
                canceled = await client.cancel_task(CancelTaskRequest(id=run.task_id), context=ctx)
            run.task = canceled
            run.note(canceled.id, canceled.context_id, state_name(canceled.status.state))
        except Exception as exc:
            note = f"; CancelTask failed: {type(exc).__name__}: {exc}"
        result = self._timed_out(_Run(task_id=run.task_id, state=before), started, note)
        result.metadata.update(self._metadata(run, started))
        await self._report(run, on_progress)
        return result

    def _error(self, run: _Run, started: float, exc: Exception) -> ToolResult:
        detail = str(exc) or type(exc).__name__
        log.warning("A2A call to %s failed: %s: %s", self.name, type(exc).__name__, detail)
        where = f" (task {run.task_id})" if run.task_id else ""
        run.state = "error"
        return ToolResult(
            text=f"A2A call to agent {self.name}{where} failed: {detail}",
            is_error=True,
            metadata=self._metadata(run, started),
        )

    async def cancel(self, task_id: str) -> str:
        """Cancel a remote task; returns its state afterwards."""
        async with self._client(streaming=False) as (client, ctx):
            task = await client.cancel_task(CancelTaskRequest(id=task_id), context=ctx)
        return state_name(task.status.state)


@dataclass
class Tool:
    """One skill of a remote agent as a tool taking ``{"task": str}``."""

    name: str
    description: str
    agent: RemoteAgent = field(repr=False)
    skill: str | None
    input_schema: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(INPUT_SCHEMA))

    async def call(
        self,
        task: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        on_progress: OnProgress | None = None,
    ) -> ToolResult:
        return await self.agent.call(task, task_id=task_id, context_id=context_id, on_progress=on_progress)

    def renamed(self, name: str) -> Tool:
        return Tool(name, self.description, self.agent, self.skill)


def _options(
    headers: Mapping[str, str] | None,
    timeout: int,
    poll_every: int,
    allow_hosts: Sequence[str],
    allow_http: bool,
    connect_timeout: float,
) -> _Options:
    return _Options(
        headers=dict(headers or {}),
        timeout=int(timeout),
        poll_every=int(poll_every),
        allow_hosts=tuple(allow_hosts),
        allow_http=bool(allow_http),
        connect_timeout=float(connect_timeout),
    )


async def remote_agent(
    card: str | Mapping[str, Any] | AgentCard,
    *,
    headers: Mapping[str, str] | None = None,
    # The contract names it `timeout` (milliseconds, the whole call budget), not a cancel scope.
    timeout: int = DEFAULT_TIMEOUT_MS,  # noqa: ASYNC109
    poll_every: int = DEFAULT_POLL_EVERY_MS,
    name: str | None = None,
    allow_hosts: Sequence[str] = (),
    allow_http: bool = False,
    http_client: httpx.AsyncClient | None = None,
    card_cache: CardCache | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    **aliases: Any,
) -> RemoteAgent:
    """Resolve an agent: ``card`` is a card URL, a base URL (the well-known path is added) or a card document.

    Never raises for a failing agent: the result then has ``card is None``, ``tools == []`` and ``error``.
    ``pollEvery``/``poll-every`` (and ``allowHosts``/``allowHttp``) are accepted as aliases. Pass ``http_client`` to
    share connections (the caller closes it); otherwise each call opens and closes its own client.
    """
    picked: dict[str, Any] = {"poll_every": poll_every, "allow_hosts": allow_hosts, "allow_http": allow_http}
    for key, value in aliases.items():
        if key not in _ALIASES:
            raise TypeError(f"remote_agent() got an unexpected keyword argument {key!r}")
        picked[_ALIASES[key]] = value
    options = _options(
        headers, timeout, picked["poll_every"], picked["allow_hosts"], picked["allow_http"], connect_timeout
    )
    label = name or (card if isinstance(card, str) else "agent")
    if options.timeout <= 0 or options.poll_every <= 0:
        return RemoteAgent(label, options, error="timeout and poll_every must be positive milliseconds")
    cache = card_cache if card_cache is not None else DEFAULT_CARD_CACHE
    card_url: str | None = None
    try:
        if isinstance(card, AgentCard):
            parsed = card
        elif isinstance(card, Mapping):
            parsed = parse_card(dict(card))
        else:
            own = http_client is None
            http = http_client or make_http_client(options.timeout, connect_timeout=options.connect_timeout)
            try:
                _, parsed, card_url = await fetch_card_document(
                    card, http, headers=options.headers, cache=cache, allow_http=options.allow_http
                )
            finally:
                if own:
                    await http.aclose()
        interface = select_interface(parsed, allow_http=options.allow_http)
    except AgentResolutionError as exc:
        return RemoteAgent(label, options, error=str(exc), card_url=card_url)
    return RemoteAgent(
        name or parsed.name, options, card=parsed, interface=interface, card_url=card_url, http=http_client
    )


async def agent_tools(card: str | Mapping[str, Any] | AgentCard, **kwargs: Any) -> list[Tool]:
    """``remote_agent(...).tools``: a failing agent gives ``[]``."""
    return (await remote_agent(card, **kwargs)).tools
