"""REST routes of path claims: claim (preview without ``confirm``), release, check concrete paths, list live claims.

A claim lives while its holder's presence lease lives: there is no claim TTL. Authentication and idempotency as on
every mesh call (``Authorization: Bearer``, ``Idempotency-Key``); unknown fields and query parameters are refused.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic_core import to_json

from muster_api.mesh.routes import AUTH_ERRORS, IDEMPOTENCY_CONFLICT, READ_DOC, WRITE_DOC, Call, Caller, answer
from muster_api.web.etag import conditional
from muster_api.web.leanroute import LeanRoute
from muster_mesh.claims import (
    CheckRequest,
    CheckResult,
    ClaimList,
    ClaimRequest,
    ClaimResult,
    Claims,
    ReleaseRequest,
    ReleaseResult,
    check_json,
)
from muster_mesh.models import AgentId, Repo

router = APIRouter(prefix="/mesh", tags=["mesh claims"], route_class=LeanRoute)


@router.post(
    "/claims",
    openapi_extra=WRITE_DOC,
    summary="claim_paths: hold paths of a repository while the caller's presence lease lives",
    response_model=ClaimResult,
    responses={**AUTH_ERRORS, **IDEMPOTENCY_CONFLICT},
)
async def claim(body: ClaimRequest, call: Annotated[Call, Depends(Caller())]) -> Response:
    """Grants each pattern that no other agent's claim is in the way of; `conflicts` names holder, pattern, reason
    and since for the rest. An exclusive claim conflicts with any overlapping claim of another agent, a shared one
    only with exclusive ones. Without `confirm: true`, a preview: nothing is stored."""
    return answer(await Claims(call.mesh).claim(body, token=call.token, idempotency_key=call.key))


@router.post(
    "/claims/release",
    openapi_extra=WRITE_DOC,
    summary="release_paths: end the caller's claims (by id or pattern; all of them when neither is given)",
    response_model=ReleaseResult,
    responses={**AUTH_ERRORS, **IDEMPOTENCY_CONFLICT},
)
async def release(body: ReleaseRequest, call: Annotated[Call, Depends(Caller())]) -> Response:
    return answer(await Claims(call.mesh).release(body, token=call.token, idempotency_key=call.key))


@router.post(
    "/claims/check",
    openapi_extra=READ_DOC,
    summary="check_paths: for each concrete path, the agent other than the caller holding it exclusively",
    response_model=CheckResult,
    responses=AUTH_ERRORS,
)
async def check(body: CheckRequest, call: Annotated[Call, Depends(Caller())]) -> Response:
    # Encoded without a model per path (``check_json``: the same bytes): a check of a hundred paths spent more on its
    # answer's models than on matching them.
    hits = await Claims(call.mesh).holders(body, token=call.token)
    return Response(check_json(body.paths, hits), media_type="application/json")


@router.get(
    "/claims",
    summary="The live claims (of a repo, of an agent)",
    response_model=ClaimList,
    responses={304: {"description": "`If-None-Match` holds the current `ETag`: nothing changed"}},
)
async def list_claims(
    request: Request,
    call: Annotated[Call, Depends(Caller("repo", "agent"))],
    repo: Annotated[Repo | None, Query()] = None,
    agent: Annotated[AgentId | None, Query()] = None,
) -> Response:
    listing = await Claims(call.mesh).list(repo=repo, agent=agent)
    return conditional(request, to_json(listing.model_dump(mode="json")))
