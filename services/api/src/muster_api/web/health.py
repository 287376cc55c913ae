"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text

from muster_api.db.migrate import current_revision, head_revision
from muster_api.web.deps import RuntimeDep
from muster_api.web.problems import DATABASE_UNAVAILABLE, RETRY_AFTER_SECONDS, problem

router = APIRouter(tags=["health"])
RETRY = {"Retry-After": str(RETRY_AFTER_SECONDS)}


@router.get("/healthz", summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.head("/healthz", summary="The process is alive (status only)")
async def healthz_head() -> Response:
    # The headers a GET would carry, without its body.
    return Response(status_code=200, media_type="application/json")


@router.get(
    "/readyz",
    summary="The database answers and its schema is at the migration head",
    responses={503: {"description": "not ready, with the reason", "content": {"application/problem+json": {}}}},
)
async def readyz(runtime: RuntimeDep) -> Any:
    head = head_revision()
    try:
        async with runtime.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        current = await current_revision(runtime.engine)
    except Exception as exc:  # the reason is the answer here, whatever the driver raised
        return problem(
            503,
            f"database unreachable: {type(exc).__name__}",
            instance="/readyz",
            headers=RETRY,
            code=DATABASE_UNAVAILABLE,
        )
    if current != head:
        return problem(
            503,
            f"migrations not at head: database at {current}, code at {head}; run `muster migrate`",
            instance="/readyz",
            code="migrations_not_at_head",
        )
    return JSONResponse({"status": "ready", "database": runtime.dialect.name, "revision": current})


@router.head(
    "/readyz",
    summary="Readiness as a status only (200 or 503)",
    responses={503: {"description": "not ready (GET /readyz says why)"}},
)
async def readyz_head(runtime: RuntimeDep) -> Response:
    ready: Response = await readyz(runtime)
    kept = {k: v for k, v in ready.headers.items() if k == "retry-after"}
    # The headers a GET would carry, without its body.
    return Response(status_code=ready.status_code, headers=kept, media_type=ready.media_type)
