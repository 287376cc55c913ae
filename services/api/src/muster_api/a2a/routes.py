"""REST routes of the a2a capability."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator

from muster_a2a import AgentStatus, CallRecord, Collision, UnknownCallError
from muster_api.a2a.component import A2AState
from muster_api.web.deps import A2ADep
from muster_api.web.jsonbody import StrictJsonRoute
from muster_mesh.models import NO_NUL, refuse_nul

MAX_TASK_CHARS = 100_000

router = APIRouter(prefix="/a2a", tags=["a2a"], route_class=StrictJsonRoute)


class AgentsOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agents: list[AgentStatus]
    collisions: list[Collision]
    skipped: dict[str, str]


MAX_ID_CHARS = 256

# A remote agent's own id for a task or a context, given back as it was received.
RemoteId = Annotated[
    str,
    AfterValidator(refuse_nul),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS, "pattern": NO_NUL}),
    Field(min_length=1, max_length=MAX_ID_CHARS),
]


class CallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # No NUL (PostgreSQL text cannot hold it): the mesh's rule for message bodies, checked by a scan.
    task: Annotated[
        str,
        AfterValidator(refuse_nul),
        WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_TASK_CHARS, "pattern": NO_NUL}),
    ] = Field(min_length=1, max_length=MAX_TASK_CHARS, description="The task text (no NUL character).")
    wait: bool = Field(
        default=True, strict=True, description="false: answer 202 with the stored call at once and follow it"
    )
    task_id: RemoteId | None = Field(
        default=None,
        description="Continue this remote task (the `task_id` of an input-required answer's metadata): `task` is "
        "the answer to its question. Give its `context_id` too.",
    )
    context_id: RemoteId | None = Field(
        default=None,
        description="The remote context to continue (the `context_id` of an earlier answer's metadata); without "
        "`task_id`, a new task in that context.",
    )
    continues: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="The `call_id` of an input-required call that `task` answers, instead of `task_id` and "
        "`context_id`: its remote task goes on, and that call's record then names this call (`continued_by` in its "
        "result's metadata) and the state the task reached.",
    )

    @field_validator("continues")
    @classmethod
    def _alone(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and (info.data.get("task_id") or info.data.get("context_id")):
            raise ValueError("continues names the task to go on with: give it without task_id and context_id")
        return value


class CallOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call_id: str
    text: str
    is_error: bool
    metadata: dict[str, Any]


def _agents_out(state: A2AState) -> AgentsOut:
    return AgentsOut(agents=state.statuses(), collisions=state.agents.collisions, skipped=state.agents.skipped)


@router.get("/agents")
async def list_agents(state: A2ADep) -> AgentsOut:
    return _agents_out(state)


@router.post(
    "/reload", responses={422: {"description": "the config file's agents block is broken (`detail` says how)"}}
)
async def reload_agents(state: A2ADep) -> AgentsOut:
    await state.reload()
    return _agents_out(state)


@router.post(
    "/tools/{tool_name}/call",
    response_model=None,
    responses={
        202: {"description": "`wait: false`: the stored call, to follow at GET /a2a/calls/{call_id}"},
        404: {"description": "no tool of that name is loaded (`tools` lists those there are)"},
        409: {
            "description": "another instance took the call over; look it up by its id (or `continues` names a call "
            "that is not input-required: `not_continuable`)"
        },
    },
)
async def call_tool(tool_name: str, body: CallIn, state: A2ADep) -> CallOut | JSONResponse:
    ids = {"task_id": body.task_id, "context_id": body.context_id, "continues": body.continues}
    if not body.wait:
        record = await state.start(tool_name, body.task, **ids)
        return JSONResponse(record.model_dump(mode="json"), status_code=202)
    record = await state.call(tool_name, body.task, **ids)
    assert record.result is not None
    return CallOut(call_id=record.id, **record.result.model_dump())


@router.get("/calls/{call_id}", responses={404: {"description": "no stored call with that id"}})
async def get_call(call_id: str, state: A2ADep) -> CallRecord:
    record = await state.store.get(call_id)
    if record is None:
        raise UnknownCallError(call_id)
    return record
