"""Workers: claim a queued run, execute it through ``muster_dispatch.dispatch`` and store its outcome, which claims
the next queued run in the same write (one round trip per short run on PostgreSQL, not two).

While a run executes, its worker renews the lease, flushes the journal as events come, and follows the run's
controls (steer, cancel) wherever they were posted: the notifier wakes it, the controls are rows. A worker that
loses its lease (another process saw it lapse and interrupted the run) cancels the dispatch and stores nothing more.
A worker shut down mid-run cancels the dispatch (no CLI left behind) and marks the run interrupted at once. A run
whose turn ends within a few turns of the event loop (no controls waiting for it, no claims check to run) needs none
of this: its rows and its end are one write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from muster_api.dispatch.claims_watch import ClaimsLookup, in_work_tree, warn_of_claims
from muster_api.dispatch.config import DispatchAgents
from muster_api.dispatch.errors import RunRequestError
from muster_api.dispatch.journal import BURST_TURNS, SqlJournal
from muster_api.dispatch.membership import Member, RunPresence, muster_executable
from muster_api.dispatch.models import Run
from muster_api.dispatch.notify import NEW_RUN, RunEnd, RunNotifier, control_key, shielded
from muster_api.dispatch.resting import RestingCandidates
from muster_api.dispatch.run_keys import RunKeys
from muster_api.dispatch.sleepers import Sleeper
from muster_api.dispatch.store import SqlConversationStore, SqlRunStore
from muster_api.dispatch.workspaces import resolve_workspace
from muster_api.settings import DispatchSettings
from muster_dispatch import (
    AgentEvent,
    AgentInput,
    Continuation,
    Dispatch,
    DispatchError,
    McpServer,
    TurnResult,
    dispatch,
    replay_agent,
)
from muster_dispatch.agents import DispatchAgent, FallbackAgent
from muster_dispatch.sandbox import SandboxProvider
from muster_mesh import Mesh, MeshError

log = logging.getLogger("muster.dispatch.worker")

STATUS = {"completed": "completed", "failed": "failed", "canceled": "cancelled"}
# Without LISTEN/NOTIFY (SQLite) a write by another process wakes nobody: waiters look again this often.
UNSHARED_POLL_SECONDS = 0.5


class WorkerState(Protocol):
    """What a worker reads from the capability it runs in (``DispatchState`` is one)."""

    @property
    def settings(self) -> DispatchSettings: ...
    @property
    def lease(self) -> timedelta: ...
    @property
    def now(self) -> Callable[[], datetime]: ...
    @property
    def notifier(self) -> RunNotifier: ...
    @property
    def store(self) -> SqlRunStore: ...
    @property
    def conversations(self) -> SqlConversationStore: ...
    def provider(self, agent: str | None) -> SandboxProvider: ...
    @property
    def agents(self) -> DispatchAgents: ...
    @property
    def claims(self) -> ClaimsLookup | None: ...
    @property
    def mesh(self) -> Mesh | None: ...
    @property
    def sleepers(self) -> dict[str, Sleeper]: ...
    @property
    def mcp_url(self) -> str: ...
    @property
    def keyed(self) -> bool: ...
    @property
    def run_keys(self) -> RunKeys: ...
    @property
    def resting(self) -> RestingCandidates: ...


def _json(value: Any) -> Any:
    """JSON-ready (error details are free-form)."""
    return json.loads(json.dumps(value, default=str))


def idle_wait(state: WorkerState) -> float:
    return state.settings.renew_every if state.notifier.shared else UNSHARED_POLL_SECONDS


async def work_forever(state: WorkerState, owner: str) -> None:
    # Subscribed for the worker's whole life: a run queued while it executes, or right after the end of a run found
    # nothing queued, leaves a wake-up waiting for it.
    async with state.notifier.subscribe(NEW_RUN) as queued:
        claimed: tuple[Run, bool] | None = None
        look = True
        while True:
            try:
                if claimed is None and look:
                    now = state.now()
                    with shielded():
                        claimed = await state.store.claim(owner, now, now + state.lease)
                if claimed is None:
                    with anyio.move_on_after(idle_wait(state)):
                        await queued.wait()
                    look = True
                    continue
                # The end of a run claims the next one; when it found none, wait for a wake-up before looking again.
                claimed = await execute(state, *claimed, owner)
                look = False
            except Exception:  # a database hiccup must not end the worker: the next claim retries
                claimed, look = None, True
                log.exception("dispatch worker %s failed; retrying", owner)
                await anyio.sleep(idle_wait(state))


async def sweep_forever(state: WorkerState) -> None:
    while True:
        await anyio.sleep(state.settings.renew_every)
        try:
            with shielded():
                lapsed = await state.store.interrupt_lapsed(state.now())
            for run_id in lapsed:
                log.warning("run %s interrupted: its worker stopped renewing the lease", run_id)
        except Exception:
            log.exception("dispatch sweep failed; retrying")


async def _prepare(
    state: WorkerState, run: Run, presence: RunPresence | None
) -> tuple[DispatchAgent, AgentInput, Path]:
    workspace = resolve_workspace(state.settings.workspaces_root, run.workspace)
    if run.replay_of is not None:
        source = await SqlJournal.open(state.store, run.replay_of, state.now)
        replay = replay_agent(source, divergence="warn" if run.divergence == "warn" else "fail", name=run.agent)
        return replay, AgentInput(run.prompt), workspace
    servers = [] if presence is None else await _mcp_servers(state, run, presence)
    # A continued conversation belongs to the fallback's first candidate: only a fresh turn may start further on.
    skip = state.resting.resting(run.agent, state.now()) if run.continuation is None else {}
    agent = state.agents.build(run.agent, state.conversations, mcp_servers=servers, skip=skip)
    continuation = None
    if run.continuation is not None:
        continuation = Continuation(str(run.continuation["conversation"]), bool(run.continuation.get("fork")))
    return agent, AgentInput(run.prompt, continuation, run.live_input), workspace


def _note_skipped(state: WorkerState, run: Run, agent: DispatchAgent, journal: SqlJournal) -> None:
    """The run's journal says which candidates a fallback left out for their quota, and until when."""
    if not isinstance(agent, FallbackAgent) or run.continuation is not None:
        return
    kept = {candidate.name for candidate in agent.agents}
    for name, until in state.resting.resting(run.agent, state.now()).items():
        if name not in kept:
            text = f"{name} skipped: in quota until {until.isoformat()}"
            journal.record("harness", {"agent": run.agent}, AgentEvent("warning", text=text, code="quota").to_dict())


async def _mcp_servers(state: WorkerState, run: Run, presence: RunPresence) -> list[McpServer]:
    """``muster mcp`` bound to the run's agent; behind API keys, with a key minted for this run (the model can read
    what its MCP server is given: never a key of the service)."""
    executable = muster_executable()
    if executable is None:
        log.warning("no muster executable found: %s runs without the mesh tools", presence.member.agent_id)
        return []
    key = await state.run_keys.mint(run.id, presence.member.agent_id, presence.token) if state.keyed else None
    return [presence.mcp_server(state.mcp_url, key, executable)]


async def _join(state: WorkerState, run: Run, journal: SqlJournal) -> RunPresence | None:
    """The run's agent checked in to the mesh, when its definition makes it a member (and this process has the
    mesh); a check-in refused (the agent_id held by a live session elsewhere) is a warning and the run goes on."""
    definition = state.agents.get(run.agent)
    membership = definition.membership if definition is not None and run.replay_of is None else None
    if membership is None or state.mesh is None or definition is None:
        return None
    agent_id = definition.mesh_agent_id()
    assert agent_id is not None
    member = Member(agent_id, membership.role, membership.repo or run.workspace, tuple(membership.caps))
    sleeper = state.sleepers.get(run.agent)
    try:
        with shielded():
            token = await sleeper.renew() if sleeper is not None else None
            stays = sleeper.idle_status if sleeper is not None else None
            presence = RunPresence(
                state.mesh, member, renew_every=state.settings.renew_every, token=token, stays_as=stays
            )
            await presence.checkin()
    except MeshError as exc:
        text = f"not checked in to the mesh as {agent_id}: {exc}"
        journal.record("harness", {"agent": run.agent}, AgentEvent("warning", text=text, code="mesh").to_dict())
        return None
    journal.observers.append(presence.observe)
    return presence


def outcome(result: TurnResult, finished_at: Any) -> dict[str, Any]:
    return {
        "status": STATUS[result.status],
        "finished_at": finished_at,
        "selected": result.selected,
        "attempts": _json([a.to_dict() for a in result.attempts]),
        "text": result.text,
        "usage": _json(result.usage.to_dict()),
        "error": _json(result.error.to_dict()) if result.error else None,
        "conversation": result.conversation,
    }


def failed(error: DispatchError | RunRequestError, finished_at: Any) -> dict[str, Any]:
    body = error.to_dict() if isinstance(error, DispatchError) else {"code": "configuration", "message": str(error)}
    return {"status": "failed", "finished_at": finished_at, "error": _json({"details": {}, **body})}


async def execute(state: WorkerState, run: Run, has_controls: bool, owner: str) -> tuple[Run, bool] | None:
    """Run it and store its end; the next run, claimed for this worker by the same write (None when none was
    queued). A member of the mesh is checked in for the run and out before its end is stored."""
    journal = SqlJournal(state.store, run.id, state.now)
    with shielded():
        presence = await _join(state, run, journal)
    claimed = await _execute(state, run, has_controls, owner, journal, presence)
    sleeper = state.sleepers.get(run.agent)
    if sleeper is not None:
        try:
            with shielded():
                await sleeper.after_run()
        except Exception:
            log.exception("the wake owed to the end of run %s failed", run.id)
    return claimed


async def _execute(
    state: WorkerState, run: Run, has_controls: bool, owner: str, journal: SqlJournal, presence: RunPresence | None
) -> tuple[Run, bool] | None:
    now = state.now
    try:
        with shielded():
            agent, input, workspace = await _prepare(state, run, presence)
        _note_skipped(state, run, agent, journal)
        provider = state.provider(run.agent if run.replay_of is None else None)
        running = dispatch(
            agent, input, workspace=workspace, provider=provider, deadline=run.deadline_s, journal=journal
        )
    except (DispatchError, RunRequestError) as exc:
        with shielded():
            await _leave(state, run, presence)
            return await _end(state, run, owner, failed(exc, now()), journal)
    values: dict[str, Any] | None = None
    claimed: tuple[Run, bool] | None = None
    claims = state.claims if run.replay_of is None else None  # a replay changes no file
    try:
        # Controls posted while it was queued, or a claims check to run (under a renewed lease), need the helpers
        # from the start.
        if not has_controls and not (claims is not None and in_work_tree(workspace)) and await _ended_soon(running):
            values = await _concluded(state, run, agent, running)
        else:
            async with anyio.create_task_group() as group:
                group.start_soon(journal.keep_flushing)
                group.start_soon(_tend, state, run, owner, running, journal)
                if presence is not None:
                    group.start_soon(presence.keep)
                values = await _concluded(state, run, agent, running)
                if claims is not None:
                    scope = {"dispatch": running.id, "agent": running.agent.name}
                    await warn_of_claims(claims, workspace, journal, scope)
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _leave(state, run, presence)
            if values is None:  # shut down mid-run: nothing may keep running, and nobody will finish it later
                await running.cancel()
                error = {"code": "interrupted", "message": "the worker shut down during the run", "details": {}}
                interrupted = {"status": "interrupted", "finished_at": now(), "error": error}
                last_events = await journal.take_pending()
                end = ending(run, interrupted, journal.seq)
                if not await state.store.finish(run.id, owner, interrupted, last_events, end):
                    log.warning("run %s was taken from worker %s; its outcome is not stored", run.id, owner)
            else:
                claimed = await _end(state, run, owner, values, journal)
    return claimed


async def _ended_soon(running: Dispatch) -> bool:
    """Whether the turn, started now, ended within the turns of the event loop the journal's flusher gives a burst:
    such a run's end is stored without the helper tasks a longer one needs (its journal's flusher, the follower of its
    controls and lease, its presence on the mesh), which cost more to start and cancel than a short run's own work."""
    running.start()
    for _ in range(BURST_TURNS):
        await anyio.lowlevel.checkpoint()
        if running.over:
            return True
    return False


async def _concluded(state: WorkerState, run: Run, agent: DispatchAgent, running: Dispatch) -> dict[str, Any]:
    """The run's outcome once its turn ended."""
    try:
        result = await running.result()
    except DispatchError as exc:  # a replay that diverged or ran out
        return failed(exc, state.now())
    if isinstance(agent, FallbackAgent):
        state.resting.note(run.agent, result, state.now())
    return outcome(result, state.now())


async def _leave(state: WorkerState, run: Run, presence: RunPresence | None) -> None:
    """The run's agent off the mesh (or asleep again) and its run key revoked, before the run's end is stored."""
    if presence is None:
        return
    with anyio.move_on_after(5):  # else the lease lapses by itself
        await presence.checkout()
    if state.keyed:
        try:
            with anyio.move_on_after(5):
                await state.run_keys.revoke(run.id)
        except Exception:  # the key is honoured only while the run runs: it dies with the run's end anyway
            log.exception("the key of run %s was not deleted", run.id)


def ending(run: Run, values: dict[str, Any], last_seq: int) -> RunEnd:
    """The run as its end stores it (what a reader of the run would read back), for the readers' wake-up."""
    return RunEnd(last_seq, run.model_copy(update={**values, "lease_expires_at": None}).model_dump_json())


async def _end(
    state: WorkerState, run: Run, owner: str, values: dict[str, Any], journal: SqlJournal
) -> tuple[Run, bool] | None:
    now = state.now()
    last_events = await journal.take_pending()
    stored, claimed = await state.store.finish_and_claim(
        run.id, owner, values, last_events, now, now + state.lease, ending(run, values, journal.seq)
    )
    if not stored:
        log.warning("run %s was taken from worker %s; its outcome is not stored", run.id, owner)
    return claimed


async def _renewed(state: WorkerState, run: Run, owner: str, running: Dispatch) -> bool:
    """The run's lease renewed; False once it is lost (the run interrupted elsewhere), which cancels the run here. A
    renewal that failed is tried again at the next one."""
    try:
        with shielded():
            kept = await state.store.renew(run.id, owner, state.now() + state.lease)
    except Exception:
        log.exception("lease renewal of run %s failed; retrying", run.id)
        return True
    if not kept:
        log.warning("run %s: lease lost (interrupted elsewhere); cancelling it here", run.id)
        await running.cancel()
    return kept


async def _tend(state: WorkerState, run: Run, owner: str, running: Dispatch, journal: SqlJournal) -> None:
    """Follow the run's controls (wherever they were posted: the notifier wakes this task, the controls are rows) and
    renew its lease every ``renew_every``, in one task. It looks at once: controls posted while the run was queued,
    or since its claim, before this task subscribed."""
    seen = 0
    renew_at: float | None = anyio.current_time() + state.settings.renew_every
    async with state.notifier.subscribe(control_key(run.id)) as sub:
        while True:
            with shielded():
                pending = await state.store.controls_after(run.id, seen)
            for control_id, kind, text in pending:
                seen = control_id
                await _apply(kind, text, running, journal)
            if renew_at is not None and anyio.current_time() >= renew_at:
                kept = await _renewed(state, run, owner, running)
                renew_at = anyio.current_time() + state.settings.renew_every if kept else None
            wait = idle_wait(state)
            if renew_at is not None:
                wait = min(wait, max(renew_at - anyio.current_time(), 0.0))
            with anyio.move_on_after(wait):
                await sub.wait()


async def _apply(kind: str, text: str | None, running: Dispatch, journal: SqlJournal) -> None:
    if kind == "cancel":
        await running.cancel()
        return
    try:
        await running.steer(text or "")
    except DispatchError as exc:
        warning = AgentEvent("warning", text=f"steering refused: {exc.message}", code="steering")
        journal.record("harness", {"dispatch": running.id, "agent": running.agent.name}, warning.to_dict())
