"""Every route of the service as a ``Call``: what to send and how to read the answer, written once for the
synchronous and the asynchronous client (which only carry calls over their own HTTP connections)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from muster_client.directory import DirectoryQuery
from muster_client.errors import UnexpectedAnswer
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
    InboxPage,
    MessageReceipts,
    Ready,
    Run,
    RunPage,
    SearchPage,
    SendPreview,
    SendResult,
    ThreadMessages,
    ThreadPage,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request. ``as_agent``: the mesh session token goes along (mesh routes only). ``hold``: seconds the
    service may keep the answer back (a long-poll), added to the read timeout; None: no read timeout (the service
    bounds the wait itself, as an A2A call by its agent's budget)."""

    method: str
    path: str
    decode: Callable[[Any], T]
    params: dict[str, Any] | None = None
    body: dict[str, Any] | None = None
    idempotency_key: str | None = None
    as_agent: bool = False
    hold: float | None = 0.0


def model(cls: type[M]) -> Callable[[Any], M]:
    def decode(data: Any) -> M:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise UnexpectedAnswer(f"the service's answer is not a {cls.__name__}: {exc}") from exc

    return decode


def preview_or(preview: type[P], result: type[M]) -> Callable[[Any], P | M]:
    """A mutating mesh call answers a preview (``{"preview": true, …}``) unless it was confirmed."""
    as_preview, as_result = model(preview), model(result)

    def decode(data: Any) -> P | M:
        if isinstance(data, dict) and data.get("preview") is True:
            return as_preview(data)
        return as_result(data)

    return decode


def given(**fields: Any) -> dict[str, Any]:
    """The fields that were given (None means: not sent, the service's default applies)."""
    return {k: v for k, v in fields.items() if v is not None}


def segment(value: str) -> str:
    return quote(value, safe="")


# ---------------------------------------------------------------- health


def ready() -> Call[Ready]:
    return Call("GET", "/readyz", model(Ready))


# ---------------------------------------------------------------- mesh


def checkin(
    agent_id: str,
    *,
    role: str | None,
    repo: str | None,
    caps: list[str] | None,
    status: str | None,
    ttl_seconds: int | None,
    confirm: bool,
    takeover: bool,
    idempotency_key: str | None,
) -> Call[CheckinPreview | CheckinRecord]:
    body = given(agent_id=agent_id, role=role, repo=repo, caps=caps, status=status, ttl_seconds=ttl_seconds)
    if takeover:
        body["takeover"] = True
    return Call(
        "POST",
        "/mesh/checkin",
        preview_or(CheckinPreview, CheckinRecord),
        body={**body, "confirm": confirm},
        idempotency_key=idempotency_key,
        as_agent=True,
    )


def agents(query: DirectoryQuery) -> Call[AgentList]:
    return Call("GET", "/mesh/agents", model(AgentList), params=query.params(), as_agent=True)


def backlog(query: DirectoryQuery) -> Call[BacklogPage]:
    return Call("GET", "/mesh/backlog", model(BacklogPage), params=query.params())


def agent(agent_id: str) -> Call[AgentView]:
    return Call("GET", f"/mesh/agents/{segment(agent_id)}", model(AgentView), as_agent=True)


def send(
    body: str,
    *,
    to: str | None,
    role: str | None,
    repo: str | None,
    cap: str | None,
    thread_id: str | None,
    confirm: bool,
    idempotency_key: str | None,
) -> Call[SendPreview | SendResult]:
    fields = given(to=to, role=role, repo=repo, cap=cap, thread_id=thread_id, idempotency_key=idempotency_key)
    return Call(
        "POST",
        "/mesh/messages",
        preview_or(SendPreview, SendResult),
        body={**fields, "body": body, "confirm": confirm},
        as_agent=True,
    )


def inbox(*, after: int | None, limit: int | None, wait_seconds: float, follow: bool = False) -> Call[InboxPage]:
    params = given(after=after, limit=limit)
    if wait_seconds:
        params["wait_seconds"] = wait_seconds
    if follow:
        params["follow"] = "true"
    return Call("GET", "/mesh/inbox", model(InboxPage), params=params, as_agent=True, hold=wait_seconds)


def receipts(message_id: str) -> Call[MessageReceipts]:
    return Call("GET", f"/mesh/messages/{segment(message_id)}", model(MessageReceipts), as_agent=True)


def search(q: str, *, view: str, limit: int | None, cursor: str | None) -> Call[SearchPage]:
    params = {"q": q, **given(limit=limit, cursor=cursor)}
    if view != "mine":
        params["view"] = view
    return Call("GET", "/mesh/search", model(SearchPage), params=params, as_agent=view == "mine")


def _overseen(view: str, agent: str | None, limit: int | None, cursor: str | None) -> dict[str, Any]:
    params = given(agent=agent, limit=limit, cursor=cursor)
    if view != "mine":
        params["view"] = view
    return params


def threads(*, view: str, agent: str | None, limit: int | None, cursor: str | None) -> Call[ThreadPage]:
    params = _overseen(view, agent, limit, cursor)
    return Call("GET", "/mesh/threads", model(ThreadPage), params=params, as_agent=view == "mine")


def thread(
    thread_id: str, *, view: str, agent: str | None, limit: int | None, cursor: str | None
) -> Call[ThreadMessages]:
    params = _overseen(view, agent, limit, cursor)
    path = f"/mesh/threads/{segment(thread_id)}"
    return Call("GET", path, model(ThreadMessages), params=params, as_agent=view == "mine")


def ack(cursor: int, *, confirm: bool, idempotency_key: str | None) -> Call[AckPreview | AckResult]:
    return Call(
        "POST",
        "/mesh/inbox/ack",
        preview_or(AckPreview, AckResult),
        body={"cursor": cursor, "confirm": confirm},
        idempotency_key=idempotency_key,
        as_agent=True,
    )


def checkout(*, confirm: bool, idempotency_key: str | None) -> Call[CheckoutPreview | CheckoutResult]:
    return Call(
        "POST",
        "/mesh/checkout",
        preview_or(CheckoutPreview, CheckoutResult),
        body={"confirm": confirm},
        idempotency_key=idempotency_key,
        as_agent=True,
    )


INBOX_STREAM = "/mesh/inbox/stream"


# ---------------------------------------------------------------- A2A


def a2a_agents() -> Call[A2AAgents]:
    return Call("GET", "/a2a/agents", model(A2AAgents))


def a2a_reload() -> Call[A2AAgents]:
    return Call("POST", "/a2a/reload", model(A2AAgents))


def _a2a_body(
    task: str, wait: bool, task_id: str | None, context_id: str | None, continues: str | None
) -> dict[str, Any]:
    return {"task": task, "wait": wait, **given(task_id=task_id, context_id=context_id, continues=continues)}


def a2a_call(
    tool: str,
    task: str,
    *,
    task_id: str | None = None,
    context_id: str | None = None,
    continues: str | None = None,
) -> Call[A2ACallResult]:
    """Waits for the remote task's end (or its interruption: input-required, auth-required). ``continues`` (an
    input-required answer's ``call_id``), or ``task_id`` and ``context_id`` (its metadata), continue that remote
    task: ``task`` answers it. With ``continues`` the answered call's record learns how the task went on."""
    return Call(
        "POST",
        f"/a2a/tools/{segment(tool)}/call",
        model(A2ACallResult),
        body=_a2a_body(task, True, task_id, context_id, continues),
        hold=None,
    )


def a2a_start(
    tool: str,
    task: str,
    *,
    task_id: str | None = None,
    context_id: str | None = None,
    continues: str | None = None,
) -> Call[A2ACall]:
    """Answers the stored call at once (202); the service follows it: read it with ``a2a_get_call``."""
    return Call(
        "POST",
        f"/a2a/tools/{segment(tool)}/call",
        model(A2ACall),
        body=_a2a_body(task, False, task_id, context_id, continues),
    )


def a2a_get_call(call_id: str) -> Call[A2ACall]:
    return Call("GET", f"/a2a/calls/{segment(call_id)}", model(A2ACall))


# ---------------------------------------------------------------- dispatch runs


def dispatch_agents() -> Call[DispatchAgents]:
    return Call("GET", "/dispatch/agents", model(DispatchAgents))


def dispatch_members() -> Call[DispatchMembers]:
    return Call("GET", "/dispatch/members", model(DispatchMembers))


def start_run(
    agent: str,
    prompt: str,
    workspace: str,
    *,
    continuation: dict[str, Any] | None,
    deadline_s: float | None,
    live_input: bool,
    idempotency_key: str | None,
) -> Call[Run]:
    body = given(
        agent=agent,
        prompt=prompt,
        workspace=workspace,
        continuation=continuation,
        deadline_s=deadline_s,
        idempotency_key=idempotency_key,
    )
    if live_input:
        body["live_input"] = True
    return Call("POST", "/dispatch/runs", model(Run), body=body)


def run(run_id: str) -> Call[Run]:
    return Call("GET", f"/dispatch/runs/{segment(run_id)}", model(Run))


def runs(*, agent: str | None, status: str | None, cursor: str | None, limit: int | None) -> Call[RunPage]:
    return Call(
        "GET", "/dispatch/runs", model(RunPage), params=given(agent=agent, status=status, cursor=cursor, limit=limit)
    )


def steer(run_id: str, text: str) -> Call[Run]:
    return Call("POST", f"/dispatch/runs/{segment(run_id)}/steer", model(Run), body={"text": text})


def cancel(run_id: str) -> Call[Run]:
    return Call("POST", f"/dispatch/runs/{segment(run_id)}/cancel", model(Run))


def run_events_path(run_id: str) -> str:
    return f"/dispatch/runs/{segment(run_id)}/events"
