"""``GET /notify/deliveries``: what became of each notification, newest first. A delivery names its service
(Apprise's name for it) and never its URL, which may hold a secret."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from muster_api.notify.component import NotifyState
from muster_mesh import InvalidRequest

router = APIRouter(prefix="/notify", tags=["notify"])

QUERY = frozenset({"limit", "before"})
# A delivery id is a 32-bit integer column on both databases; a larger cursor names no delivery.
MAX_DELIVERY_ID = 2**31 - 1


class Delivery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    kind: str = Field(
        description="The event: message_to_human, task_failed, run_failed, quota_without_fallback, agent_stale."
    )
    subject: str = Field(description="What it is about: the person, task, run or agent.")
    events: int = Field(description="How many events it carries (a person's burst of messages is one delivery).")
    title: str
    service: str = Field(description="Apprise's name of the service the URL reaches (the URL itself is never shown).")
    state: Literal["pending", "sending", "delivered", "failed"]
    attempts: int
    last_error: str | None = Field(description="The class of the last failure: timeout, refused, invalid_url, …")
    created_at: datetime
    due_at: datetime
    finished_at: datetime | None


class Deliveries(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(description="Whether [notify] in the config file names a URL and an event.")
    deliveries: list[Delivery]
    next_before: int | None = Field(description="Pass as `before` for the next (older) page; None: the last page.")


@router.get("/deliveries", response_model=Deliveries, summary="The delivery log of notifications, newest first")
async def list_deliveries(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_DELIVERY_ID, description="`next_before` of the previous page.")
    ] = None,
) -> Deliveries:
    unknown = sorted(set(request.query_params) - QUERY)
    if unknown:
        raise InvalidRequest(
            f"unknown query parameter(s): {', '.join(unknown)}; this route takes: before, limit",
            errors=[{"field": n, "rule": "extra_forbidden", "message": "unknown query parameter"} for n in unknown],
        )
    state: NotifyState = request.app.state.notify
    rows = await state.outbox.page(limit, before)
    page = [Delivery.model_validate(row) for row in rows]
    next_before = page[-1].id if len(page) == limit else None
    return Deliveries(enabled=state.config.enabled, deliveries=page, next_before=next_before)
