"""REST routes of mesh tasks: post, claim (atomic: exactly one claimer wins, across instances), done / fail /
release with the fencing token (a stale one is 409 ``stale_claim``), the list and one task with its history."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response

from muster_api.mesh.routes import AUTH_ERRORS, IDEMPOTENCY_CONFLICT, PROBLEM, WRITE_DOC, Call, Caller, answer
from muster_api.web.leanroute import LeanRoute
from muster_mesh.models import Label
from muster_mesh.tasks import (
    TaskAnswer,
    TaskClaim,
    TaskDetail,
    TaskDone,
    TaskFail,
    TaskList,
    TaskPost,
    TaskRelease,
    Tasks,
    TaskState,
)

router = APIRouter(prefix="/mesh", tags=["mesh tasks"], route_class=LeanRoute)
STALE: dict[int | str, dict[str, Any]] = {
    409: {"description": "`stale_claim`: the token no longer holds the task", **PROBLEM}
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no such task", **PROBLEM}}


def tasks_of(request: Request) -> Tasks:
    tasks: Tasks = request.app.state.tasks
    return tasks


@router.post(
    "/tasks",
    openapi_extra=WRITE_DOC,
    summary="task_post: a task for one agent, a role, a repo or a capability",
    response_model=TaskAnswer,
    responses={**AUTH_ERRORS, **IDEMPOTENCY_CONFLICT},
)
async def post(request: Request, body: TaskPost, call: Annotated[Call, Depends(Caller())]) -> Response:
    return answer(await tasks_of(request).post(body, token=call.token, idempotency_key=call.key))


@router.post(
    "/tasks/claim",
    openapi_extra=WRITE_DOC,
    summary="task_claim: take the caller's next open task (highest priority, oldest first), with a fencing token",
    response_model=TaskAnswer,
    responses=AUTH_ERRORS,
)
async def claim(request: Request, body: TaskClaim, call: Annotated[Call, Depends(Caller())]) -> Response:
    return answer(await tasks_of(request).claim(body, token=call.token))


async def _finish(request: Request, task_id: str, body: TaskDone | TaskFail | TaskRelease, call: Call) -> Response:
    return answer(await tasks_of(request).finish(task_id, body, token=call.token))


TaskIdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]


@router.post(
    "/tasks/{task_id}/done",
    openapi_extra=WRITE_DOC,
    response_model=TaskAnswer,
    responses={**AUTH_ERRORS, **STALE, **NOT_FOUND},
    summary="task_update done: the task is finished",
)
async def done(
    request: Request, task_id: TaskIdPath, body: TaskDone, call: Annotated[Call, Depends(Caller())]
) -> Response:
    return await _finish(request, task_id, body, call)


@router.post(
    "/tasks/{task_id}/fail",
    openapi_extra=WRITE_DOC,
    response_model=TaskAnswer,
    responses={**AUTH_ERRORS, **STALE, **NOT_FOUND},
    summary="task_update fail: the task cannot be done",
)
async def fail(
    request: Request, task_id: TaskIdPath, body: TaskFail, call: Annotated[Call, Depends(Caller())]
) -> Response:
    return await _finish(request, task_id, body, call)


@router.post(
    "/tasks/{task_id}/release",
    openapi_extra=WRITE_DOC,
    response_model=TaskAnswer,
    responses={**AUTH_ERRORS, **STALE, **NOT_FOUND},
    summary="task_update release: give the task back open",
)
async def release(
    request: Request, task_id: TaskIdPath, body: TaskRelease, call: Annotated[Call, Depends(Caller())]
) -> Response:
    return await _finish(request, task_id, body, call)


@router.get("/tasks", summary="The tasks (as they stand: a lapsed holder's task shows open)", response_model=TaskList)
async def list_tasks(
    request: Request,
    call: Annotated[Call, Depends(Caller("state", "role"))],
    state: Annotated[TaskState | None, Query()] = None,
    role: Annotated[Label | None, Query()] = None,
) -> Response:
    return answer(await tasks_of(request).list(state=state, role=role))


@router.get("/tasks/{task_id}", summary="One task with its history", response_model=TaskDetail, responses=NOT_FOUND)
async def get_task(request: Request, task_id: TaskIdPath, call: Annotated[Call, Depends(Caller())]) -> Response:
    return answer(await tasks_of(request).get(task_id))
