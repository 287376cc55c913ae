"""REST routes of the dispatch capability: agents, runs, their live events, steering and cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from muster_api.dispatch.component import DispatchState
from muster_api.dispatch.config import cli_state, credential_state, egress_setting
from muster_api.dispatch.errors import UnknownRunError
from muster_api.dispatch.events import handed_over, jsonl_lines, sse_stream
from muster_api.dispatch.members import members_out
from muster_api.dispatch.models import (
    ID_PATTERN,
    MAX_PAGE,
    AgentOut,
    AgentsOut,
    MembersOut,
    Run,
    RunAccepted,
    RunIn,
    RunPage,
    SteerIn,
)
from muster_api.dispatch.runs import cancel_run, create_run, steer_run
from muster_api.web.deps import DispatchDep
from muster_api.web.leanroute import LeanRoute

# The largest journal sequence number (the column is a 32-bit integer).
LAST_SEQ = 2**31 - 1

router = APIRouter(prefix="/dispatch", tags=["dispatch"], route_class=LeanRoute)

ID_PATH = Path(pattern=ID_PATTERN)

PROBLEM: dict[str, Any] = {"content": {"application/problem+json": {}}}
NO_RUN: dict[int | str, dict[str, Any]] = {404: {"description": "no run of that id", **PROBLEM}}
POST_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "no dispatch agent of that name, or no run to continue or replay", **PROBLEM},
    409: {
        "description": "the workspace has a queued or running run, the idempotency key was used for another "
        "request, or the run to continue has no conversation (yet) / the run to replay is not finished",
        **PROBLEM,
    },
    422: {"description": "invalid input (the field and the rule are named), or a broken agent definition", **PROBLEM},
}
OVER: dict[int | str, dict[str, Any]] = {409: {"description": "the run is over", **PROBLEM}}
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def agents_out(state: DispatchState) -> AgentsOut:
    out: list[AgentOut] = []
    for name, definition in sorted(state.agents.definitions.items()):
        installed, version = cli_state(definition)
        out.append(
            AgentOut(
                name=name,
                kind=definition.kind,
                harness=definition.harness,
                model=definition.model,
                agents=definition.members,
                installed=installed,
                version=version,
                credentials=credential_state(definition, state.host_home),
                sandbox=definition.sandbox,
                egress=egress_setting(definition),
                builtin=definition.builtin,
                error=definition.error,
            )
        )
    return AgentsOut(agents=out)


@router.get("/agents")
async def list_agents(state: DispatchDep) -> AgentsOut:
    return agents_out(state)


@router.get("/members")
async def list_members(state: DispatchDep) -> MembersOut:
    """The agents that are mesh members: each one's agent_id, its running run, whether it wakes, the role it
    serves (the dashboard's roster joins them by agent_id)."""
    return await members_out(state)


@router.post("/reload", responses={422: {"description": "the config file is broken", **PROBLEM}})
async def reload_agents(state: DispatchDep) -> AgentsOut:
    await state.reload()
    return agents_out(state)


@router.post("/runs", status_code=202, response_model=RunAccepted, responses=POST_ERRORS)
async def post_run(body: RunIn, state: DispatchDep) -> JSONResponse:
    run = await create_run(state, body)
    answer = {**run.model_dump(mode="json"), "workspace_path": str(state.settings.workspaces_root / run.workspace)}
    return JSONResponse(answer, status_code=202, headers={"Location": f"/dispatch/runs/{run.id}"})


@router.get("/runs")
async def list_runs(
    state: DispatchDep,
    agent: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[
        Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"] | None, Query()
    ] = None,
    cursor: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> RunPage:
    runs = await state.store.page(agent=agent, status=status, before=cursor, limit=limit)
    return RunPage(runs=runs, next_cursor=runs[-1].id if len(runs) == limit else None)


async def _run(state: DispatchState, run_id: str) -> Run:
    run = await state.store.get(run_id)
    if run is None:
        raise UnknownRunError(f"no run {run_id}", field="run_id", rule="exists")
    return run


@router.get("/runs/{run_id}", responses=NO_RUN)
async def get_run(run_id: Annotated[str, ID_PATH], state: DispatchDep) -> Run:
    return await _run(state, run_id)


@router.get(
    "/runs/{run_id}/events",
    response_model=None,
    responses={
        **NO_RUN,
        200: {
            "description": "SSE (journal rows, then `event: result`), or the journal as JSONL with `format=jsonl`",
            "content": {"text/event-stream": {}, "application/jsonl": {}},
        },
    },
)
async def run_events(
    run_id: Annotated[str, ID_PATH],
    state: DispatchDep,
    format: Annotated[Literal["sse", "jsonl"], Query()] = "sse",
    last_event_id: Annotated[str | None, Header(pattern=r"^\d{1,12}$")] = None,
) -> Response:
    if format == "jsonl":
        await _run(state, run_id)
        return StreamingResponse(
            jsonl_lines(state, run_id),
            media_type="application/jsonl",
            headers={"Content-Disposition": f'attachment; filename="{run_id}.jsonl"'},
        )
    # A journal's sequence numbers are 32-bit: resuming after a larger one resumes after all of them (sent as it
    # is, it broke the statement's parameter).
    after = min(int(last_event_id or 0), LAST_SEQ)
    whole = handed_over(state, run_id, after)
    if whole is not None:  # a short run queued here, over: its end's wake-up said all a read would
        return Response(whole, media_type="text/event-stream", headers=SSE_HEADERS)
    over: list[bool] = []
    stream = sse_stream(state, run_id, after, over)
    first = await anext(stream)  # subscribed, and the run read: a 404 is still an answer of its own
    if over:  # the run was over: its whole stream is this item, answered without a stream kept open for more
        await stream.aclose()
        return Response(first, media_type="text/event-stream", headers=SSE_HEADERS)
    return SseResponse(_continued(first, stream), over)


async def _continued(first: bytes, rest: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    async with aclosing(rest):
        yield first
        async for chunk in rest:
            yield chunk


class SseResponse(StreamingResponse):
    """A run's SSE stream whose last item (``over`` says so once it is yielded) ends the response in the same write,
    and whose empty items write nothing: a short run's stream is its headers and one write, where Starlette's
    streaming response wrote each item and then the end, each write crossing every middleware and the socket."""

    def __init__(self, items: AsyncIterator[bytes], over: list[bool]) -> None:
        super().__init__(items, media_type="text/event-stream", headers=SSE_HEADERS)
        self.items, self.over = items, over

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The stream, ended when the client leaves. The listener for the client's leaving is a task of the loop
        cancelled once the stream is over, where Starlette's is a task group whose cancellation (anyio's, which
        formats the current task's repr) cost more than a short run's stream; leaving, rare, cancels the stream."""
        with anyio.CancelScope() as stream:
            listener = asyncio.get_running_loop().create_task(self._left(receive, stream))
            try:
                await self.stream_response(send)
            finally:
                listener.cancel()

    async def _left(self, receive: Receive, stream: anyio.CancelScope) -> None:
        await self.listen_for_disconnect(receive)
        stream.cancel()

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        ended = False
        async for chunk in self.items:
            if chunk or self.over:
                ended = bool(self.over)
                await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
        if not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


@router.post("/runs/{run_id}/steer", status_code=202, responses={**NO_RUN, **OVER})
async def steer(run_id: Annotated[str, ID_PATH], body: SteerIn, state: DispatchDep) -> Run:
    return await steer_run(state, run_id, body.text)


@router.post("/runs/{run_id}/cancel", status_code=202, responses={**NO_RUN, **OVER})
async def cancel(run_id: Annotated[str, ID_PATH], state: DispatchDep) -> Run:
    return await cancel_run(state, run_id)
