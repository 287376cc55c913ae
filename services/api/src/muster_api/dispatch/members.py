"""The dispatch agents that are mesh members, as the roster shows them: running (which run), asleep with wake, or
serving a role. An active run is a queued or a running one, as the wake decision sees it (a message to an agent
whose run is queued waits for that run's end). Read-only: the agent's presence itself is the mesh's roster, joined
by ``agent_id``."""

from __future__ import annotations

from muster_api.dispatch.component import DispatchState
from muster_api.dispatch.models import MemberOut, MembersOut


async def members_out(state: DispatchState) -> MembersOut:
    members = [
        (name, definition)
        for name, definition in sorted(state.agents.definitions.items())
        if definition.mesh_agent_id() is not None
    ]
    active = await state.store.active_runs([name for name, _ in members])
    out: list[MemberOut] = []
    for name, definition in members:
        agent_id = definition.mesh_agent_id()
        assert agent_id is not None
        serve = definition.serves
        run = active.get(name)
        out.append(
            MemberOut(
                agent_id=agent_id,
                name=name,
                running=run.id if run is not None else None,
                run_status=run.status if run is not None else None,
                wake=definition.wakes,
                serving=serve.role if serve is not None else None,
            )
        )
    return MembersOut(members=out)
