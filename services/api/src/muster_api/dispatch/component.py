"""Start-up and shut-down of the dispatch capability: the agents of the config file, the run store, the notifier, and
the workers (``MUSTER_DISPATCH_WORKERS`` of them in this process) with the sweep that interrupts runs whose worker
died. ``muster serve`` runs it inside the app's lifespan; ``muster worker`` runs it without HTTP (``run_workers``).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_a2a import AgentConfigError
from muster_api.configfile import read_config
from muster_api.db.dialect import Dialect, dialect_of
from muster_api.dispatch.claims_watch import ClaimsLookup
from muster_api.dispatch.config import DispatchAgents, parse_dispatch_agents
from muster_api.dispatch.membership import service_url
from muster_api.dispatch.notify import RunNotifier
from muster_api.dispatch.resting import RestingCandidates
from muster_api.dispatch.run_keys import RunKeys
from muster_api.dispatch.sleepers import Sleeper, foresee_wake, serve_sleepers
from muster_api.dispatch.store import SqlConversationStore, SqlRunStore
from muster_api.dispatch.store_postgres import PostgresRunStore
from muster_api.dispatch.store_sqlite import SqliteRunStore
from muster_api.dispatch.worker import sweep_forever, work_forever
from muster_api.errors import ConfigurationError
from muster_api.runtime import Runtime
from muster_api.settings import DispatchSettings
from muster_dispatch.egress import Egress
from muster_dispatch.sandbox import SandboxProvider
from muster_dispatch.sandboxes import SANDBOXES
from muster_mesh import Mesh
from muster_mesh.tasks import Tasks

log = logging.getLogger("muster.dispatch")


def run_store(engine: AsyncEngine, notifier: RunNotifier, dialect: Dialect | None = None) -> SqlRunStore:
    """The run store for this database: PostgreSQL's writes are one statement each (store_postgres.py), SQLite's one
    call on the driver's thread (store_sqlite.py)."""
    dialect = dialect or dialect_of(engine)
    kind: type[SqlRunStore] = dialect.pick(sqlite=SqliteRunStore, postgresql=PostgresRunStore)
    return kind(engine, notifier, dialect)


class DispatchState:
    """What ``app.state.dispatch`` holds, and what every worker of this process shares."""

    def __init__(
        self,
        runtime: Runtime,
        settings: DispatchSettings,
        config: Path,
        host_home: Path | None = None,
        mesh: Mesh | None = None,
        tasks: Tasks | None = None,
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.config = config
        self.now = runtime.now
        self.instance = f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.notifier = RunNotifier(runtime.engine, runtime.dialect, runtime.listening)
        self.store = run_store(runtime.engine, self.notifier, runtime.dialect)
        self.conversations = SqlConversationStore(runtime.engine, runtime.now)
        self.host_home = host_home or runtime.settings.host_home
        self.agents = DispatchAgents()
        # The mesh the agents of runs join (``mesh = {…}``), and where their MCP server reaches this service.
        self.mesh = mesh
        self.tasks = tasks
        self.sleepers: dict[str, Sleeper] = {}  # the agents with wake = true, by name (sleepers.py)
        service = runtime.settings
        self.mcp_url = service_url(settings.service_url, service.host, service.port)
        # Behind API keys, a run's MCP server gets a key of its own, scoped to its agent (run_keys.py).
        self.keyed = bool(service.api_keys)
        self.run_keys = RunKeys(runtime.engine)
        self.resting = RestingCandidates()  # fallback candidates in quota, as this process's runs found (resting.py)
        self._providers: dict[tuple[str, Egress], SandboxProvider] = {}
        # The path claims a turn's changes are checked against: composed by the service from the mesh (None: none).
        self.claims: ClaimsLookup | None = None
        self._reload_lock = anyio.Lock()

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.settings.lease_seconds)

    def provider(self, agent: str | None) -> SandboxProvider:
        """Where a run of ``agent`` executes: its sandbox with its egress (one provider per pair, kept across runs so
        the private homes stay warm); the host for a custom agent or a replay (``None``), which run no CLI. Raises
        ``DispatchError`` (``configuration``) for a sandbox this build lacks."""
        definition = self.agents.get(agent) if agent is not None else None
        sandbox = definition.sandbox if definition is not None else None
        egress = definition.egress if definition is not None else None
        key = (sandbox, egress) if sandbox is not None and egress is not None else ("local", Egress())
        provider = self._providers.get(key)
        if provider is None:
            provider = SANDBOXES[key[0]](self.settings.homes, egress=key[1], host_home=self.host_home)
            self._providers[key] = provider
        return provider

    async def reload(self) -> DispatchAgents:
        """Read the ``dispatch_agents`` block again; runs already executing keep the agent they were built with."""
        async with self._reload_lock:
            agents = parse_dispatch_agents(await read_config(self.config))
            self.agents = agents
        for name, definition in agents.definitions.items():
            if definition.error is not None:
                log.warning("dispatch agent %s unavailable: %s", name, definition.error)
        return agents


@asynccontextmanager
async def running(
    runtime: Runtime,
    settings: DispatchSettings | None = None,
    mesh: Mesh | None = None,
    tasks: Tasks | None = None,
    claims: ClaimsLookup | None = None,
) -> AsyncIterator[DispatchState]:
    """The capability, started: agents loaded, notifier listening, workers and the sweep running until exit. With
    ``mesh``, the agents that are members join it while they run; with ``claims``, each turn's changed paths are
    checked against them."""
    state = DispatchState(
        runtime, settings or runtime.settings.dispatch, runtime.settings.config, mesh=mesh, tasks=tasks
    )
    state.claims = claims
    try:
        await state.reload()
    except AgentConfigError as exc:
        raise ConfigurationError(str(exc)) from None
    try:
        async with anyio.create_task_group() as group:
            await group.start(state.notifier.run)
            for index in range(state.settings.workers):
                group.start_soon(work_forever, state, f"{state.instance}/{index}")
            group.start_soon(sweep_forever, state)
            group.start_soon(serve_sleepers, state)
            try:
                yield state
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):  # once every worker is done with it
            await state.store.aclose()


@asynccontextmanager
async def lifespan(app: FastAPI, runtime: Runtime, claims: ClaimsLookup | None = None) -> AsyncIterator[None]:
    mesh, tasks = getattr(app.state, "mesh", None), getattr(app.state, "tasks", None)
    async with running(runtime, mesh=mesh, tasks=tasks, claims=claims) as state:
        app.state.dispatch = state
        if state.keyed:
            app.state.scoped_keys = state.run_keys
        app.state.wake_probe = functools.partial(foresee_wake, state)
        yield
