"""``GET /mesh/search``: full-text search over the messages the caller may see.

With the session token (``view=mine``, the default): what the caller sent and what reached its inbox; the call
renews its lease like any mesh call. ``view=all`` is the overseer's view, every message: granted to whoever passed
the service's ``X-API-Key`` guard, and on a service without keys only while it listens on loopback alone (not with
``MUSTER_ALLOW_OPEN_BIND``), where whoever reaches it runs on this machine.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from muster_api.mesh.routes import AUTH_ERRORS, PROBLEM, READ_DOC, Call, Caller, answer
from muster_api.runtime import Runtime
from muster_mesh.errors import OverseerOnly
from muster_mesh.search import DEFAULT_SEARCH_PAGE, MAX_QUERY_CHARS, MAX_SEARCH_PAGE, MeshSearch, SearchPage

router = APIRouter(prefix="/mesh", tags=["mesh"])


def overseer_allowed(runtime: Runtime) -> bool:
    """Whether ``view=all`` is open on this service (see the module's docstring)."""
    settings = runtime.settings
    return bool(settings.api_keys) or not settings.allow_open_bind


def overseer_view(request: Request, view: str) -> bool:
    """Whether the caller asked for the overseer's view (``view=all``); refused where it is not open."""
    if view != "all":
        return False
    if not overseer_allowed(request.app.state.runtime):
        raise OverseerOnly(
            "view=all is open only to holders of an API key, or on a keyless service bound to loopback alone"
        )
    return True


def search_of(request: Request) -> MeshSearch:
    search: MeshSearch = request.app.state.search
    return search


@router.get(
    "/search",
    openapi_extra=READ_DOC,
    summary="mesh_search: full-text search over the messages the caller sent or received (all: the overseer's)",
    response_model=SearchPage,
    responses={**AUTH_ERRORS, 403: {"description": "`view=all` is not open on this service", **PROBLEM}},
)
async def search(
    request: Request,
    call: Annotated[Call, Depends(Caller("q", "limit", "cursor", "view"))],
    q: Annotated[str, Query(max_length=MAX_QUERY_CHARS, description="Words; a message matches when it holds all.")],
    limit: Annotated[int, Query(ge=1, le=MAX_SEARCH_PAGE)] = DEFAULT_SEARCH_PAGE,
    cursor: Annotated[str | None, Query(max_length=12, description="`next_cursor` of the previous page.")] = None,
    view: Annotated[Literal["mine", "all"], Query(description="all: every message (the overseer's view).")] = "mine",
) -> Response:
    """Hits best first (then newest), each with a snippet whose matched words stand between « and »."""
    overseer = overseer_view(request, view)
    page = await search_of(request).search(q, token=call.token, overseer=overseer, limit=limit, cursor=cursor)
    return answer(page)
