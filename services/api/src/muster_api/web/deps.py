"""The service's shared dependencies, named once as ``Annotated`` aliases: a route takes ``runtime: RuntimeDep`` or
``a2a: A2ADep`` or ``state: DispatchDep`` instead of reaching into ``request.app.state`` itself.

The capability modules (``muster_api.mesh``, ``.a2a``, ``.dispatch``) stay independent of each other (an
import-linter contract), and every one of them may import this module: so it imports none of them at run time. The
capability types are imported for the type checker only; at run time FastAPI needs the dependency, not the type.
The getters are coroutines although they do not wait: FastAPI runs a plain function dependency in its thread pool,
a thread hop on every request for an attribute read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from fastapi import Depends, Request

from muster_api.runtime import Runtime
from muster_api.web.leanroute import Direct
from muster_mesh import Mesh
from muster_mesh.models import WakeAnswer

if TYPE_CHECKING:
    from muster_api.a2a.component import A2AState
    from muster_api.dispatch.component import DispatchState


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def mesh_of(request: Request) -> Mesh:
    """The mesh, for the mesh routes' one dependency (``mesh.routes.Caller``), which reads everything it needs from
    the request itself: a plain function, since a lean route computes that dependency without awaiting anything."""
    mesh: Mesh = request.app.state.mesh
    return mesh


class WakeProbe(Protocol):
    """What a direct message to ``agent_id`` will do to it when the service wakes it on a message (the dispatch
    capability answers); None for any other agent."""

    async def __call__(self, agent_id: str) -> WakeAnswer | None: ...


def wake_probe_of(request: Request) -> WakeProbe | None:
    probe: WakeProbe | None = getattr(request.app.state, "wake_probe", None)
    return probe


async def get_a2a(request: Request) -> A2AState:
    return request.app.state.a2a  # type: ignore[no-any-return]


class _Dispatch(Direct):
    """The dispatch state: ``Direct``, so a ``LeanRoute`` (the run routes) reads it without resolving anything."""

    def direct(self, request: Request) -> DispatchState:
        return request.app.state.dispatch  # type: ignore[no-any-return]


get_dispatch = _Dispatch()


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
if TYPE_CHECKING:
    A2ADep = Annotated[A2AState, Depends(get_a2a)]
    DispatchDep = Annotated[DispatchState, Depends(get_dispatch)]
else:
    A2ADep = Annotated[object, Depends(get_a2a)]
    DispatchDep = Annotated[object, Depends(get_dispatch)]

__all__ = ["A2ADep", "DispatchDep", "RuntimeDep", "get_a2a", "get_dispatch", "get_runtime", "mesh_of"]
