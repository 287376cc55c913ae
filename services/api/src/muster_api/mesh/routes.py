"""REST routes of the mesh capability: the four agent tools (check-in, list, send, inbox) plus ack and an SSE stream.

Authentication: the session token from the first confirmed check-in, as ``Authorization: Bearer <token>``; every
authenticated call renews the caller's lease. Idempotency: ``idempotency_key`` in the body or the
``Idempotency-Key`` header on every mutating call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from muster_mesh import (
    AckRequest,
    AckResult,
    AgentList,
    CheckinRequest,
    CheckinResult,
    InboxPage,
    InvalidRequest,
    MeshError,
    SendRequest,
    SendResult,
)
from muster_mesh.mesh import Mesh

router = APIRouter(prefix="/mesh", tags=["mesh"])

PROBLEM: dict[str, Any] = {"content": {"application/problem+json": {}}}
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "token missing, unknown or its lease expired (`code` says which)", **PROBLEM},
    409: {"description": "conflict: agent_id in use, recipient expired, idempotency key reused", **PROBLEM},
}


def get_mesh(request: Request) -> Mesh:
    mesh: Mesh = request.app.state.mesh
    return mesh


def bearer_token(authorization: Annotated[str | None, Header()] = None) -> str | None:
    """The session token from ``Authorization: Bearer …`` (None when absent: the mesh says whether it is needed)."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise InvalidRequest("Authorization must be 'Bearer <session token>'")
    return value.strip()


def idempotency_header(idempotency_key: Annotated[str | None, Header(max_length=128)] = None) -> str | None:
    return idempotency_key


MeshDep = Annotated[Mesh, Depends(get_mesh)]
TokenDep = Annotated[str | None, Depends(bearer_token)]
KeyDep = Annotated[str | None, Depends(idempotency_header)]


M = TypeVar("M", CheckinRequest, SendRequest, AckRequest)


def _with_key(body: M, header: str | None) -> M:
    if header is None:
        return body
    if body.idempotency_key is not None and body.idempotency_key != header:
        raise InvalidRequest("idempotency_key in the body and the Idempotency-Key header differ")
    return body.model_copy(update={"idempotency_key": header})


@router.post("/checkin", summary="agent_checkin: create or renew a presence lease", responses=ERRORS)
async def checkin(body: CheckinRequest, mesh: MeshDep, token: TokenDep, key: KeyDep) -> CheckinResult:
    """Without `confirm: true` the answer is a preview and nothing changes. The first confirmed check-in of a session
    returns its token (once); later calls present it. A live agent_id is never taken over without its token."""
    return await mesh.checkin(_with_key(body, key), token=token)


@router.get("/agents", summary="agents_list: the live directory with heartbeat and status ages", responses=ERRORS)
async def list_agents(
    mesh: MeshDep,
    token: TokenDep,
    include_expired: bool = False,
    role: Annotated[str | None, Query(max_length=64)] = None,
    repo: Annotated[str | None, Query(max_length=200)] = None,
    cap: Annotated[str | None, Query(max_length=64)] = None,
) -> AgentList:
    return await mesh.list_agents(token=token, include_expired=include_expired, role=role, repo=repo, cap=cap)


@router.post(
    "/messages",
    summary="agent_send: store a message in one agent's inbox, or fan out to live agents of a role/repo/cap",
    responses={
        **ERRORS,
        404: {"description": "no such agent", **PROBLEM},
        413: {"description": "too large", **PROBLEM},
    },
)
async def send(body: SendRequest, mesh: MeshDep, token: TokenDep, key: KeyDep) -> SendResult:
    """`stored` counts the inboxes that hold the message once this answers (stored, not delivered)."""
    return await mesh.send(_with_key(body, key), token=token)


@router.get("/inbox", summary="agent_inbox: read (and long-poll) the caller's inbox", responses=ERRORS)
async def read_inbox(
    mesh: MeshDep,
    token: TokenDep,
    after: Annotated[int | None, Query(ge=0, description="Cursor: messages after this sequence.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    wait: Annotated[float, Query(ge=0, le=300, description="Long-poll seconds (capped by the server).")] = 0,
) -> InboxPage:
    """Idempotent: the same `after` returns the same messages; reading never moves the stored cursor (ack does)."""
    return await mesh.inbox(token=token, after=after, limit=limit, wait_seconds=wait)


@router.post("/inbox/ack", summary="Move the caller's stored cursor forward", responses=ERRORS)
async def ack(body: AckRequest, mesh: MeshDep, token: TokenDep, key: KeyDep) -> AckResult:
    return await mesh.ack(_with_key(body, key), token=token)


async def _first_page(
    mesh: MeshDep, token: TokenDep, after: Annotated[int | None, Query(ge=0)] = None
) -> tuple[Mesh, str | None, InboxPage]:
    # Read once before the stream starts, so a bad token is a 401 problem rather than a broken stream.
    return mesh, token, await mesh.inbox(token=token, after=after, limit=500)


@router.get(
    "/inbox/stream",
    response_class=EventSourceResponse,
    summary="The caller's inbox as Server-Sent Events (event `message`, id = sequence)",
    responses=ERRORS,
)
async def stream_inbox(
    first: Annotated[tuple[Mesh, str | None, InboxPage], Depends(_first_page)],
) -> AsyncIterator[ServerSentEvent]:
    mesh, token, page = first
    while True:
        for message in page.messages:
            yield ServerSentEvent(event="message", id=str(message.seq), data=message)
        try:
            page = await mesh.inbox(
                token=token, after=page.next_cursor, limit=500, wait_seconds=mesh.limits.max_wait_seconds
            )
        except MeshError as exc:
            yield ServerSentEvent(event="error", data={"code": exc.problem_extra["code"], "detail": str(exc)})
            return
