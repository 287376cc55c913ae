"""The application factory: everything is built here, from the settings it is given."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from muster_api import __version__, dashboard
from muster_api.a2a import component as a2a_component
from muster_api.a2a.routes import router as a2a_router
from muster_api.claims_lookup import mesh_claims
from muster_api.commands.logs import configure as configure_logging
from muster_api.config_routes import router as config_router
from muster_api.db.engine import create_engine
from muster_api.db.migrate import upgrade
from muster_api.db.url import redact
from muster_api.dispatch import component as dispatch_component
from muster_api.dispatch.routes import router as dispatch_router
from muster_api.mesh import component as mesh_component
from muster_api.mesh.backlog import router as backlog_router
from muster_api.mesh.claims_routes import router as claims_router
from muster_api.mesh.routes import router as mesh_router
from muster_api.mesh.search_routes import router as search_router
from muster_api.mesh.tasks_routes import router as tasks_router
from muster_api.mesh.threads_routes import router as threads_router
from muster_api.notify import component as notify_component
from muster_api.notify.routes import router as notify_router
from muster_api.runtime import Runtime
from muster_api.served.apps import PREFIX as SERVED_PREFIX
from muster_api.served.apps import PUBLIC_CARDS, ServedAgents
from muster_api.settings import Settings
from muster_api.web import openapi, problems
from muster_api.web.health import router as health_router
from muster_api.web.leanroute import HotPaths
from muster_api.web.middleware import Edge

log = logging.getLogger("muster.api")


def create_app(
    settings: Settings | None = None, *, runtime: Runtime | None = None, freeze_after_start: bool = False
) -> FastAPI:
    """Build the app. Pass ``runtime`` to inject a clock (tests); otherwise one is built from ``settings``.
    ``freeze_after_start``: the process serves this one app (``muster serve``), see ``app_from_env``."""
    settings = settings or (runtime.settings if runtime else Settings())
    configure_logging(settings.log_level)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt = runtime or Runtime(settings=settings, engine=create_engine(settings.database_url))
        app.state.runtime = rt
        log.info("starting database=%s", redact(settings.database_url))
        try:
            if settings.migrate_on_startup:
                await upgrade(rt.engine)
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(rt.running())
                for component in (mesh_component, a2a_component):
                    await stack.enter_async_context(component.lifespan(app, rt))
                claims = mesh_claims(app.state.mesh)
                await stack.enter_async_context(dispatch_component.lifespan(app, rt, claims))
                await stack.enter_async_context(notify_component.lifespan(app, rt))
                if freeze_after_start:
                    # Everything alive now (modules, the app, its routes, models and stores) lives as long as the
                    # process: moved out of the collector's generations, a full collection no longer walks it
                    # (measured on the mesh: a 100 ms gen-2 pause under load, a wake-up's p99 several times its
                    # median). Process-wide, so only for a process that serves this one app.
                    gc.freeze()
                yield
        finally:
            await rt.engine.dispose()

    # /docs is served by the dashboard from local assets (FastAPI's pages load theirs from a CDN); no ReDoc.
    app = FastAPI(title="Muster", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    problems.install(app)
    openapi.install(app)
    for router in (
        health_router,
        mesh_router,
        backlog_router,
        claims_router,
        tasks_router,
        search_router,
        threads_router,
        a2a_router,
        dispatch_router,
        config_router,
        notify_router,
    ):
        app.include_router(router)
    # Each served agent is an A2A sub-application of its own (see served/apps.py), behind the same middlewares.
    app.mount(SERVED_PREFIX, ServedAgents())
    dashboard.install(app)
    app.state.lean_routes = settings.lean_routes
    if settings.lean_routes:
        # First: the hot mesh and run routes are found by a lookup instead of the router's walk (leanroute.HotPaths).
        app.router.routes.insert(0, HotPaths(app.router.routes))
    app.add_middleware(
        Edge,
        keys=[k.get_secret_value() for k in settings.api_keys],
        public=PUBLIC_CARDS if settings.a2a.serve_public_cards else None,
    )
    return app


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` (used by ``muster serve``): the process serves this one app."""
    return create_app(Settings(), freeze_after_start=True)
