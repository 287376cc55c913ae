"""``MusterClient``: the synchronous client (one httpx.Client; use it as a context manager, or ``close()``)."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from muster_client import calls, config
from muster_client import claims as cl
from muster_client.calls import Call
from muster_client.core import ClientCore, inbox_event, raise_for_problem, run_event
from muster_client.directory import EVERY_LIVE_AGENT, DirectoryFields, DirectoryQuery
from muster_client.models import (
    A2AAgents,
    A2ACall,
    A2ACallResult,
    AckPreview,
    AckResult,
    AgentList,
    AgentView,
    BacklogPage,
    CheckinPreview,
    CheckinRecord,
    CheckoutPreview,
    CheckoutResult,
    DispatchAgents,
    DispatchMembers,
    InboxMessage,
    InboxPage,
    MessageReceipts,
    Ready,
    Run,
    RunEvent,
    RunPage,
    SearchPage,
    SendPreview,
    SendResult,
    ThreadMessages,
    ThreadPage,
)
from muster_client.sse import EventParser, ServerEvent

T = TypeVar("T")


class MusterClient(ClientCore):
    """Every route of the service. Mutating mesh calls act only with ``confirm=True`` (otherwise: a preview)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        token: str | None = None,
        timeout: float = config.DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, api_key=api_key, token=token, timeout=timeout)
        self._http = httpx.Client(base_url=self.url, transport=transport)

    def __enter__(self) -> MusterClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def call(self, call: Call[T]) -> T:
        try:
            response = self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.body,
                headers=self.headers(call),
                timeout=self.timeout_for(call),
            )
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from exc
        return self.finish(call, response)

    def ready(self) -> Ready:
        return self.call(calls.ready())

    # ------------------------------------------------------------ mesh

    def checkin(
        self,
        agent_id: str,
        *,
        role: str | None = None,
        repo: str | None = None,
        caps: list[str] | None = None,
        status: str | None = None,
        ttl_seconds: int | None = None,
        confirm: bool = False,
        takeover: bool = False,
        idempotency_key: str | None = None,
    ) -> CheckinPreview | CheckinRecord:
        """Without ``confirm`` a preview. ``takeover`` (without a token): take over a live agent_id whose token was
        lost; the old token stops working."""
        return self.call(
            calls.checkin(
                agent_id,
                role=role,
                repo=repo,
                caps=caps,
                status=status,
                ttl_seconds=ttl_seconds,
                confirm=confirm,
                takeover=takeover,
                idempotency_key=idempotency_key,
            )
        )

    def agents(self, query: DirectoryQuery = EVERY_LIVE_AGENT, /, **fields: Unpack[DirectoryFields]) -> AgentList:
        """A page of the directory: ``query``, or its fields as keywords (``agents(role="builder")``)."""
        return self.call(calls.agents(query.but(**fields)))

    def backlog(self, query: DirectoryQuery = EVERY_LIVE_AGENT, /, **fields: Unpack[DirectoryFields]) -> BacklogPage:
        """Unread counts per agent, for people watching the mesh (no token asked, no lease renewed)."""
        return self.call(calls.backlog(query.but(**fields)))

    def agent(self, agent_id: str) -> AgentView:
        return self.call(calls.agent(agent_id))

    def send(
        self,
        body: str,
        *,
        to: str | None = None,
        role: str | None = None,
        repo: str | None = None,
        cap: str | None = None,
        thread_id: str | None = None,
        confirm: bool = False,
        idempotency_key: str | None = None,
    ) -> SendPreview | SendResult:
        return self.call(
            calls.send(
                body,
                to=to,
                role=role,
                repo=repo,
                cap=cap,
                thread_id=thread_id,
                confirm=confirm,
                idempotency_key=idempotency_key,
            )
        )

    def inbox(
        self, *, after: int | None = None, limit: int | None = None, wait_seconds: float = 0, follow: bool = False
    ) -> InboxPage:
        """Read (never moves the stored cursor); ``wait_seconds`` long-polls until a message is stored. ``follow``:
        read on the agent's behalf (to count what is unread): recorded as woken, not read, and not its activity."""
        return self.call(calls.inbox(after=after, limit=limit, wait_seconds=wait_seconds, follow=follow))

    def receipts(self, message_id: str) -> MessageReceipts:
        """What became of a message this agent sent (every recipient) or received (its own): stored, woken, read,
        acknowledged, with times. ``ApiError`` 404 for any other message."""
        return self.call(calls.receipts(message_id))

    def search(self, q: str, *, view: str = "mine", limit: int | None = None, cursor: str | None = None) -> SearchPage:
        """Full-text search: ``mine`` over what this agent sent and received (its token), ``all`` over every message
        (the overseer's view, for holders of the service's API key)."""
        return self.call(calls.search(q, view=view, limit=limit, cursor=cursor))

    def threads(
        self, *, view: str = "mine", agent: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> ThreadPage:
        """The threads this agent is in (its token), the latest first; ``all`` every thread, or with ``agent`` that
        agent's (the overseer's view, for holders of the service's API key)."""
        return self.call(calls.threads(view=view, agent=agent, limit=limit, cursor=cursor))

    def thread(
        self,
        thread_id: str,
        *,
        view: str = "mine",
        agent: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ThreadMessages:
        """The messages of one thread this agent may see (``all``: every one), oldest first."""
        return self.call(calls.thread(thread_id, view=view, agent=agent, limit=limit, cursor=cursor))

    def ack(self, cursor: int, *, confirm: bool = False, idempotency_key: str | None = None) -> AckPreview | AckResult:
        return self.call(calls.ack(cursor, confirm=confirm, idempotency_key=idempotency_key))

    def checkout(
        self, *, confirm: bool = False, idempotency_key: str | None = None
    ) -> CheckoutPreview | CheckoutResult:
        return self.call(calls.checkout(confirm=confirm, idempotency_key=idempotency_key))

    def stream_inbox(self, *, after: int | None = None) -> Iterator[InboxMessage]:
        """The inbox as it fills (SSE), from ``after`` (else the stored cursor). Close the iterator to stop."""
        params = {"after": after} if after is not None else None
        for event in self._events(calls.INBOX_STREAM, params, self.stream_headers(None)):
            message = inbox_event(event)
            if message is not None:
                yield message

    def _events(self, path: str, params: dict[str, Any] | None, headers: dict[str, str]) -> Iterator[ServerEvent]:
        try:
            with self._http.stream(
                "GET", path, params=params, headers=headers, timeout=httpx.Timeout(self.timeout, read=None)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise_for_problem(response)
                parser = EventParser()
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from exc

    # ------------------------------------------------------------ A2A

    def a2a_agents(self) -> A2AAgents:
        return self.call(calls.a2a_agents())

    def a2a_reload(self) -> A2AAgents:
        return self.call(calls.a2a_reload())

    def a2a_call(
        self,
        tool: str,
        task: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        continues: str | None = None,
    ) -> A2ACallResult:
        """Call a remote agent's tool and wait for the end of its task (or its input-required/auth-required).
        ``continues`` (an input-required answer's ``call_id``), or ``task_id``/``context_id`` (its metadata),
        continue that remote task with ``task``."""
        return self.call(calls.a2a_call(tool, task, task_id=task_id, context_id=context_id, continues=continues))

    def a2a_start(
        self,
        tool: str,
        task: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        continues: str | None = None,
    ) -> A2ACall:
        return self.call(calls.a2a_start(tool, task, task_id=task_id, context_id=context_id, continues=continues))

    def a2a_get_call(self, call_id: str) -> A2ACall:
        return self.call(calls.a2a_get_call(call_id))

    # ------------------------------------------------------------ dispatch runs

    def dispatch_agents(self) -> DispatchAgents:
        return self.call(calls.dispatch_agents())

    def dispatch_members(self) -> DispatchMembers:
        return self.call(calls.dispatch_members())

    def start_run(
        self,
        agent: str,
        prompt: str,
        workspace: str,
        *,
        continuation: dict[str, Any] | None = None,
        deadline_s: float | None = None,
        live_input: bool = False,
        idempotency_key: str | None = None,
    ) -> Run:
        """Queue a turn of ``agent`` (202: the run, queued). ``continuation``: ``{"run_id": …}`` or
        ``{"conversation": …}``, with ``"fork": true`` to branch."""
        return self.call(
            calls.start_run(
                agent,
                prompt,
                workspace,
                continuation=continuation,
                deadline_s=deadline_s,
                live_input=live_input,
                idempotency_key=idempotency_key,
            )
        )

    def run(self, run_id: str) -> Run:
        return self.call(calls.run(run_id))

    def runs(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> RunPage:
        return self.call(calls.runs(agent=agent, status=status, cursor=cursor, limit=limit))

    def steer(self, run_id: str, text: str) -> Run:
        return self.call(calls.steer(run_id, text))

    def cancel(self, run_id: str) -> Run:
        return self.call(calls.cancel(run_id))

    def run_events(self, run_id: str, *, after: int | None = None) -> Iterator[RunEvent]:
        """The run's events (SSE) from after ``after``, ending with the ``result`` event that carries the run."""
        headers = self.base_headers()
        if after is not None:
            headers["Last-Event-ID"] = str(after)
        for event in self._events(calls.run_events_path(run_id), None, headers):
            yield run_event(event)

    def wait_run(self, run_id: str) -> Run:
        """Follow the run's events until it has finished; the finished run."""
        for event in self.run_events(run_id):
            finished = event.run()
            if finished is not None:
                return finished
        return self.run(run_id)

    # ------------------------------------------------------------ claims and tasks

    def claim_paths(
        self,
        paths: list[str],
        *,
        exclusive: bool = True,
        reason: str | None = None,
        repo: str | None = None,
        confirm: bool = False,
        idempotency_key: str | None = None,
    ) -> cl.ClaimResult:
        return self.call(
            cl.claim_paths(
                paths, exclusive=exclusive, reason=reason, repo=repo, confirm=confirm, idempotency_key=idempotency_key
            )
        )

    def release_paths(
        self,
        *,
        ids: list[str] | None = None,
        paths: list[str] | None = None,
        repo: str | None = None,
        confirm: bool = False,
    ) -> cl.ReleaseResult:
        """The caller's claims by id or pattern; all of them when neither is given."""
        return self.call(cl.release_paths(ids=ids, paths=paths, repo=repo, confirm=confirm))

    def check_paths(self, repo: str, paths: list[str], *, as_agent: bool = True) -> cl.CheckResult:
        return self.call(cl.check_paths(repo, paths, as_agent=as_agent))

    def claims(self, *, repo: str | None = None, agent: str | None = None) -> cl.ClaimList:
        return self.call(cl.claims(repo=repo, agent=agent))

    def task_post(
        self,
        title: str,
        body: str,
        *,
        to: str | None = None,
        role: str | None = None,
        repo: str | None = None,
        cap: str | None = None,
        priority: int = 0,
        confirm: bool = False,
    ) -> cl.TaskAnswer:
        return self.call(
            cl.task_post(title, body, to=to, role=role, repo=repo, cap=cap, priority=priority, confirm=confirm)
        )

    def task_claim(
        self, *, role: str | None = None, repo: str | None = None, cap: str | None = None, confirm: bool = False
    ) -> cl.TaskAnswer:
        return self.call(cl.task_claim(role=role, repo=repo, cap=cap, confirm=confirm))

    def task_update(
        self,
        task_id: str,
        action: cl.TaskAction,
        *,
        token: int,
        text: str | None = None,
        confirm: bool = False,
    ) -> cl.TaskAnswer:
        return self.call(cl.task_update(task_id, action, token=token, text=text, confirm=confirm))

    def tasks(self, *, state: str | None = None, role: str | None = None) -> cl.TaskList:
        return self.call(cl.tasks(state=state, role=role))


__all__ = ["MusterClient"]
