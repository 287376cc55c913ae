"""``GET /mesh/backlog``: unread counts per agent, for people watching the mesh (the dashboard, ``muster agents``).

Counts only: never a body, a sender or a token, and no token is asked for (it renews no lease). Behind
``MUSTER_API_KEYS`` like every route. Answers ``ETag`` / 304 like the directory it sits beside.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from muster_api.mesh.routes import AUTH_ERRORS, Call, Caller
from muster_api.web.etag import conditional
from muster_mesh import BacklogList, DirectoryQuery
from muster_mesh.models import MAX_PAGE, AgentId, Label, Repo

router = APIRouter(prefix="/mesh", tags=["mesh"])


@router.get(
    "/backlog",
    summary="Unread messages per agent (counts only), in the directory's order and with its filters",
    response_model=BacklogList,
    responses={**AUTH_ERRORS, 304: {"description": "`If-None-Match` holds the current `ETag`: nothing changed"}},
)
async def backlog(
    request: Request,
    call: Annotated[Call, Depends(Caller("repo", "role", "cap", "include_expired", "limit", "cursor"))],
    repo: Annotated[Repo | None, Query()] = None,
    role: Annotated[Label | None, Query()] = None,
    cap: Annotated[Label | None, Query()] = None,
    include_expired: bool = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[AgentId | None, Query(description="`next_cursor` of the previous page.")] = None,
) -> Response:
    page = await call.mesh.backlog(
        DirectoryQuery(repo=repo, role=role, cap=cap, include_expired=include_expired, limit=limit, cursor=cursor)
    )
    return conditional(request, page.model_dump_json().encode())
