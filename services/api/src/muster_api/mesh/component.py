"""Start-up and shut-down of the mesh capability inside the service: the ``Mesh`` on the SQL store, its notifier
(LISTEN/NOTIFY on PostgreSQL, in-process on SQLite) and the expiry/retention sweeper."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from muster_api.db.dialect import Dialect
from muster_api.db.notify import PgNotifier
from muster_api.mesh.search import make_search
from muster_api.mesh.store import SqlMeshStore, TransactionNotifier
from muster_api.mesh.store_postgres import PostgresMeshStore
from muster_api.mesh.store_sqlite import SqliteMeshStore
from muster_api.mesh.threads import SqlThreads
from muster_api.runtime import Runtime
from muster_mesh import LocalNotifier, Mesh
from muster_mesh.search import MeshSearch
from muster_mesh.store import Notifier
from muster_mesh.tasks import TaskLimits, Tasks
from muster_mesh.threads import MeshThreads

log = logging.getLogger("muster.mesh")


async def _sweep_forever(mesh: Mesh, every: float) -> None:
    while True:
        await anyio.sleep(every)
        try:
            report = await mesh.sweep()
        except Exception:  # a failed sweep must not end the service: the next one retries
            log.exception("mesh sweep failed")
            continue
        if report.agents or report.messages or report.inbox_entries or report.idempotency_keys:
            log.info(
                "mesh sweep agents=%d messages=%d inbox_entries=%d idempotency_keys=%d",
                report.agents,
                report.messages,
                report.inbox_entries,
                report.idempotency_keys,
            )


def make_store(engine: AsyncEngine, dialect: Dialect, notifier: TransactionNotifier | None = None) -> SqlMeshStore:
    """The SQL mesh store with this database's own part."""
    store_class: type[SqlMeshStore] = dialect.pick(sqlite=SqliteMeshStore, postgresql=PostgresMeshStore)
    return store_class(engine, dialect, notifier)


@asynccontextmanager
async def _on_sqlite(runtime: Runtime, tg: TaskGroup) -> AsyncIterator[tuple[SqlMeshStore, Notifier]]:
    # One instance per database file: wake-ups stay in the process.
    store = SqliteMeshStore(runtime.engine, runtime.dialect)
    tg.start_soon(store.checkpoint_forever)
    yield store, LocalNotifier()


@asynccontextmanager
async def _on_postgres(runtime: Runtime, tg: TaskGroup) -> AsyncIterator[tuple[SqlMeshStore, Notifier]]:
    # Instances share the database: wake-ups travel by LISTEN/NOTIFY, sent by the notifier after the commit.
    pg = PgNotifier(runtime.engine, listening=runtime.listening)
    await tg.start(pg.run)
    store = PostgresMeshStore(runtime.engine, runtime.dialect, wake=pg.publish)
    try:
        await store.deliver_leftovers(runtime.now())
    except BaseException:
        with anyio.CancelScope(shield=True):
            await store.aclose()
        raise
    yield store, pg


@dataclass(frozen=True)
class MeshParts:
    mesh: Mesh
    tasks: Tasks
    search: MeshSearch
    threads: MeshThreads


@asynccontextmanager
async def running(runtime: Runtime) -> AsyncIterator[MeshParts]:
    """The mesh on the service's database, its notifier and its sweeper, until exit."""
    settings = runtime.settings.mesh
    parts = runtime.dialect.pick(sqlite=_on_sqlite, postgresql=_on_postgres)
    async with anyio.create_task_group() as tg, parts(runtime, tg) as (store, notifier):
        try:
            # Runtime.now is a plain callable returning UTC-aware datetimes: it is a muster_mesh Clock as it stands.
            mesh = Mesh(store, notifier, clock=runtime.now, limits=settings.limits())
            tasks = Tasks(mesh, TaskLimits(max_attempts=settings.task_max_attempts))
            driver = getattr(store, "driver", None)  # the PostgreSQL store's DriverPool
            held = getattr(store, "on_held", None)  # the SQLite store's held connection
            search = MeshSearch(mesh, make_search(runtime.engine, runtime.dialect, driver, held))
            threads = MeshThreads(mesh, SqlThreads(runtime.engine))
            tg.start_soon(_sweep_forever, mesh, settings.sweep_seconds)
            try:
                yield MeshParts(mesh, tasks, search, threads)
            finally:
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()


@asynccontextmanager
async def lifespan(app: FastAPI, runtime: Runtime) -> AsyncIterator[None]:
    async with running(runtime) as parts:
        app.state.mesh = parts.mesh
        app.state.tasks = parts.tasks
        app.state.search = parts.search
        app.state.threads = parts.threads
        yield
