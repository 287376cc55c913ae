"""``POST /config/reload``: the one route that spans capabilities, so it lives where they are composed. It re-reads
the config file's two blocks, ``agents`` (A2A) and ``dispatch_agents``, through each capability's own reload."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from muster_api.dispatch.routes import PROBLEM, agents_out
from muster_api.web.deps import A2ADep, DispatchDep
from muster_api.web.jsonbody import StrictJsonRoute

router = APIRouter(prefix="/config", tags=["config"], route_class=StrictJsonRoute)


@router.post("/reload", responses={422: {"description": "the config file is broken", **PROBLEM}})
async def reload_config(a2a_state: A2ADep, dispatch_state: DispatchDep) -> dict[str, Any]:
    a2a = await a2a_state.reload()
    await dispatch_state.reload()
    return {
        "a2a": {"agents": sorted(a2a.status), "skipped": a2a.skipped},
        "dispatch": agents_out(dispatch_state).model_dump(mode="json"),
    }
