"""``GET /mesh/threads`` and ``GET /mesh/threads/{thread_id}``: the conversations the caller is in, and one of them.

With the session token (``view=mine``, the default): the messages the caller sent and received; the call renews its
lease like any mesh call. ``view=all`` is the overseer's view (every message; with ``agent``, one agent's
conversation), open exactly where search's is (``muster_api.mesh.search_routes.overseer_view``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response

from muster_api.mesh.routes import AUTH_ERRORS, PROBLEM, READ_DOC, Call, Caller, answer
from muster_api.mesh.search_routes import overseer_view
from muster_mesh.models import AgentId
from muster_mesh.threads import (
    DEFAULT_THREAD_PAGE,
    MAX_THREAD_ID_CHARS,
    MAX_THREAD_PAGE,
    MeshThreads,
    ThreadMessages,
    ThreadPage,
)

router = APIRouter(prefix="/mesh", tags=["mesh"])

View = Annotated[
    Literal["mine", "all"], Query(description="all: every message (the overseer's view); with `agent`: its messages.")
]
Limit = Annotated[int, Query(ge=1, le=MAX_THREAD_PAGE)]
PageCursor = Annotated[str | None, Query(max_length=12, description="`next_cursor` of the previous page.")]
Agent = Annotated[AgentId | None, Query(description="With view=all: only this agent's messages (its conversation).")]
OVERSEER: dict[int | str, dict[str, Any]] = {403: {"description": "`view=all` is not open on this service", **PROBLEM}}


def threads_of(request: Request) -> MeshThreads:
    threads: MeshThreads = request.app.state.threads
    return threads


@router.get(
    "/threads",
    openapi_extra=READ_DOC,
    summary="The threads the caller is in (all: every thread, or one agent's), the latest first",
    response_model=ThreadPage,
    responses={**AUTH_ERRORS, **OVERSEER},
)
async def list_threads(
    request: Request,
    call: Annotated[Call, Depends(Caller("limit", "cursor", "view", "agent"))],
    limit: Limit = DEFAULT_THREAD_PAGE,
    cursor: PageCursor = None,
    view: View = "mine",
    agent: Agent = None,
) -> Response:
    """Each with its participants, how many of its messages the caller may see, and the last one (a preview)."""
    overseer = overseer_view(request, view)
    page = await threads_of(request).threads(
        token=call.token, overseer=overseer, agent=agent, limit=limit, cursor=cursor
    )
    return answer(page)


@router.get(
    "/threads/{thread_id:path}",
    openapi_extra=READ_DOC,
    summary="The messages of one thread the caller may see, oldest first",
    response_model=ThreadMessages,
    responses={**AUTH_ERRORS, **OVERSEER, 404: {"description": "no message of it the caller may see", **PROBLEM}},
)
async def read_thread(
    request: Request,
    call: Annotated[Call, Depends(Caller("limit", "cursor", "view", "agent"))],
    thread_id: Annotated[str, Path(min_length=1, max_length=MAX_THREAD_ID_CHARS, pattern=r"^[\x21-\x7e]+$")],
    limit: Limit = DEFAULT_THREAD_PAGE,
    cursor: PageCursor = None,
    view: View = "mine",
    agent: Agent = None,
) -> Response:
    overseer = overseer_view(request, view)
    page = await threads_of(request).thread(
        thread_id, token=call.token, overseer=overseer, agent=agent, limit=limit, cursor=cursor
    )
    return answer(page)
