"""What the run routes do: validate a request against the agents, the workspaces and the stored runs, then queue it;
steer and cancel a run wherever its worker is (a control row the worker is woken for)."""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy.exc import IntegrityError

from muster_api.dispatch.config import DispatchAgents
from muster_api.dispatch.errors import (
    RunConflictError,
    RunFinishedError,
    UnknownAgentError,
    UnknownRunError,
    WorkspaceBusyError,
)
from muster_api.dispatch.models import Run, RunIn
from muster_api.dispatch.store import SqlRunStore, new_run_id
from muster_api.dispatch.workspaces import resolve_workspace
from muster_api.runtime import Runtime
from muster_api.settings import DispatchSettings
from muster_dispatch import DispatchError


class DispatchState(Protocol):
    """What the run requests need of the capability (``component.DispatchState`` is one; so is what a sleeper or a
    pool holds): named here, so that this module imports nothing that starts the capability."""

    @property
    def store(self) -> SqlRunStore: ...
    @property
    def agents(self) -> DispatchAgents: ...
    @property
    def settings(self) -> DispatchSettings: ...
    @property
    def runtime(self) -> Runtime: ...


# What an idempotent retry must repeat exactly.
_COMPARED = ("agent", "prompt", "workspace", "request", "deadline_s")


async def _source(state: DispatchState, run_id: str, field: str) -> Run:
    run = await state.store.get(run_id)
    if run is None:
        raise UnknownRunError(f"{field}: no run {run_id}", field=field, rule="exists")
    return run


async def _replay_values(state: DispatchState, body: RunIn) -> dict[str, Any]:
    assert body.replay_of is not None
    source = await _source(state, body.replay_of, "replay_of")
    if not source.finished:
        raise RunConflictError("replay_of: the run is not finished; replay it once it is", field="replay_of")
    return {
        "agent": source.agent,
        "prompt": body.prompt if body.prompt is not None else source.prompt,
        "workspace": source.workspace,
        "active_workspace": None,  # a replay runs nothing: it holds no workspace
        "request": {"replay_of": source.id, "divergence": body.divergence or "fail"},
    }


async def _continuation(state: DispatchState, body: RunIn) -> dict[str, Any] | None:
    cont = body.continuation
    if cont is None:
        return None
    conversation = cont.conversation
    if cont.run_id is not None:
        source = await _source(state, cont.run_id, "continuation.run_id")
        if source.conversation is None:
            raise RunConflictError(
                "continuation.run_id: the run has no conversation (yet) to continue",
                field="continuation.run_id",
                rule="has_conversation",
            )
        conversation = source.conversation
    return {"run_id": cont.run_id, "conversation": conversation, "fork": cont.fork}


async def _turn_values(state: DispatchState, body: RunIn) -> dict[str, Any]:
    assert body.agent is not None and body.workspace is not None and body.prompt is not None
    definition = state.agents.get(body.agent)
    if definition is None:
        raise UnknownAgentError(f"agent: no dispatch agent {body.agent!r}", field="agent", rule="exists")
    if definition.error is not None:
        raise DispatchError("configuration", f"agent {body.agent!r}: {definition.error}", {"field": "agent"})
    resolve_workspace(state.settings.workspaces_root, body.workspace)
    return {
        "agent": body.agent,
        "prompt": body.prompt,
        "workspace": body.workspace,
        "active_workspace": body.workspace,
        "request": {"continuation": await _continuation(state, body), "live_input": body.live_input},
    }


async def _existing(state: DispatchState, key: str, values: dict[str, Any]) -> Run | None:
    found = await state.store.by_key(key)
    if found is None:
        return None
    run, row = found
    if any(row[name] != values[name] for name in _COMPARED):
        raise RunConflictError(
            "idempotency_key: already used for a different request", field="idempotency_key", rule="unique"
        )
    return run


async def create_run(state: DispatchState, body: RunIn) -> Run:
    values = await (_replay_values(state, body) if body.replay_of is not None else _turn_values(state, body))
    values.update(
        id=new_run_id(),
        status="queued",
        deadline_s=body.deadline_s,
        idempotency_key=body.idempotency_key,
        queued_at=state.runtime.now(),
    )
    if body.idempotency_key is not None:
        existing = await _existing(state, body.idempotency_key, values)
        if existing is not None:
            return existing
    try:
        return await state.store.create(values)
    except IntegrityError:
        if body.idempotency_key is not None:
            existing = await _existing(state, body.idempotency_key, values)
            if existing is not None:
                return existing  # the same request, queued by a concurrent retry
        holder = await state.store.active_on(values["workspace"])
        raise WorkspaceBusyError(
            f"workspace: run {holder or '?'} is queued or running on {values['workspace']!r}; "
            "one run per workspace at a time",
            field="workspace",
            rule="one_active_run",
        ) from None


async def _control(state: DispatchState, run_id: str, kind: str, text: str | None) -> Run:
    run = await state.store.add_control(run_id, kind, text, state.runtime.now())
    if run is None:
        raise UnknownRunError(f"no run {run_id}", field="run_id", rule="exists")
    if run.finished:
        raise RunFinishedError(f"run {run_id} is {run.status}: it takes no {kind} any more")
    return run


async def steer_run(state: DispatchState, run_id: str, text: str) -> Run:
    return await _control(state, run_id, "steer", text)


async def cancel_run(state: DispatchState, run_id: str) -> Run:
    run = await _control(state, run_id, "cancel", None)
    if run.status == "queued" and await state.store.cancel_queued(run_id, state.runtime.now()):
        cancelled = await state.store.get(run_id)
        assert cancelled is not None
        return cancelled
    return run
