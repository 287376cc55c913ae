"""REST routes of the mesh capability: check-in, the directory, send, the inbox (read, long-poll, ack, SSE) and
check-out.

Authentication: the session token from the first confirmed check-in, as ``Authorization: Bearer <token>``; every
authenticated call renews the caller's lease. 401: no usable credentials; 403: someone else's. Idempotency:
``idempotency_key`` in a send's body, or the ``Idempotency-Key`` header on any mutating call; a replayed answer
carries ``Idempotent-Replayed: true``. Unknown body fields and unknown query parameters are refused (422, by name).

Dependencies are ``async def``: FastAPI runs plain ``def`` dependencies in a worker thread, a thread hop each per
request. Answers are serialised straight from the mesh's models (``model_dump_json``): FastAPI's response-model
round trip would validate and encode each answer a second time.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel

from muster_api.web.deps import WakeProbe, mesh_of, wake_probe_of
from muster_api.web.etag import conditional
from muster_api.web.leanroute import Direct, LeanRoute
from muster_mesh import (
    AckPreview,
    AckRequest,
    AckResult,
    AgentList,
    AgentView,
    CheckinPreview,
    CheckinRecord,
    CheckinRequest,
    CheckoutPreview,
    CheckoutRequest,
    CheckoutResult,
    DirectoryQuery,
    InboxPage,
    InvalidRequest,
    InvalidToken,
    MeshError,
    MessageReceipts,
    SendPreview,
    SendRequest,
    SendResult,
)
from muster_mesh.mesh import Mesh
from muster_mesh.models import (
    IDEMPOTENCY_KEY_PATTERN,
    MAX_PAGE,
    MAX_SEQ,
    MAX_WAIT_SECONDS,
    MESSAGE_ID_PATTERN,
    AgentId,
    Cursor,
    Label,
    Repo,
)

router = APIRouter(prefix="/mesh", tags=["mesh"], route_class=LeanRoute)

PROBLEM: dict[str, Any] = {"content": {"application/problem+json": {}}}
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {
        "description": "no token, an unknown one, its lease ended or it was taken over (`code` says which)",
        **PROBLEM,
    },
    403: {"description": "the token is someone else's", **PROBLEM},
    422: {"description": "invalid input: `errors` names each field and rule", **PROBLEM},
}
IDEMPOTENCY_CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "the Idempotency-Key was used with other arguments", **PROBLEM}
}

# The headers are read by one dependency (``Caller``) rather than declared per parameter: documented here instead.
_BEARER = {
    "name": "Authorization",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "`Bearer <session token>` from the first confirmed check-in; renews the caller's lease.",
}
_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
    "description": "A retry with the same key answers the first result (header `Idempotent-Replayed: true`).",
}
READ_DOC: dict[str, Any] = {"parameters": [_BEARER]}
WRITE_DOC: dict[str, Any] = {"parameters": [_BEARER, _KEY]}


KEY_PATTERN = re.compile(IDEMPOTENCY_KEY_PATTERN)


@dataclass(frozen=True, slots=True)
class Call:
    """Who calls and how: the mesh, the bearer token (None when absent: the mesh says whether it is needed) and the
    ``Idempotency-Key`` header."""

    mesh: Mesh
    token: str | None
    key: str | None
    wake: WakeProbe | None = None


class Caller(Direct):
    """One dependency per route, reading the headers itself (each FastAPI dependency costs a resolution per
    request), and refusing query parameters the route does not take: a typo such as ``wait=`` must not be
    silently ignored. Direct: a ``LeanRoute`` computes it from the request without resolving anything."""

    def __init__(self, *query: str) -> None:
        self.known = frozenset(query)

    def direct(self, request: Request) -> Call:
        if request.scope["query_string"]:
            self._refuse_unknown(request)
        token = None
        authorization = request.headers.get("authorization")
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise InvalidToken("Authorization must be 'Bearer <session token>'")
            token = value.strip()
        key = request.headers.get("idempotency-key")
        if key is not None and not KEY_PATTERN.fullmatch(key):
            raise InvalidRequest(
                "Idempotency-Key must be 1 to 128 printable ASCII characters without spaces",
                errors=[{"field": "Idempotency-Key", "rule": "string_pattern_mismatch", "message": "bad key"}],
            )
        return Call(mesh_of(request), token, key, wake_probe_of(request))

    def _refuse_unknown(self, request: Request) -> None:
        unknown = sorted(set(request.query_params) - self.known)
        if unknown:
            takes = ", ".join(sorted(self.known)) or "none"
            raise InvalidRequest(
                f"unknown query parameter(s): {', '.join(unknown)}; this route takes: {takes}",
                errors=[{"field": n, "rule": "extra_forbidden", "message": "unknown query parameter"} for n in unknown],
            )


def answer(model: BaseModel, *, exclude: set[str] | None = None) -> Response:
    headers = {"Idempotent-Replayed": "true"} if getattr(model, "replayed", False) else None
    return Response(model.model_dump_json(exclude=exclude), media_type="application/json", headers=headers)


@router.post(
    "/checkin",
    openapi_extra=WRITE_DOC,
    summary="agent_checkin: create or renew a presence lease",
    response_model=CheckinPreview | CheckinRecord,
    responses={
        **AUTH_ERRORS,
        409: {
            "description": "the Idempotency-Key was used with other arguments, or its check-in already gave its "
            "token (`token_given_once`: check in with `takeover: true` instead)",
            **PROBLEM,
        },
    },
)
async def checkin(body: CheckinRequest, call: Annotated[Call, Depends(Caller())]) -> Response:
    """Without `confirm: true` the answer is a preview (`{preview, action, agent}`) and nothing changes. Confirmed,
    the answer is the agent's record; the check-in that starts a session adds its `token` (once). A live agent_id is
    renewed only with its own token (401 without one, 403 with another's); an expired one is claimed anew."""
    result = await call.mesh.checkin(body, token=call.token, idempotency_key=call.key)
    if isinstance(result, CheckinRecord) and result.token is None:
        return answer(result, exclude={"token"})
    return answer(result)


@router.get(
    "/agents",
    openapi_extra=READ_DOC,
    summary="agents_list: the live directory with heartbeat and status ages",
    response_model=AgentList,
    responses={**AUTH_ERRORS, 304: {"description": "`If-None-Match` holds the current `ETag`: nothing changed"}},
)
async def list_agents(
    request: Request,
    call: Annotated[Call, Depends(Caller("repo", "role", "cap", "include_expired", "limit", "cursor"))],
    repo: Annotated[Repo | None, Query()] = None,
    role: Annotated[Label | None, Query()] = None,
    cap: Annotated[Label | None, Query()] = None,
    include_expired: bool = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[AgentId | None, Query(description="`next_cursor` of the previous page.")] = None,
) -> Response:
    query = DirectoryQuery(repo=repo, role=role, cap=cap, include_expired=include_expired, limit=limit, cursor=cursor)
    page = await call.mesh.directory(query, token=call.token)
    # The ages move with the clock: the tag covers the rest (the timestamps they are computed from included).
    return conditional(request, page.fingerprint(), page.json)


@router.get(
    "/agents/{agent_id}",
    openapi_extra=READ_DOC,
    summary="One agent of the directory (live or expired, until swept)",
    response_model=AgentView,
    responses={**AUTH_ERRORS, 404: {"description": "no such agent", **PROBLEM}},
)
async def get_agent(agent_id: Annotated[AgentId, Path()], call: Annotated[Call, Depends(Caller())]) -> Response:
    return answer(await call.mesh.get_agent(agent_id, token=call.token))


@router.post(
    "/messages",
    openapi_extra=WRITE_DOC,
    summary="agent_send: store a message in one agent's inbox, or fan out to live agents of a role/repo/cap",
    response_model=SendPreview | SendResult,
    responses={
        **AUTH_ERRORS,
        404: {"description": "`to` names an agent that never checked in; nothing stored", **PROBLEM},
        409: {"description": "`to` names an expired agent (nothing stored), or an idempotency conflict", **PROBLEM},
        413: {"description": "body over 64 KiB", **PROBLEM},
        429: {"description": "the sender's role/repo/cap fan-outs are over their rate; see Retry-After", **PROBLEM},
    },
)
async def send(body: SendRequest, call: Annotated[Call, Depends(Caller())]) -> Response:
    """Exactly one of `to`, `role`, `repo`, `cap`. `stored` counts the inboxes that hold the message once this
    answers (stored, not delivered); `followed` names the recipients a reader was following (handed it now), the
    others find it at their next read. A direct send to an agent whose lease ended is refused (409, nothing stored)
    with when it was last seen (`last_seen_at`), when its lease ended (`lease_ended_at`) and `wake_possible`."""
    if call.key is not None:
        if body.idempotency_key is not None and body.idempotency_key != call.key:
            raise InvalidRequest("idempotency_key in the body and the Idempotency-Key header differ")
        body = body.model_copy(update={"idempotency_key": call.key})
    result = await call.mesh.send(body, token=call.token)
    if isinstance(result, SendResult) and body.to is not None and result.stored and call.wake is not None:
        wake = await call.wake(body.to)
        if wake is not None:
            result = result.model_copy(update={"wake": wake})
    return answer(result, exclude=None if isinstance(result, SendResult) and result.wake else {"wake"})


MessageId = Annotated[str, Path(pattern=MESSAGE_ID_PATTERN, description="`message_id` of a send's answer.")]


@router.get(
    "/messages/{message_id}",
    openapi_extra=READ_DOC,
    summary="Delivery receipts: what became of a message in each inbox (stored, woken, read, acknowledged)",
    response_model=MessageReceipts,
    responses={
        **AUTH_ERRORS,
        404: {"description": "no message with this id that the caller sent or received", **PROBLEM},
    },
)
async def message_receipts(message_id: MessageId, call: Annotated[Call, Depends(Caller())]) -> Response:
    """The sender sees every recipient's receipt, a recipient its own; to anyone else the message does not exist.
    Receipts are kept as long as their inbox entries (until the sweeper removes read entries past retention)."""
    return answer(await call.mesh.receipts(message_id, token=call.token))


@router.get(
    "/inbox",
    openapi_extra=READ_DOC,
    summary="agent_inbox: read (and long-poll) the caller's inbox",
    response_model=InboxPage,
    responses={**AUTH_ERRORS, 422: {"description": "invalid input, or `after` beyond the inbox", **PROBLEM}},
)
async def read_inbox(
    call: Annotated[Call, Depends(Caller("after", "limit", "wait_seconds", "follow"))],
    after: Annotated[
        Cursor | None, Query(description="Cursor: messages after this sequence (at most the inbox's last).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    wait_seconds: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="Long-poll: answer as soon as a message is stored.")
    ] = 0,
    follow: Annotated[
        bool,
        Query(
            description="A reader on the agent's behalf (its auto-wake counting what is unread): the messages are "
            "recorded as woken, not read, and the read is not the agent's activity (it renews the lease only)."
        ),
    ] = False,
) -> Response:
    """Idempotent: the same `after` returns the same messages; reading never moves the stored cursor (ack does)."""
    return answer(
        await call.mesh.read_inbox(token=call.token, after=after, limit=limit, wait_seconds=wait_seconds, follow=follow)
    )


@router.post(
    "/inbox/ack",
    openapi_extra=WRITE_DOC,
    summary="Move the caller's stored cursor forward",
    response_model=AckPreview | AckResult,
    responses={**AUTH_ERRORS, **IDEMPOTENCY_CONFLICT},
)
async def ack(body: AckRequest, call: Annotated[Call, Depends(Caller())]) -> Response:
    return answer(await call.mesh.ack(body, token=call.token, idempotency_key=call.key))


@router.post(
    "/checkout",
    openapi_extra=WRITE_DOC,
    summary="Leave the roster: the lease ends now and the token stops working",
    response_model=CheckoutPreview | CheckoutResult,
    responses={**AUTH_ERRORS, **IDEMPOTENCY_CONFLICT},
)
async def checkout(
    call: Annotated[Call, Depends(Caller())], body: Annotated[CheckoutRequest | None, Body()] = None
) -> Response:
    return answer(await call.mesh.checkout(body or CheckoutRequest(), token=call.token, idempotency_key=call.key))


_LAST_EVENT_ID = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "schema": {"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
    "description": "Resume after this sequence (sent by an EventSource when it reconnects); wins over `after`.",
}


def _last_event_id(request: Request) -> int | None:
    """The header as a cursor; read here rather than declared so that OpenAPI does not call it nullable."""
    raw = request.headers.get("last-event-id")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_SEQ:
        raise InvalidRequest(
            f"Last-Event-ID must be a sequence number from 0 to {MAX_SEQ}",
            errors=[{"field": "Last-Event-ID", "rule": "int_parsing", "message": "not a sequence number"}],
        )
    return int(raw)


async def _first_page(
    request: Request,
    call: Annotated[Call, Depends(Caller("after"))],
    after: Annotated[Cursor | None, Query(description="Messages after this sequence.")] = None,
) -> tuple[Mesh, str | None, InboxPage]:
    # Read once before the stream starts, so a bad token is a 401 problem rather than a broken stream.
    last_event_id = _last_event_id(request)
    start = last_event_id if last_event_id is not None else after
    page = await call.mesh.read_inbox(token=call.token, after=start, limit=MAX_PAGE, follow=True)
    return call.mesh, call.token, page


@router.get(
    "/inbox/stream",
    openapi_extra={"parameters": [_BEARER, _LAST_EVENT_ID]},
    response_class=EventSourceResponse,
    summary="The caller's inbox as Server-Sent Events (event `message`, id = sequence; resumable with Last-Event-ID)",
    responses=AUTH_ERRORS,
)
async def stream_inbox(
    first: Annotated[tuple[Mesh, str | None, InboxPage], Depends(_first_page)],
) -> AsyncIterator[ServerSentEvent]:
    mesh, token, page = first
    while True:
        for message in page.messages:
            yield ServerSentEvent(
                event="message", id=str(message.seq), data=message.model_dump(mode="json", by_alias=True)
            )
        try:
            page = await mesh.read_inbox(
                token=token,
                after=page.next_cursor,
                limit=MAX_PAGE,
                wait_seconds=mesh.limits.max_wait_seconds,
                follow=True,
            )
        except MeshError as exc:
            yield ServerSentEvent(event="error", data={"code": exc.problem_extra["code"], "detail": str(exc)})
            return
