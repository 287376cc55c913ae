"""The dispatch agents that are mesh members, as the roster shows them: running (which run), asleep with wake, or
serving a role. Read-only: the agent's presence itself is the mesh's roster, joined by ``agent_id``."""

from __future__ import annotations

from sqlalchemy import select

from muster_api.dispatch.component import DispatchState
from muster_api.dispatch.models import MemberOut, MembersOut
from muster_api.dispatch.tables import runs


async def _running(state: DispatchState, names: list[str]) -> dict[str, str]:
    """The newest running run of each of ``names`` (an agent may run in several workspaces at once)."""
    if not names:
        return {}
    query = (
        select(runs.c.agent, runs.c.id)
        .where(runs.c.agent.in_(names), runs.c.status == "running")
        .order_by(runs.c.id.desc())
    )
    found: dict[str, str] = {}
    async with state.store.reads.connect() as conn:
        for agent, run_id in await conn.execute(query):
            found.setdefault(str(agent), str(run_id))
    return found


async def members_out(state: DispatchState) -> MembersOut:
    members = [
        (name, definition)
        for name, definition in sorted(state.agents.definitions.items())
        if definition.mesh_agent_id() is not None
    ]
    running = await _running(state, [name for name, _ in members])
    out: list[MemberOut] = []
    for name, definition in members:
        agent_id = definition.mesh_agent_id()
        assert agent_id is not None
        serve = definition.serves
        out.append(
            MemberOut(
                agent_id=agent_id,
                name=name,
                running=running.get(name),
                wake=definition.wakes,
                serving=serve.role if serve is not None else None,
            )
        )
    return MembersOut(members=out)
